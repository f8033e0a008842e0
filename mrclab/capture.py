"""Packet capture in a run: one pcapng file per recorded interface, named by SPEC names, and one merged file.

One ``dumpcap`` per interface, started inside the network namespace that holds it
(``Fabric.netns_pid``: a host's, or the root namespace for OVS ports) before the first
packet of the workload, recorded by PID in the RunState and stopped by PID after the
last one. ``headers`` keeps ``SNAPLEN_HEADERS`` bytes of each frame: Ethernet, IPv6,
UDP and the 48-byte MRC header, so a capture costs little more than a packet copy.
At the end each file's interface is renamed to its SPEC name (``h0-p0l0``: h0's NIC
towards p0l0; the kernel name goes into the description), and ``capture/all.pcapng``
merges them in time order, interface names kept, for one Wireshark window per run.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

from .errors import EnvironmentNotReady, UsageError
from .spec import Capture, Topology

SNAPLEN_HEADERS = 128   # 14 Ethernet + 40 IPv6 + 8 UDP + 48 MRC = 110, with room for a VLAN tag
SNAPLEN_FULL = 262144
MERGED = "all.pcapng"
READY_TIMEOUT_S = 10.0
READY_PER_INTERFACE_S = 0.1  # `all` on the default lab starts 192 of them on a busy machine
# dumpcap reads packets a ring block at a time (TPACKET_V3), and a block is handed over when full or
# 250 ms after its first packet: stopped sooner, the packets of the open block are lost.
BLOCK_TIMEOUT_S = 0.25
STOP_TIMEOUT_S = 10.0
log = logging.getLogger("mrclab.capture")
_STATS = re.compile(r"Packets received/dropped on interface '([^']+)': (\d+)/(\d+)")


def ends(topology: Topology, capture: Capture) -> list[tuple[str, str]]:
    """(node, peer) of every interface to record: the interface of `node` on its cable to `peer`."""
    what = capture.interfaces
    if not isinstance(what, str):
        return [(node, peer) for node, _, peer in (name.partition("-") for name in what)]
    host_links = [link for link in topology.links if link.kind == "host"]
    hosts = [(link.a, link.b) for link in host_links]
    switches = [(link.b, link.a) for link in host_links] + [
        end for link in topology.links if link.kind == "fabric" for end in ((link.a, link.b), (link.b, link.a))]
    return {"off": [], "hosts": hosts, "switches": switches, "all": hosts + switches}[what]


def tool(name: str) -> str:
    """Path of a Wireshark tool (Debian's wireshark-common, which tshark brings), or exit 3."""
    path = shutil.which(name)
    if path is None:
        raise EnvironmentNotReady(f"{name} is not installed: packet capture needs Debian's tshark "
                                  f"(apt-get install tshark; vagrant/provision.sh installs it)")
    return path


class Recording:
    """The capture processes of one run. `start()` returns once every file is being written."""

    def __init__(self, capture: Capture, fabric, state, directory: Path) -> None:
        self.capture, self.fabric, self.state = capture, fabric, state
        self.directory = directory / "capture"
        self.log = directory / "capture.log"
        self.procs: dict[str, subprocess.Popen] = {}   # SPEC interface name -> dumpcap
        self.kernel_names: dict[str, str] = {}
        self.cpu_s = 0.0  # what the capture processes cost, user + system
        self.snaplen = SNAPLEN_HEADERS if capture.packets == "headers" else SNAPLEN_FULL

    def start(self) -> None:
        began = time.monotonic()
        dumpcap = tool("dumpcap")
        self.directory.mkdir(mode=0o755, exist_ok=True)
        with open(self.log, "ab") as stderr:
            for node, peer in ends(self.fabric.topology, self.capture):
                name, ifname = f"{node}-{peer}", self.fabric.layout.ifname(node, peer)
                pid = self.fabric.netns_pid(node)
                enter = [] if pid is None else ["nsenter", f"--net=/proc/{pid}/ns/net"]
                argv = [*enter, dumpcap, "-q", "-i", ifname, "-s", str(self.snaplen),
                        "-w", str(self.directory / f"{name}.pcapng")]
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                        start_new_session=True)  # stopped by us, not by the terminal's Ctrl-C
                self.state.add_process(proc.pid, f"capture {name}")
                self.procs[name], self.kernel_names[name] = proc, ifname
        self._wait_ready()
        log.info("capture: %d interfaces recording after %.2f s", len(self.procs), time.monotonic() - began)

    def _wait_ready(self) -> None:
        """Until every dumpcap has written its file header and said "Capturing on '<interface>'"."""
        deadline = time.monotonic() + READY_TIMEOUT_S + READY_PER_INTERFACE_S * len(self.procs)
        waiting = dict(self.procs)
        while waiting:
            said = self.log.read_text(errors="replace") if self.log.exists() else ""
            for name, proc in list(waiting.items()):
                if proc.poll() is not None:
                    raise EnvironmentNotReady(f"capture on {name} ({self.kernel_names[name]}) failed: "
                                       f"{said.strip()[-300:]}")
                path = self.directory / f"{name}.pcapng"
                if path.exists() and path.stat().st_size > 0 and f"Capturing on '{self.kernel_names[name]}'" in said:
                    del waiting[name]
            if time.monotonic() > deadline:
                raise EnvironmentNotReady(f"capture did not start in time on {', '.join(waiting)}")
            time.sleep(0.02)

    def stop(self) -> dict:
        """Stop every dumpcap by PID, once its open ring block is handed over (a short run fits in one);
        what they counted, for the fidelity notes."""
        if any(proc.poll() is None for proc in self.procs.values()):
            time.sleep(2 * BLOCK_TIMEOUT_S)
        for proc in self.procs.values():
            if proc.poll() is None:
                self.cpu_s += _cpu_seconds(proc.pid)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        received = dropped = 0
        if self.log.exists():
            for _ifname, got, lost in _STATS.findall(self.log.read_text(errors="replace")):
                received, dropped = received + int(got), dropped + int(lost)
        return {"interfaces": len(self.procs), "packets": received, "dropped": dropped,
                "cpu_s": round(self.cpu_s, 3)}

    def note(self, counts: dict) -> str:
        what = self.capture.interfaces if isinstance(self.capture.interfaces, str) else "links"
        kept = f"headers only ({self.snaplen} bytes)" if self.capture.packets == "headers" else "full packets"
        return (f"packet capture was on ({what}: {counts['interfaces']} interfaces, {kept}): "
                f"{counts['packets']} packets recorded, {counts['dropped']} missed by the capture, "
                f"{counts['cpu_s']:.2f} CPU seconds")

    def finish(self) -> Path | None:
        """Name each file's interface by its SPEC name, then merge them; the merged file (None: no mergecap)."""
        for name, ifname in self.kernel_names.items():
            path = self.directory / f"{name}.pcapng"
            if path.exists():
                rename_interface(path, name, f"{ifname} ({self.capture.packets})")
        return merge(self.directory.parent) if shutil.which("mergecap") else None


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def merge(run_dir: Path | str) -> Path:
    """Write DIR/capture/all.pcapng from every per-interface file, in time order, interface names kept."""
    folder = Path(run_dir) / "capture"
    inputs = sorted(p for p in folder.glob("*.pcapng") if p.name != MERGED) if folder.is_dir() else []
    if not inputs:
        raise UsageError(f"{folder}: no per-interface pcapng files to merge (run with --capture)")
    target = folder / MERGED
    tmp = folder / f".{MERGED}.tmp"
    done = subprocess.run([tool("mergecap"), "-F", "pcapng", "-w", str(tmp), *map(str, inputs)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{folder}: mergecap failed: {done.stderr.strip()}")
    os.replace(tmp, target)
    return target


# -- pcapng interface names -------------------------------------------------------------------------

_SHB, _IDB = 0x0A0D0D0A, 0x00000001
_IF_NAME, _IF_DESCRIPTION = 2, 3


def rename_interface(path: Path, name: str, description: str) -> None:
    """Set if_name and if_description of every interface block; the packet blocks are copied as they are."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        endian = "<"
        while True:
            head = src.read(12)
            if len(head) < 12:
                dst.write(head)
                break
            if struct.unpack("<I", head[:4])[0] == _SHB:  # the same in either byte order
                endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
            kind, length = struct.unpack(endian + "II", head[:8])
            if kind not in (_SHB, _IDB):  # interface blocks come first: the rest is packets
                dst.write(head)
                shutil.copyfileobj(src, dst, 1 << 20)
                break
            body = head[8:] + src.read(length - 12)
            body = body[:-4]
            if kind == _IDB:
                body = _named_idb(body, endian, name, description)
            size = len(body) + 12
            dst.write(struct.pack(endian + "II", kind, size) + body + struct.pack(endian + "I", size))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _named_idb(body: bytes, endian: str, name: str, description: str) -> bytes:
    fixed, options, at = body[:8], [], 8
    while at + 4 <= len(body):
        code, size = struct.unpack(endian + "HH", body[at:at + 4])
        if code == 0:
            break
        if code not in (_IF_NAME, _IF_DESCRIPTION):
            options.append(body[at:at + 4 + (size + 3) // 4 * 4])
        at += 4 + (size + 3) // 4 * 4
    for code, text in ((_IF_NAME, name), (_IF_DESCRIPTION, description)):
        value = text.encode()
        options.append(struct.pack(endian + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4))
    return fixed + b"".join(options) + struct.pack(endian + "HH", 0, 0)
