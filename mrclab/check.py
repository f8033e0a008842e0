"""The environment doctor: one row per thing a lab needs, each with the command that fixes it."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .fabric import egress

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


def _run(cmd: list[str], timeout: float = 5.0, **kwargs) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
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


def ovs_userspace_available() -> bool:
    result = _run(["ovs-vsctl", "--timeout=3", "get", "Open_vSwitch", ".", "datapath_types"])
    return result is not None and "netdev" in result.stdout


# The probe: a host namespace sends a UDP datagram to fcbb:0:1000:4000::, a router namespace's
# seg6local End (next-csid) shifts it to fcbb:0:4000::, the host's own address, and routes it back.
# Zero UDP checksums (UDP_NO_CHECK6_*): the kernel's shift leaves the checksum of the carrier.
_PROBE_RECEIVE = """
import socket
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_UDP, 101, 1)
s.setsockopt(socket.SOL_UDP, 102, 1)
s.bind(("fcbb:0:4000::", 4793))
s.settimeout(1.0)
s.sendto(b"mrclab probe", ("fcbb:0:1000:4000::", 4793))
data, peer = s.recvfrom(64)
print("ok" if data == b"mrclab probe" else "wrong")
"""


def linux_srv6_probe() -> tuple[bool, str]:
    """Whether this kernel forwards the fabric's uSID carriers with seg6local End (next-csid), tried on
    one router between two throwaway namespaces, recorded as a run of their own (as `_qdisc_works`
    does) so that `mrclab clean` removes them if the check is killed."""
    from .runstate import RunState
    state = RunState.create("check srv6")
    host, router = f"{state.prefix}chkh", f"{state.prefix}chkr"
    try:
        for ns in (host, router):
            state.add_namespace(ns)
            if _run(["ip", "netns", "add", ns]) is None:
                return False, "cannot create network namespaces"
        steps = [
            ["ip", "-n", router, "link", "add", "name", "p0", "address", "02:00:00:00:10:00", "type", "veth",
             "peer", "name", "p1", "address", "02:00:00:00:40:00", "netns", host],
            ["ip", "-n", router, "link", "add", "name", "a0", "type", "veth", "peer", "name", "a1"],
            ["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"],
            ["ip", "-n", router, "-batch", "-"],
            ["ip", "-n", host, "-batch", "-"],
        ]
        batches = {3: "link set dev p0 up\nlink set dev a0 up\nlink set dev a1 up\n"
                      "neigh replace fe80::1 lladdr 02:00:00:00:40:00 dev p0 nud permanent\n"
                      "route replace fcbb:0:1000::/48 encap seg6local action End flavors next-csid lblen 32 "
                      "nflen 16 dev a0\nroute replace fcbb:0:4000::/48 via fe80::1 dev p0\n",
                   4: "link set dev lo up\nlink set dev p1 up\naddr add fcbb:0:4000::/128 dev p1 nodad\n"
                      "neigh replace fe80::1 lladdr 02:00:00:00:10:00 dev p1 nud permanent\n"
                      "route replace fcbb:0::/32 via fe80::1 dev p1\n"}
        for i, cmd in enumerate(steps):
            result = subprocess.run(cmd, input=batches.get(i), capture_output=True, text=True, timeout=5)
            if result.returncode != 0:
                return False, f"{' '.join(cmd[:6])}: {(result.stderr.strip() or 'failed').splitlines()[-1]}"
        received = _run(["ip", "netns", "exec", host, sys.executable, "-c", _PROBE_RECEIVE])
        if received is None or received.stdout.strip() != "ok":
            return False, "the probe router did not pass a shifted uSID packet"
        return True, "a probe router shifted and forwarded a uSID packet"
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    finally:
        state.teardown()


def auto_datapath() -> tuple[str, str]:
    """(`ovs` or `linux`, why): what `datapath: auto` runs on this machine."""
    if kernel_datapath_available():
        return "ovs", "the OVS kernel module is loaded"
    ok, detail = linux_srv6_probe()
    if ok:
        return "linux", "kernel SRv6 forwards uSIDs; no OVS kernel module"
    return "ovs", f"userspace OVS, the last resort: no OVS kernel module, and kernel SRv6 failed ({detail})"


def datapath() -> Row:
    """Which datapath `auto` picks and why; a lab can run if either datapath can."""
    if os.geteuid() != 0:
        return Row("datapath", False, "needs root to probe", "run with sudo")
    name, why = auto_datapath()
    ok = name == "linux" or kernel_datapath_available() or ovs_userspace_available()
    return Row("datapath", ok, f"auto -> {name}: {why}" if ok
               else "neither kernel SRv6, the OVS kernel module nor OVS's userspace datapath works", PROVISION)


def _qdisc_works(kind: list[str]) -> bool:
    """Try a qdisc on a throwaway veth inside a throwaway namespace (no dummy module here), recorded as a
    run of its own so that `mrclab clean` removes it if the check is killed."""
    from .runstate import RunState
    state = RunState.create("check")
    ns = f"{state.prefix}chk"
    state.add_namespace(ns)
    try:
        if _run(["ip", "netns", "add", ns]) is None:
            return False
        base = ["ip", "netns", "exec", ns]
        _run(base + ["ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1"])
        result = _run(base + ["tc", "qdisc", "add", "dev", "d0", "root"] + kind)
        return result is not None and result.returncode == 0
    finally:
        state.teardown()


OVS_SNDBUF_MIN = 16 << 20


def ovs_packet_sndbuf() -> int | None:
    """Send buffer of ovs-vswitchd's AF_PACKET socket (created on its first send), or None if none yet."""
    result = _run(["ss", "-0", "-m", "-p"])
    if result is None:
        return None
    lines = result.stdout.splitlines()
    for line, following in zip(lines, lines[1:] + [""], strict=True):
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


def ebpf() -> Row:
    """The eBPF egress program compiled, loaded and attached here; without it a lab still runs, with less."""
    lost = "no trimming (queue overflow becomes tail drop); loss and blackhole faults unavailable"
    if os.geteuid() != 0:
        return Row(egress.CHECK_ROW, False, f"needs root; {lost}", "run with sudo", required=False)
    ok, detail = egress.probe()
    return Row(egress.CHECK_ROW, ok, detail if ok else f"{detail}; {lost}",
               "" if ok else f"{PROVISION} (clang, libbpf-dev, a kernel with BPF and cls_bpf)", required=False)


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


def transport_build() -> Row:
    """Compiled is the fast build; pure Python runs the same protocol, so it is a note, not a failure."""
    from . import build
    running = build.running()
    ok = running["build"] == "compiled"
    return Row("transport build (optional)", ok, f"{running['build']}: {running['why']}",
               "" if ok else "make build (needs gcc and python3-dev)", required=False)


# A new interpreter imports the transport and says which build it got, as an agent, a server's share or a run
# over SSH does: its environment emptied, and its working directory one where `mrclab` names the checkout (as
# ~ does for a checkout cloned to ~/mrclab), which shadows the package unless the install puts it on the path.
_NEW_PROCESS_PROBE = "import json; from mrclab.build import running; print(json.dumps(running()))"


def new_process_build() -> Row:
    """The build a new process gets, against this one's: agents and remote runs are new processes, started
    with little of this one's environment, so a build that only loads here would leave them without it."""
    from . import build
    here = build.running()
    with tempfile.TemporaryDirectory(prefix="mrclab-check-") as cwd:
        (Path(cwd) / "mrclab").symlink_to(build.PACKAGE.parent)
        result = _run([sys.executable, "-c", _NEW_PROCESS_PROBE], timeout=30, cwd=cwd,
                      env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    try:
        got = json.loads(result.stdout)["build"] if result is not None and result.returncode == 0 else None
    except (ValueError, KeyError, TypeError):
        got = None
    if got is None:
        why = (result.stderr.strip().splitlines() or ["no output"])[-1] if result is not None else "did not start"
        return Row(NEW_PROCESS_ROW, False, f"{sys.executable} in a clean environment cannot import the transport: "
                   f"{why}", PROVISION)
    pure_here = os.environ.get("MRCLAB_PURE") == "1"  # asked for here, and passed on to what this run starts
    ok = got == here["build"] or pure_here
    return Row(NEW_PROCESS_ROW, ok, f"a new interpreter in a clean environment gets the {got} build"
               + ("" if got == here["build"] else f"; this process runs {here['build']} ({here['why']})"),
               "" if ok else "make build")


NEW_PROCESS_ROW = "transport in a new process"


def rows() -> list[Row]:
    return [root(), ovs(), datapath(), ovs_sndbuf(), htb(), ebpf(), netem(),
            python_module("os_ken", "os-ken"), python_module("mininet.net", "mininet"), mnexec(), capture_tools(),
            transport_build(), new_process_build()]


def first_failure(checked: list[Row]) -> Row | None:
    return next((r for r in checked if r.required and not r.ok), None)
