"""The egress program itself, run by the kernel on crafted packets (BPF_PROG_TEST_RUN): no lab, no interface,
no packet leaves. Needs root and clang."""
from __future__ import annotations

import ctypes
import os
import shutil
import struct

import pytest

from mrclab.fabric import egress
from mrclab.transport.departures import NIC_BURST
from mrclab.transport.wire import DATA, DATA_HEADER_LEN, ETHERNET_HEADER, SACK, SACK_LEN

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("clang") is None,
                                reason="loading a BPF program needs root and clang")

RATE = 25_000_000 // 8  # bytes/s: the shipped labs' 25 Mbit
MTU = 9000
FRAME = MTU + ETHERNET_HEADER
SKB_CTX, WIRE_LEN_AT = 192, 160  # sizeof(struct __sk_buff), offsetof(struct __sk_buff, wire_len): UAPI
SHORT = 1000  # a test run's packet fits a page: a DATA frame is sent this long, its wire_len the whole frame


class _TestRunOpts(ctypes.Structure):  # libbpf's struct bpf_test_run_opts
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int),
                ("duration", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def _mrc(kind: int, mrc_len: int) -> bytes:
    """An Ethernet frame carrying an MRC packet of ``kind`` (version 1, no flags), ``mrc_len`` bytes of it."""
    udp = struct.pack("!HHHH", 4793, 4793, 8 + mrc_len, 0) + bytes([1, kind]) + bytes(mrc_len - 2)
    ip6 = struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + bytes.fromhex("fd00" + "00" * 13 + "01") \
        + bytes.fromhex("fd00" + "00" * 13 + "02")
    return bytes(12) + b"\x86\xdd" + ip6 + udp


class Program:
    """The compiled egress program, loaded alone, its port 0 configured as a shipped lab's switch port."""

    def __init__(self, cache) -> None:
        self.lib = egress._libbpf()
        self.lib.bpf_prog_test_run_opts.restype = ctypes.c_int
        self.lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRunOpts)]
        self.obj = self.lib.bpf_object__open_file(str(cache).encode(), None)
        assert self.obj and self.lib.bpf_object__load(self.obj) == 0
        self.prog = self.lib.bpf_program__fd(self.lib.bpf_object__find_program_by_name(self.obj, b"egress"))
        self.maps = {name: self.lib.bpf_object__find_map_fd_by_name(self.obj, name.encode())
                     for name in ("cfg", "stats")}
        cfg = egress._Cfg(rate_bytes_per_s=RATE, queue_bytes=65536, trim=1, mtu=FRAME)
        key = ctypes.c_uint32(0)  # a test run's skb has tc_classid 0
        assert self.lib.bpf_map_update_elem(self.maps["cfg"], ctypes.byref(key), ctypes.byref(cfg), 0) == 0

    def send(self, frame: bytes) -> None:
        """Run the program on ``frame``, its wire length the frame's, whatever is given of it."""
        ctx = ctypes.create_string_buffer(SKB_CTX)
        struct.pack_into("=I", ctx, WIRE_LEN_AT, len(frame))
        frame = frame[:SHORT]
        data = ctypes.create_string_buffer(frame, len(frame))
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(data), data_size_in=len(frame),
                            ctx_in=ctypes.addressof(ctx), ctx_size_in=SKB_CTX)
        assert self.lib.bpf_prog_test_run_opts(self.prog, ctypes.byref(opts)) == 0, os.strerror(ctypes.get_errno())

    def counters(self) -> egress.PortCounters:
        ncpus = self.lib.libbpf_num_possible_cpus()
        per_cpu = (egress._Stats * ncpus)()
        key = ctypes.c_uint32(0)
        assert self.lib.bpf_map_lookup_elem(self.maps["stats"], ctypes.byref(key), per_cpu) == 0
        return egress.PortCounters(*(sum(cpu[i] for cpu in per_cpu) for i in range(len(egress.PortCounters._fields))))

    def close(self) -> None:
        self.lib.bpf_object__close(self.obj)


@pytest.fixture
def program(tmp_path, monkeypatch):
    monkeypatch.setattr(egress, "CACHE_DIR", tmp_path)
    loaded = Program(egress.compiled_object())
    yield loaded
    loaded.close()


def test_waits_are_counted_as_htb_makes_them(program):
    """A bulk packet waits for the bytes ahead of it less the burst HTB banked while the port idled. HTB sends a
    high-priority packet at once while its class (1:10) is within its guaranteed share of the rate, however
    much bulk waits (measured on a veth: 0.1 ms behind a full 64 KiB queue at 25 Mbit): a SACK's counted wait is
    0 there, not the frame being sent. Past the class's burst, it borrows the port's rate and waits, for the
    frame being sent at most."""
    data = _mrc(DATA, DATA_HEADER_LEN + MTU - 40 - 8 - DATA_HEADER_LEN)
    assert len(data) == FRAME
    for _ in range(5):
        program.send(data)
    bulk = program.counters()
    assert bulk.tx_packets == 5 and bulk.trims == 0
    frame_s = FRAME / RATE  # 2.9 ms
    # 0 + 1 + 2 + 3 + 4 frames ahead, less the burst HTB lets go after idling (each waits that much less), less
    # what drained between the sends
    owed = (10 * FRAME - 4 * NIC_BURST) / RATE
    assert owed - frame_s < bulk.queued_ns * 1e-9 <= owed
    sack = _mrc(SACK, SACK_LEN)
    program.send(sack)
    one = program.counters()
    assert one.ctl_packets == 1 and one.ctl_queued_ns * 1e-9 < 0.05 * frame_s
    burst = 3 * NIC_BURST // len(sack)
    for _ in range(burst):  # three bursts' worth at once: the class's own rate runs out
        program.send(sack)
    many = program.counters()
    waited = (many.ctl_queued_ns - one.ctl_queued_ns) * 1e-9
    assert many.ctl_packets == 1 + burst
    assert 0.1 * frame_s < waited < burst * frame_s
