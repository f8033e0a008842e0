"""Switch-port egress: HTB shaping plus one eBPF program that models the port's buffer.

Each port gets ``htb`` at its rate with two leaves: 1:10 (strict priority: MRC's small
packets, i.e. trimmed headers, SACKs, NACKs and probes, as a switch serves them from a
high-priority queue) and 1:20 (everything else), each behind a bfifo much deeper than the
modelled buffer, so HTB never drops on its own. A ``clsact`` egress filter runs ``bpf/egress.c``, which keeps a
*virtual queue* per port (backlog bytes draining at the port rate): a packet that would
overflow it is trimmed to its MRC header if it is MRC DATA and trimming is on, else dropped.
A packet that fits, is ECN-capable (ECT(0) or ECT(1) in its IPv6 traffic class) and waits in
the bulk class behind more than ``ecn_min`` bytes is marked CE with a probability rising
linearly to 1 at ``ecn_max`` (RED's marking ramp on the instantaneous queue, as switches mark
for DCQCN and MRC); ports that must not mark (a leaf's port towards a host, host NICs) are
attached without thresholds.
The same program applies loss and blackhole faults from a config map, so a fault is one map
write from Python and never involves the controller or OVS.

Loading. The object is compiled once per source/compiler version into ``CACHE_DIR`` and
loaded once per run with libbpf through ctypes (no bpftool needed). tc's own ``bpf obj``
loader would reload the object for every port and pins shared maps in the global
``/sys/fs/bpf/tc/globals``, where concurrent runs would collide. Instead the program is
pinned in a bpffs instance mounted privately for the run (``/run/mrclab/<id>.bpf``,
recorded in the RunState so ``clean`` unmounts it) and every port attaches that pinned
program with ``tc filter ... bpf da object-pinned``, one ``tc -batch`` per port.

Port identity. ifindex is not unique across namespaces, so each port gets a run-local id
passed as the filter's ``classid`` minor: cls_bpf stores it in ``skb->tc_classid`` before
running the program, which indexes three array maps with it: ``cfg`` (written here),
``queue`` (backlog + timestamp, guarded by a ``bpf_spin_lock`` because both CPUs may send
on one port; the lock is held only for a few arithmetic instructions) and per-CPU
``stats`` (no atomics on the hot path; summed here when read). Python reads and writes
them through libbpf's map syscall wrappers on the fds it holds. Interface names must be
unique within a run (Mininet's are).

Kernel details the program relies on, each checked by the integration tests:
the qdisc layer takes a packet's length before the egress hook, so a trimmed packet is sent
round the device once more (``bpf_redirect`` to itself) for HTB to charge its trimmed size;
drops return ``TC_ACT_STOLEN`` (success to the sender, as a loss on a wire would be), since a
failed send makes OVS's userspace datapath discard or resend the rest of its batch and stalls
a local TCP sender; GSO super-packets from a local TCP sender count as their segments and
wire length, and a virtual queue drops one whole, so a host NIC carrying TCP wants a queue
deeper than TCP's small-queue budget (about 1 MiB). Trimmed packets add only their trimmed
size to the backlog, up to a second queue's worth (a real switch's header queue is finite
too), and so do the other high-priority packets. A header trimmed upstream is told by its
TRIMMED flag, since every hop through OVS's userspace datapath starts from a fresh skb. The
drain computation caps elapsed time at one second, so a queue holding more than a second of
traffic drains slightly late. Each port also sums how long its packets waited in the virtual
queue (``queued_ns``, ``ctl_queued_ns``): the network's own queueing, for fidelity, as HTB makes packets
wait (the program keeps the shaper's tokens beside the buffer's backlog). A bulk packet waits for the
bytes ahead of it, less the ``NIC_BURST`` HTB lets go at once after the port idled. A high-priority one
does not wait while class 1:10 is within its guaranteed rate (1/``_HTB_TRIMMED_SHARE`` of the port's),
else for the frame being sent or its class's tokens, whichever comes first.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import EnvironmentNotReady
from ..runstate import RunState, trusted_dir
from ..transport.departures import NIC_BURST
from ..transport.wire import ETHERNET_HEADER

SOURCE = Path(__file__).with_name("bpf") / "egress.c"
CACHE_DIR = trusted_dir("MRCLAB_CACHE_DIR", "/var/cache/mrclab")
MAX_PORTS = 4096  # MAX_PORTS in egress.c; id 0 is never used
CHECK_ROW = "ebpf trimming"
_HTB_TRIMMED_SHARE = 10  # the trimmed-header class is guaranteed 1/10 of the rate, may use all


class PortCounters(NamedTuple):
    tx_packets: int  # passed, trimmed ones included
    tx_bytes: int  # as passed (a trimmed packet counts its trimmed size)
    drops: int  # queue overflow
    trims: int
    loss_drops: int
    blackhole_drops: int
    queued_ns: int  # summed over bulk packets passed: how long each waited for the bytes ahead of it (HTB's)
    ctl_packets: int  # high-priority packets passed (MRC control, headers trimmed upstream)
    ctl_queued_ns: int  # ... and how long each waited: 0 within its class's guaranteed rate, else at most a frame
    cut_drops: int  # sent into the cable while it was cut (a link or switch down)
    ecn_marked: int  # ECT packets passed with CE set


# port_cfg.csum_mode: L4 checksums over the carrier (OVS rewrites them at every hop), or over the
# final destination (kernel End shifts leave them alone), which a host NIC then makes them.
CSUM_CARRIER, CSUM_FINAL, CSUM_MAKE_FINAL = 0, 1, 2


class _Cfg(ctypes.Structure):  # struct port_cfg
    _fields_ = [("rate_bytes_per_s", ctypes.c_uint64), ("loss_threshold", ctypes.c_uint64),
                ("queue_bytes", ctypes.c_uint32), ("trim", ctypes.c_uint8), ("blackhole", ctypes.c_uint8),
                ("mtu", ctypes.c_uint16), ("cut", ctypes.c_uint8), ("csum_mode", ctypes.c_uint8),
                ("ecn", ctypes.c_uint8), ("pad", ctypes.c_uint8), ("ecn_min", ctypes.c_uint32),
                ("ecn_max", ctypes.c_uint32)]


class Ecn(NamedTuple):
    """A port's ECN marking: CE on ECT packets, with probability rising linearly from 0 at `min_bytes` of
    queue ahead of the packet to 1 at `max_bytes`."""

    min_bytes: int
    max_bytes: int


_Stats = ctypes.c_uint64 * len(PortCounters._fields)  # struct port_stats, one per CPU


def _libbpf() -> ctypes.CDLL:
    lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    for name, res, args in (("bpf_object__open_file", p, [s, p]), ("bpf_object__load", i, [p]),
                            ("bpf_object__close", None, [p]), ("bpf_object__find_program_by_name", p, [p, s]),
                            ("bpf_program__fd", i, [p]), ("bpf_object__find_map_fd_by_name", i, [p, s]),
                            ("bpf_obj_pin", i, [i, s]), ("libbpf_num_possible_cpus", i, []),
                            ("bpf_map_update_elem", i, [i, p, p, ctypes.c_uint64]),
                            ("bpf_map_lookup_elem", i, [i, p, p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def compiled_object() -> Path:
    """The program's object file, compiled on first use and cached by source and clang version."""
    clang = shutil.which("clang")
    if clang is None:
        raise EnvironmentNotReady(f"clang not found (mrclab check: {CHECK_ROW})")
    version = subprocess.run([clang, "--version"], capture_output=True).stdout
    digest = hashlib.sha256(SOURCE.read_bytes() + version).hexdigest()[:16]
    obj = CACHE_DIR / f"egress-{digest}.o"
    CACHE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    _check_private(CACHE_DIR)
    if os.path.lexists(obj):
        _check_private(obj)
        return obj
    tmp = obj.with_name(f"{obj.name}.{os.getpid()}.tmp")
    result = subprocess.run([clang, "-O2", "-g", "-target", "bpf", f"-I/usr/include/{platform.machine()}-linux-gnu",
                             "-c", str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
    if result.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise EnvironmentNotReady(f"compiling {SOURCE.name} failed (mrclab check: {CHECK_ROW}): "
                                  f"{result.stderr.strip()[-500:]}")
    os.chmod(tmp, 0o644)
    os.replace(tmp, obj)  # atomic: a concurrent run sees the whole file or none
    return obj


def _check_private(path: Path) -> None:
    """What the kernel is handed must be ours alone: owned by this user, a plain file or directory (no
    link), writable by no one else; anything else could be swapped for another program."""
    info = path.lstat()
    kind_ok = stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)
    if not kind_ok or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise EnvironmentNotReady(f"{path} is not trusted (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}"
                                  f"{'' if kind_ok else ', not a plain file or directory'}): it must belong to uid "
                                  f"{os.geteuid()} and be writable by no one else; remove it and run again")


@dataclass
class _Port:
    port_id: int
    netns_pid: int | None
    rate_bps: int  # as configured at attach; restore() returns to it
    current_rate_bps: int
    mtu: int
    cfg: _Cfg


class Egress:
    """One per run: owns the loaded program, its maps and the bpffs it is pinned in."""

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._ports: dict[str, _Port] = {}
        self._lib = _libbpf()
        self._ncpus = self._lib.libbpf_num_possible_cpus()
        self._obj = self._lib.bpf_object__open_file(str(compiled_object()).encode(), None)
        if not self._obj:
            raise EnvironmentNotReady(f"libbpf cannot open the program: {os.strerror(ctypes.get_errno())} "
                                      f"(mrclab check: {CHECK_ROW})")
        self._mount = str(state.path.with_suffix(".bpf"))  # /run/mrclab/<id>.bpf
        try:
            err = self._lib.bpf_object__load(self._obj)
            if err:
                raise EnvironmentNotReady(f"the kernel refused the program: {os.strerror(-err)} "
                                          f"(mrclab check: {CHECK_ROW})")
            self._maps = {name: self._lib.bpf_object__find_map_fd_by_name(self._obj, name.encode())
                          for name in ("cfg", "stats")}
            state.add_mount(self._mount)
            os.makedirs(self._mount, mode=0o700, exist_ok=True)
            _run(["mount", "-t", "bpf", "-o", "mode=0700", "bpf", self._mount])
            self._pin, self._patch_pin = (self._pin_program(name) for name in ("egress", "patch"))
        except BaseException:
            self.close()
            raise

    def _pin_program(self, name: str) -> str:
        """Pin one of the object's programs in the run's bpffs; its path."""
        path = f"{self._mount}/{name}"
        prog_fd = self._lib.bpf_program__fd(self._lib.bpf_object__find_program_by_name(self._obj, name.encode()))
        if self._lib.bpf_obj_pin(prog_fd, path.encode()):
            raise EnvironmentNotReady(f"cannot pin the program in {self._mount}: "
                                      f"{os.strerror(ctypes.get_errno())} (mrclab check: {CHECK_ROW})")
        return path

    def __enter__(self) -> Egress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def attach(self, ifname: str, rate_bps: int, queue_bytes: int, mtu: int, trim: bool,
               netns_pid: int | None = None, *, csum_mode: int = CSUM_CARRIER, ecn: Ecn | None = None) -> None:
        """Shape ``ifname`` (in ``netns_pid``'s network namespace, else the root one) and run the program on it;
        ``ecn``: how it marks (None: never)."""
        if ecn is not None and not 0 <= ecn.min_bytes < ecn.max_bytes <= queue_bytes:
            raise ValueError(f"ECN thresholds must satisfy 0 <= min < max <= queue ({queue_bytes}), got {ecn}")
        known = self._ports.get(ifname)
        first = known is None
        if known is None:
            if len(self._ports) >= MAX_PORTS - 1:
                raise RuntimeError(f"more than {MAX_PORTS - 1} egress ports in one run")
            port = _Port(len(self._ports) + 1, netns_pid, rate_bps, rate_bps, mtu, _Cfg())
        else:
            port = known
        port.netns_pid, port.rate_bps, port.current_rate_bps, port.mtu = netns_pid, rate_bps, rate_bps, mtu
        port.cfg.rate_bytes_per_s, port.cfg.queue_bytes, port.cfg.trim = rate_bps // 8, queue_bytes, int(trim)
        port.cfg.mtu = min(mtu + ETHERNET_HEADER, 0xFFFF)  # a frame: the MTU plus its Ethernet header
        port.cfg.loss_threshold = port.cfg.blackhole = port.cfg.cut = 0
        port.cfg.csum_mode = csum_mode
        port.cfg.ecn = ecn is not None
        port.cfg.ecn_min, port.cfg.ecn_max = ecn if ecn is not None else (0, 0)
        self._write_cfg(port)  # before the filter exists, so its first packet sees the config
        self._ports[ifname] = port
        # HTB and clsact cannot be replaced in place, so attaching again changes what they hold.
        verb = "replace" if first else "change"
        limit = 4 * (queue_bytes + mtu)  # HTB's own fifos: never the ones that drop
        self._tc(port, [*([f"qdisc replace dev {ifname} root handle 1: htb default 20"] if first else []),
                        *self._htb_classes(verb, ifname, rate_bps, mtu),
                        f"qdisc {verb} dev {ifname} parent 1:10 handle 10: bfifo limit {limit}",
                        f"qdisc {verb} dev {ifname} parent 1:20 handle 20: bfifo limit {limit}",
                        *([f"qdisc replace dev {ifname} clsact",
                           f"filter replace dev {ifname} egress pref 1 handle 1 bpf da object-pinned {self._pin} "
                           f"classid 1:{port.port_id:x}"] if first else [])])

    def patch(self, ends: list[tuple[str, int, str, int]], netns_pid: int) -> None:
        """Join veth ends in ``netns_pid``'s namespace pairwise, (name, ifindex, name, ifindex) each: what either
        end receives goes into the ingress of the other end's peer (bpf_redirect_peer; see `cables`)."""
        lines = []
        for a, a_index, b, b_index in ends:
            for here, there in ((a, b_index), (b, a_index)):
                lines += [f"qdisc replace dev {here} clsact",
                          f"filter replace dev {here} ingress pref 1 handle 1 bpf da object-pinned {self._patch_pin} "
                          f"classid 1:{there:x}"]
        _run(["nsenter", "-t", str(netns_pid), "-n", "tc", "-batch", "-"], "\n".join(lines) + "\n")

    def set_loss(self, ifname: str, p: float) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"loss probability must be within [0, 1], got {p}")
        port = self._port(ifname)
        port.cfg.loss_threshold = round(p * 2**32)
        self._write_cfg(port)

    def set_blackhole(self, ifname: str, on: bool) -> None:
        port = self._port(ifname)
        port.cfg.blackhole = int(on)
        self._write_cfg(port)

    def set_cut(self, ifname: str, on: bool) -> None:
        """The port's cable is cut (or mended): what is sent into it is dropped and counted."""
        port = self._port(ifname)
        port.cfg.cut = int(on)
        self._write_cfg(port)

    def set_rate(self, ifname: str, rate_bps: int) -> None:
        """HTB's rate and the virtual queue's drain rate together."""
        port = self._port(ifname)
        self._tc(port, self._htb_classes("change", ifname, rate_bps, port.mtu))
        port.current_rate_bps = rate_bps
        port.cfg.rate_bytes_per_s = rate_bps // 8
        self._write_cfg(port)

    def restore(self, ifname: str) -> None:
        """Back to the rate given at attach, no loss, no blackhole."""
        port = self._port(ifname)
        if port.current_rate_bps != port.rate_bps:
            self.set_rate(ifname, port.rate_bps)
        port.cfg.loss_threshold = port.cfg.blackhole = 0
        self._write_cfg(port)

    def counters(self, ifname: str) -> PortCounters:
        per_cpu = (_Stats * self._ncpus)()
        key = ctypes.c_uint32(self._port(ifname).port_id)
        if self._lib.bpf_map_lookup_elem(self._maps["stats"], ctypes.byref(key), per_cpu):
            raise OSError(ctypes.get_errno(), f"reading egress counters of {ifname}")
        return PortCounters(*(sum(cpu[i] for cpu in per_cpu) for i in range(len(PortCounters._fields))))

    def close(self) -> None:
        """Unpin and release the program; filters keep it alive until their (run-scoped) ports go."""
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None
        if self._mount in self._state.mounts:
            self._state.release_mount(self._mount)

    def _port(self, ifname: str) -> _Port:
        try:
            return self._ports[ifname]
        except KeyError:
            raise KeyError(f"{ifname} has no egress program attached") from None

    def _write_cfg(self, port: _Port) -> None:
        key = ctypes.c_uint32(port.port_id)
        if self._lib.bpf_map_update_elem(self._maps["cfg"], ctypes.byref(key), ctypes.byref(port.cfg), 0):
            raise OSError(ctypes.get_errno(), "writing the egress config map")

    @staticmethod
    def _htb_classes(verb: str, ifname: str, rate_bps: int, mtu: int) -> list[str]:
        """The port's classes; their burst is the one the agents' model of a host NIC assumes (NIC_BURST)."""
        quantum = mtu + ETHERNET_HEADER
        trimmed = max(rate_bps // _HTB_TRIMMED_SHARE, 8)
        burst = f"burst {NIC_BURST}b cburst {NIC_BURST}b"
        return [f"class {verb} dev {ifname} parent 1: classid 1:1 htb rate {rate_bps}bit {burst} quantum {quantum}",
                f"class {verb} dev {ifname} parent 1:1 classid 1:10 htb rate {trimmed}bit ceil {rate_bps}bit "
                f"{burst} prio 0 quantum {quantum}",
                f"class {verb} dev {ifname} parent 1:1 classid 1:20 htb rate {rate_bps - trimmed}bit "
                f"ceil {rate_bps}bit {burst} prio 1 quantum {quantum}"]

    @staticmethod
    def _tc(port: _Port, commands: list[str]) -> None:
        prefix = [] if port.netns_pid is None else ["nsenter", "-t", str(port.netns_pid), "-n"]
        _run(prefix + ["tc", "-batch", "-"], "\n".join(commands) + "\n")


def _run(cmd: list[str], stdin: str | None = None) -> None:
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {(result.stderr or result.stdout).strip()}")


def probe() -> tuple[bool, str]:
    """Whether the program compiles, loads and attaches here, tried on a throwaway veth in a throwaway network
    namespace (needs root)."""
    state = RunState.create("check: ebpf egress")
    holder = subprocess.Popen(["unshare", "-n", "sleep", "30"])  # its namespace dies with it
    try:
        state.add_process(holder.pid, "check netns")
        _wait_for_own_netns(holder.pid)
        veth = f"{state.prefix}c"
        _run(["nsenter", "-t", str(holder.pid), "-n", "ip", "link", "add", veth, "type", "veth",
              "peer", "name", f"{veth}p"])
        with Egress(state) as egress:
            egress.attach(veth, 10_000_000, 65536, 1500, True, netns_pid=holder.pid)
            egress.set_loss(veth, 0.5)
            egress.counters(veth)
    except (OSError, RuntimeError, EnvironmentNotReady) as exc:
        return False, str(exc)
    finally:
        state.teardown()
        holder.wait()
    return True, "compiled, loaded and attached on a throwaway veth"


def _wait_for_own_netns(pid: int, timeout: float = 2.0) -> None:
    """Until ``unshare`` has moved ``pid`` out of our network namespace (it does so before exec)."""
    own, deadline = os.readlink("/proc/self/ns/net"), time.monotonic() + timeout
    while os.readlink(f"/proc/{pid}/ns/net") == own:
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} never entered its own network namespace")
        time.sleep(0.001)
