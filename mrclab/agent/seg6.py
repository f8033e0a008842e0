"""Host routes that let plain kernel TCP ride the uSID fabric (the ``--transport tcp`` baseline).

The fabric forwards only full uSID paths (``fcbb:k:<leaf>:<spine>:<leaf>:<host>::``) and
delivers them shifted down to the host's own address ``fcbb:k:<host uSID>::``. A TCP
connection needs one address per end that stays the same in both directions, so the
sockets use the host addresses, and the kernel turns each host address into a path on
the way out: on every host, for every peer p and plane k,

    ip -6 route replace fcbb:k:<p uSID>::/128 encap seg6 mode inline segs <path to p on k> dev <NIC k>

``mode inline`` rewrites the destination to the path address and keeps the host address
as the final segment of an SRv6 header (SRH, 40 bytes). The fabric shifts the path down
to ``fcbb:k:<p uSID>::``; the receiving kernel, with ``seg6_enabled`` set on ``all`` and on
the NIC (both are required), finds one segment left, makes it the destination (its own
host address again) and hands the segment to TCP, whose checksum covered that final
destination from the start. The reply travels the same way with the roles swapped.

The path of a (src, dst) pair is ECMP-like: a flow hash of the pair picks one of the
planes x spines paths, so a pair's connection stays on one plane and one spine, as on a
bonded host behind hashing switches. The routes to a peer on the other planes (used by
the replies of connections the peer opened on its own hashed plane) take the same spine.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

from ..addressing import Plan
from .ecmp import flow_hash

SYSCTL = Path("/proc/sys/net/ipv6/conf")


def tcp_path(plan: Plan, src: int, dst: int) -> tuple[int, int]:
    """(plane, spine) of the pair's TCP connection."""
    return plan.ev_path(tcp_ev(plan, src, dst))


def tcp_ev(plan: Plan, src: int, dst: int) -> int:
    """The EV naming the pair's TCP path (for ``last_send``, which is keyed by EV)."""
    return flow_hash(src, dst) % plan.paths_per_pair


def plane_interfaces(plan: Plan, host: int) -> dict[int, str]:
    """Plane -> the interface holding this host's address on that plane (the fabric assigns them)."""
    out = subprocess.run(["ip", "-j", "-6", "addr", "show"], capture_output=True, text=True, check=True).stdout
    wanted = {str(plan.host_address(k, host)): k for k in range(plan.planes)}
    found = {}
    for link in json.loads(out or "[]"):
        for addr in link.get("addr_info", []):
            plane = wanted.get(addr.get("local"))
            if plane is not None:
                found[plane] = link["ifname"]
    missing = sorted(set(range(plan.planes)) - set(found))
    if missing:
        raise OSError(f"host {host} has no interface with its address on plane(s) {missing} "
                      f"(expected e.g. {plan.host_address(missing[0], host)})")
    return found


class HostRoutes:
    """The routes and sysctls of one host; :meth:`remove` puts everything back as it was."""

    def __init__(self, plan: Plan, host: int) -> None:
        self._plan = plan
        self._host = host
        self._routes: list[str] = []
        self._sysctls: dict[Path, str] = {}

    def routes(self, interfaces: dict[int, str]) -> list[str]:
        """The ``ip -6 route`` arguments (after ``replace``/``del``) for every peer on every plane.

        The kernel takes the SRH's 40 bytes off the path MTU of these routes by itself, so TCP's
        segments fit the NIC once encapsulated.
        """
        plan, host = self._plan, self._host
        lines = []
        for peer in range(plan.hosts):
            if peer == host:
                continue
            _, spine = tcp_path(plan, host, peer)
            for plane in range(plan.planes):
                path = plan.path_address(host, peer, plane, spine)
                lines.append(f"{plan.host_address(plane, peer)}/128 encap seg6 mode inline segs {path} "
                             f"dev {interfaces[plane]}")
        return lines

    def install(self) -> None:
        interfaces = plane_interfaces(self._plan, self._host)
        for name in ("all", *interfaces.values()):
            path = SYSCTL / name / "seg6_enabled"
            self._sysctls[path] = path.read_text().strip()
            path.write_text("1")
        self._routes = self.routes(interfaces)
        self._batch("replace", self._routes)

    def remove(self) -> None:
        if self._routes:
            self._batch("del", self._routes, check=False)
            self._routes = []
        for path, value in self._sysctls.items():
            with contextlib.suppress(OSError):  # the interface went away with its namespace
                path.write_text(value)
        self._sysctls.clear()

    @staticmethod
    def _batch(verb: str, routes: list[str], check: bool = True) -> None:
        script = "".join(f"route {verb} {line}\n" for line in routes)
        proc = subprocess.run(["ip", "-6", "-batch", "-"], input=script, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise OSError(f"installing seg6 host routes failed: {proc.stderr.strip().splitlines()[0]}")
