"""The few Open vSwitch and iproute2 calls the fabric makes, batched: one process per job, not per object."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

_FLOW = re.compile(r"cookie=(0x[0-9a-f]+).*?table=(\d+).*?n_packets=(\d+), n_bytes=(\d+).*?priority=(\d+),?(\S*)"
                   r" actions=(\S+)")


@dataclass(frozen=True)
class FlowStat:
    cookie: int
    table: int
    priority: int
    match: str
    actions: str
    n_packets: int
    n_bytes: int

    @property
    def entry(self) -> str:
        """The flow without its counters: what must not change while a fabric runs."""
        return f"table={self.table},priority={self.priority},cookie={self.cookie:#x},{self.match} actions={self.actions}"


def del_bridges(bridges: list[str]) -> None:
    """Delete bridges in one ovsdb transaction."""
    if bridges:
        cmd = ["ovs-vsctl", "--timeout=30"]
        for bridge in bridges:
            cmd += ["--", "--if-exists", "del-br", bridge]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ip_batch(lines: list[str]) -> None:
    """Run iproute2 commands in the root namespace in one process; `-force` keeps going past errors."""
    if lines:
        subprocess.run(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n", text=True, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def delete_group(group: int, prefix: str) -> bool:
    """Delete every root-namespace interface of device `group` in one kernel batch.

    Refuses (returns False, deletes nothing) if any member lacks `prefix`: the group is
    derived from the run's prefix, so such a member belongs to someone else.
    """
    out = subprocess.run(["ip", "-o", "link", "show", "group", str(group)], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    if any(not name.startswith(prefix) for name in names):
        return False
    if names:
        subprocess.run(["ip", "link", "del", "group", str(group)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return True


def _run_ofctl(command: str, bridge: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["ovs-ofctl", "-O", "OpenFlow13", command, bridge, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _dump_start(bridge: str, spec: str = "") -> subprocess.Popen:
    return _run_ofctl("dump-flows", bridge, *([spec] if spec else []))


def _dump_finish(process: subprocess.Popen) -> list[FlowStat]:
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(process.args)}: {err.strip()}")
    flows = []
    for line in out.splitlines():
        m = _FLOW.search(line)
        if m:
            cookie, table, packets, nbytes, priority, match, actions = m.groups()
            flows.append(FlowStat(int(cookie, 16), int(table), int(priority), match, actions, int(packets),
                                  int(nbytes)))
    return flows


def dump_flows(bridges: list[str], spec: str = "") -> dict[str, list[FlowStat]]:
    """Flow entries with counters of many bridges, read in parallel (one ovs-ofctl each)."""
    started = {bridge: _dump_start(bridge, spec) for bridge in bridges}
    return {bridge: _dump_finish(process) for bridge, process in started.items()}


_PORT_TX_DROP = re.compile(r"port\s+(\d+):.*?\n\s+tx pkts=\S+ bytes=\S+ drop=(\d+)")


def tx_dropped(ports: dict[str, tuple[str, int]]) -> dict[str, int]:
    """Packets ovs-vswitchd failed to send, per interface named in `ports` (ifname -> (bridge, port
    number)). Read live over OpenFlow, one ovs-ofctl per bridge in parallel: the Interface
    statistics in ovsdb are refreshed only every few seconds, too stale to tell a fault's window."""
    started = {bridge: _run_ofctl("dump-ports", bridge) for bridge in {b for b, _ in ports.values()}}
    by_port = {}
    for bridge, process in started.items():
        out, _ = process.communicate()
        if process.returncode == 0:
            by_port.update({(bridge, int(n)): int(d) for n, d in _PORT_TX_DROP.findall(out)})
    return {ifname: by_port[key] for ifname, key in ports.items() if key in by_port}
