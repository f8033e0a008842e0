"""The environment doctor: one row per thing a lab needs, each with the command that fixes it."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROVISION = "sudo bash vagrant/provision.sh"


@dataclass(frozen=True)
class Row:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "required": self.required, "detail": self.detail, "fix": self.fix}


def _run(cmd: list[str], timeout: float = 5.0) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def kernel_datapath_available() -> bool:
    """The openvswitch kernel module is loaded (the faster datapath); else OVS runs in userspace."""
    return Path("/sys/module/openvswitch").exists()


def root() -> Row:
    ok = os.geteuid() == 0
    return Row("root", ok, "running as root" if ok else "labs create namespaces and switches", "run with sudo")


def ovs() -> Row:
    result = _run(["ovs-vsctl", "--timeout=3", "show"])
    ok = result is not None and result.returncode == 0
    return Row("ovs daemons", ok, "ovsdb-server and ovs-vswitchd answer" if ok else "ovs-vsctl show failed",
               PROVISION)


def datapath() -> Row:
    if kernel_datapath_available():
        return Row("datapath", True, "kernel (openvswitch module loaded)")
    result = _run(["ovs-vsctl", "--timeout=3", "get", "Open_vSwitch", ".", "datapath_types"])
    ok = result is not None and "netdev" in result.stdout
    return Row("datapath", ok, "userspace (netdev); no openvswitch kernel module, slower but works" if ok
               else "neither the kernel module nor the netdev datapath is available", PROVISION)


def _qdisc_works(kind: list[str]) -> bool:
    """Try a qdisc on a throwaway veth inside a throwaway namespace (no dummy module here)."""
    ns = f"mrclabchk{os.getpid()}"
    if _run(["ip", "netns", "add", ns]) is None:
        return False
    try:
        base = ["ip", "netns", "exec", ns]
        _run(base + ["ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        result = _run(base + ["tc", "qdisc", "add", "dev", "d0", "root"] + kind)
        return result is not None and result.returncode == 0
    finally:
        _run(["ip", "netns", "del", ns])


OVS_SNDBUF_MIN = 16 << 20


def ovs_packet_sndbuf() -> int | None:
    """Send buffer of ovs-vswitchd's AF_PACKET socket (created on its first send), or None if none yet."""
    result = _run(["ss", "-0", "-m", "-p"])
    if result is None:
        return None
    lines = result.stdout.splitlines()
    for line, following in zip(lines, lines[1:] + [""]):
        if '"ovs-vswitchd"' in line:
            for field in (line + following).replace("(", ",").replace(")", ",").split(","):
                if field.startswith("tb") and field[2:].isdigit():
                    return int(field[2:])
    return None


def ovs_sndbuf() -> Row:
    """The userspace datapath sends on every port through one packet socket: a small send buffer
    makes OVS drop packets queued in shaped ports, losses the emulated network never made."""
    if kernel_datapath_available():
        return Row("ovs send buffer", True, "kernel datapath: no shared packet socket")
    size = ovs_packet_sndbuf()
    if size is None:
        size = int(Path("/proc/sys/net/core/wmem_default").read_text())
        where = "net.core.wmem_default (ovs-vswitchd has not opened its packet socket yet)"
    else:
        where = "ovs-vswitchd's packet socket"
    ok = size >= OVS_SNDBUF_MIN
    return Row("ovs send buffer", ok, f"{where}: {size >> 10} KiB" + ("" if ok else
               f", below {OVS_SNDBUF_MIN >> 20} MiB: OVS would drop packets under load"), PROVISION)


def htb() -> Row:
    ok = os.geteuid() == 0 and _qdisc_works(["handle", "1:", "htb"])
    return Row("htb shaping", ok, "tc htb qdisc works" if ok else "tc cannot add an htb qdisc",
               "a kernel with sch_htb (CONFIG_NET_SCH_HTB)")


def netem() -> Row:
    ok = os.geteuid() == 0 and _qdisc_works(["netem", "delay", "1ms"])
    return Row("netem (optional)", ok,
               "netem works" if ok else "no sch_netem: link delay cannot be emulated; loss and trimming use eBPF "
               "instead, so every shipped scenario still runs", "a kernel with sch_netem (CONFIG_NET_SCH_NETEM)",
               required=False)


def python_module(module: str, label: str) -> Row:
    ok = importlib.util.find_spec(module) is not None
    return Row(label, ok, f"{module} importable" if ok else f"{module} not importable", PROVISION)


def mnexec() -> Row:
    path = shutil.which("mnexec")
    return Row("mnexec", path is not None, path or "not on PATH", PROVISION)


def capture_tools() -> Row:
    missing = [tool for tool in ("dumpcap", "mergecap", "tshark") if shutil.which(tool) is None]
    return Row("packet capture (optional)", not missing,
               "dumpcap, mergecap and tshark found: `mrclab run --capture` works" if not missing
               else f"{', '.join(missing)} not found: `mrclab run --capture` cannot run", PROVISION, required=False)


def rows() -> list[Row]:
    from .fabric import egress  # the eBPF egress program owns its own availability check
    return [root(), ovs(), datapath(), ovs_sndbuf(), htb(), egress.check_row(), netem(),
            python_module("os_ken", "os-ken"), python_module("mininet.net", "mininet"), mnexec(), capture_tools()]


def first_failure(checked: list[Row]) -> Row | None:
    return next((r for r in checked if r.required and not r.ok), None)
