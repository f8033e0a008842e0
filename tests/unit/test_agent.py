"""Agent pieces that need no root: request handling, payloads, the MRC datapath over an in-memory wire (driven
through `batchio.PythonIo`, the I/O that takes any socket-like object; tests/unit/test_agent_batchio.py drives
both I/Os on kernel sockets)."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrclab.addressing import HOST_BASE, Plan, conn_id, decode
from mrclab.agent import messages
from mrclab.agent.__main__ import BadArguments, parse_args
from mrclab.agent.batchio import PythonIo
from mrclab.agent.endpoint import configure
from mrclab.agent.host import Agent
from mrclab.agent.messages import Completed, Delivered, Done, EvChanged, Failed, Pong, Refused, Report
from mrclab.agent.mrc import MrcDatapath
from mrclab.agent.payload import POOL_BYTES, Payloads
from mrclab.metrics.results import PACKET_KEYS, PATH_KEYS
from mrclab.metrics.rtt import rtt_quantile
from mrclab.transport.config import mss_for_mtu
from mrclab.transport.wire import DATA_HEADER_LEN, IP_UDP_OVERHEAD, MRC_UDP_PORT
from tests.fakes import InboxSocket

REPO = Path(__file__).resolve().parents[2]

PLAN = Plan(2, 2, 2, 2)
STAT_COUNTERS = {"data_sent", "retransmitted", "trimmed", "timeouts", "nacks", "probes", "bytes_sent",
                 "bytes_delivered", "bytes_verified", "messages_sent", "messages_completed", "messages_failed"}


# -- payloads --------------------------------------------------------------------------------------------

def test_payload_deterministic_and_distinct():
    a, b = Payloads(7), Payloads(7)
    assert a.message(0, 1, 5, 10000) == b.message(0, 1, 5, 10000)
    variants = [a.message(0, 1, 5, 4096), a.message(0, 1, 6, 4096), a.message(1, 0, 5, 4096),
                a.message(0, 2, 5, 4096), Payloads(8).message(0, 1, 5, 4096)]
    for i, x in enumerate(variants):
        for y in variants[i + 1:]:
            words = [x[k:k + 8] != y[k:k + 8] for k in range(0, 4096, 8)]
            assert all(words), "two messages share an 8-byte word"


def test_payload_sizes_and_matches():
    p = Payloads(1)
    for size in (0, 1, 7, 8, 9, 8904, POOL_BYTES, POOL_BYTES + 13, 3 * POOL_BYTES):
        data = p.message(2, 3, 9, size)
        assert len(data) == size
        assert p.matches(2, 3, 9, bytearray(data))
    big = p.message(2, 3, 9, 2 * POOL_BYTES)
    assert big[:POOL_BYTES] != big[POOL_BYTES:]  # a misplacement by a pool length is caught too
    data = bytearray(p.message(2, 3, 9, 20000))
    data[12345] ^= 1
    assert not p.matches(2, 3, 9, data)
    assert not p.matches(2, 3, 10, p.message(2, 3, 9, 20000))
    assert p.message(0, 1, 1, 16)[:8] != p.message(0, 1, 1, 16)[8:]
    with pytest.raises(ValueError):
        p.message(0, 1, 1, -1)


def test_payload_check_catches_misplaced_and_foreign_packets():
    """What the check is for: a whole packet at the wrong offset, or one from another message, in a buffer
    whose every other byte is right (the transport's digest is checked apart from this)."""
    p, mss = Payloads(1), 8904
    sent = p.message(0, 1, 4, 3 * POOL_BYTES // 2)
    assert p.matches(0, 1, 4, sent)
    swapped = bytearray(sent)
    swapped[:mss], swapped[mss:2 * mss] = sent[mss:2 * mss], sent[:mss]
    shifted = bytearray(sent)
    shifted[POOL_BYTES:POOL_BYTES + mss] = sent[:mss]  # the same pool words, a pool length on: another key
    foreign = bytearray(sent)
    foreign[5 * mss:6 * mss] = p.message(0, 1, 5, 6 * mss)[5 * mss:]
    tail = bytearray(sent)
    tail[-1] ^= 0x80
    for bad in (swapped, shifted, foreign, tail):
        assert not p.matches(0, 1, 4, bad)


# -- the MRC datapath over an in-memory wire ---------------------------------------------------------------

class FakeSocket(InboxSocket):
    """What MrcDatapath uses of a plane's UDP socket; sendto hands the datagram to the wire."""

    def __init__(self, wire, host, plane):
        self.wire, self.host, self.plane, self.inbox = wire, host, plane, []

    refuse = 0  # the next `refuse` sends fail with EAGAIN (a full send buffer)
    refuse_errno = errno.EAGAIN  # ... or with this (ENOBUFS: a qdisc refused it)

    def sendto(self, datagram, addr):
        if self.refuse:
            self.refuse -= 1
            if self.refuse_errno == errno.EAGAIN:
                raise BlockingIOError
            raise OSError(self.refuse_errno, os.strerror(self.refuse_errno))
        self.wire.carry(self.host, self.plane, bytes(datagram), addr)


class Wire:
    """Delivers as the fabric would: to the host the path address ends in, from the sender's plane address."""

    def __init__(self, plan, drop=lambda plane, spine: False):
        self.plan, self.sockets, self.drop, self.paths = plan, {}, drop, set()

    def carry(self, src, socket_plane, datagram, addr):
        plane, usids = decode(addr[0])
        assert addr[1] == MRC_UDP_PORT and len(usids) == 4 and plane == socket_plane
        dst = usids[3] - HOST_BASE
        spine = usids[1] - 0x2000
        self.paths.add((src, dst, plane, spine))
        if not self.drop(plane, spine):
            source = (str(self.plan.host_address(plane, src)), MRC_UDP_PORT, 0, 0)
            self.sockets[dst][plane].inbox.append((datagram, source))


def make_pair(options=None, single_path=False, drop=lambda plane, spine: False, mtu=9000):
    wire = Wire(PLAN, drop)
    events = {0: [], 3: []}
    config = configure(options or {}, mtu, single_path)
    dps = {}
    for host in (0, 3):
        socks = wire.sockets[host] = [FakeSocket(wire, host, k) for k in range(PLAN.planes)]
        dps[host] = MrcDatapath(socks, None, PLAN, host, config, Payloads(11), events[host].append, io=PythonIo())
    return wire, dps, events


def run_until(dps, done, limit=20.0):
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, "exchange did not finish"
        for dp in dps.values():
            for sock in dp._sockets:
                dp.on_readable(sock)
            dp.tick(time.monotonic())


def test_mrc_datapath_moves_and_verifies_messages():
    wire, dps, events = make_pair()
    sizes = {1: 1 << 20, 2: 12345, 3: 0}
    for msg, size in sizes.items():
        dps[0].post(9, 3, msg, size)
    dps[3].post(9, 0, 50, 70000)  # the same connection, the other way
    run_until(dps, lambda: sum(isinstance(e, Completed) for e in events[0]) == 3
              and any(isinstance(e, Completed) for e in events[3]))
    run_until(dps, lambda: sum(isinstance(e, Delivered) for e in events[3]) == 3)
    delivered = {e.msg: e for e in events[3] if isinstance(e, Delivered)}
    assert {m: (e.bytes, e.verified, e.peer, e.conn) for m, e in delivered.items()} == \
        {m: (s, True, 0, 9) for m, s in sizes.items()}
    assert not [e for e in events[0] + events[3] if isinstance(e, Failed)]
    stats = dps[0].stats()
    assert set(stats) == {"counters", "ev_states", "last_send", "ev_sent", "base_rtt_s", "rtt_hist", "marks",
                          "connections"}
    [conn] = stats["connections"]  # each connection on its own, with what ECN did to it
    assert (conn["conn"], conn["peer"]) == (9, 3) and conn["data_sent"] == stats["counters"]["data_sent"]
    assert conn["ce_received"] == conn["ecn_skips"] == 0
    assert sum(n for evs in stats["ev_sent"].values() for n in evs.values()) == stats["counters"]["data_sent"]
    for key in ("trimmed", "retransmitted", "timeouts"):  # every increment has its millisecond, reported once
        assert sum(stats["marks"].get(key, {}).values()) == stats["counters"][key]
    assert dps[0].stats()["marks"] == {}
    assert set(stats["counters"]) >= STAT_COUNTERS
    assert set(PACKET_KEYS + PATH_KEYS) <= set(stats["counters"])  # everything results.json sums
    assert stats["counters"]["bytes_sent"] == sum(sizes.values())
    assert stats["counters"]["messages_sent"] == 3 and stats["counters"]["messages_completed"] == 3
    assert dps[3].stats()["counters"]["bytes_verified"] == sum(sizes.values())
    assert stats["base_rtt_s"] is not None and stats["base_rtt_s"] > 0
    hist = {int(b): n for b, n in stats["rtt_hist"].items()}  # one count per SACK's RTT sample
    assert sum(hist.values()) > 0 and rtt_quantile(hist, 0.0) == pytest.approx(stats["base_rtt_s"], rel=0.03)
    # 1 MiB over 64 EVs: every EV carried data, and every one of the 4 paths both ways
    assert len(stats["last_send"]["3"]) == configure({}, 9000, False).ev_count
    assert {(s, d) for s, d, _, _ in wire.paths} == {(0, 3), (3, 0)}
    assert len(wire.paths) == 2 * PLAN.paths_per_pair
    states = stats["ev_states"]  # the active EVs carried data; as many again wait in reserve, never used
    assert states["GOOD"] == len(stats["last_send"]["3"]) == states["UNKNOWN"]
    json.dumps(stats)


def test_mrc_datapath_packets_fill_the_mtu():
    wire, dps, events = make_pair(mtu=1500)
    sizes = []
    wire.carry, carry = (lambda src, k, d, addr: (sizes.append(len(d)), carry(src, k, d, addr))), wire.carry
    dps[0].post(1, 3, 1, 100000)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    assert max(sizes) == 1500 - IP_UDP_OVERHEAD == mss_for_mtu(1500) + DATA_HEADER_LEN


def test_mrc_datapath_single_path_uses_one_path():
    wire, dps, events = make_pair(single_path=True)
    dps[0].post(4, 3, 1, 300000)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    assert len({p for p in wire.paths if p[0] == 0}) == 1
    assert len(dps[0].stats()["last_send"]["3"]) == 1


def test_mrc_datapath_builds_each_qp_from_its_workloads_options():
    """QPs 0-1 spray (the scenario's config); QP 2 is a single-path workload's: one path, on both ends."""
    wire = Wire(PLAN)
    events = {0: [], 3: []}
    sprayed = configure({}, 9000, False)
    pinned = configure({"single_path": True}, 9000, False)
    dps = {}
    for host in (0, 3):
        socks = wire.sockets[host] = [FakeSocket(wire, host, k) for k in range(PLAN.planes)]
        dps[host] = MrcDatapath(socks, None, PLAN, host, sprayed, Payloads(11), events[host].append,
                                qp_configs=[(2, 3, pinned)], io=PythonIo())
    dps[0].post(conn_id(0, 3, 2), 3, 1, 300000)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    assert len({p for p in wire.paths if p[0] == 0}) == 1
    dps[0].post(conn_id(0, 3, 1), 3, 2, 300000)
    run_until(dps, lambda: sum(isinstance(e, Completed) for e in events[0]) == 2)
    assert len({p for p in wire.paths if p[0] == 0}) > 2


def test_mrc_datapath_reports_ev_retirement_when_a_path_dies():
    # generous timers: real time runs this in-memory wire, and a busy test machine must not retire other EVs
    wire, dps, events = make_pair({"reorder_window": 0.02, "rto_min": 0.1},
                                  drop=lambda plane, spine: (plane, spine) == (1, 0))
    dps[0].post(2, 3, 1, 2 << 20)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    bad = [e for e in events[0] if isinstance(e, EvChanged) and e.new == "ASSUMED_BAD"]
    assert bad and all(PLAN.ev_path(e.ev) == (1, 0) for e in bad)
    assert (bad[0].conn, bad[0].peer) == (2, 3)
    assert dps[0].stats()["ev_states"]["ASSUMED_BAD"] >= 1
    assert all(e.verified for e in events[3] if isinstance(e, Delivered))


def test_mrc_datapath_flags_a_payload_mismatch():
    wire, dps, events = make_pair()
    dps[3]._payloads = Payloads(12)  # the receiver expects another seed's bytes
    dps[0].post(1, 3, 1, 5000)
    run_until(dps, lambda: any(isinstance(e, Delivered) for e in events[3]))
    assert [e.verified for e in events[3] if isinstance(e, Delivered)] == [False]
    assert [e.reason for e in events[3] if isinstance(e, Failed)] == ["payload_mismatch"]
    counters = dps[3].stats()["counters"]
    assert counters["bytes_verified"] == 0 and counters["messages_failed"] == 1


class WritableReactor:
    """Calls back every socket registered for writing at once (a send buffer that drains immediately)."""

    def __init__(self):
        self.writers = {}

    def add_reader(self, sock, callback):
        pass

    def add_writer(self, sock, callback):
        self.writers[sock] = callback

    def remove_writer(self, sock):
        self.writers.pop(sock, None)

    def run_writers(self):
        for callback in list(self.writers.values()):
            callback()


def test_mrc_datapath_keeps_what_a_full_socket_refused():
    wire, dps, events = make_pair()
    reactor = WritableReactor()
    dps[0].attach(reactor)
    order = []
    wire.carry, carry = (lambda src, k, d, addr: (src == 0 and d[1] == 1 and order.append((k, d[8:12])),
                                                 carry(src, k, d, addr))), wire.carry
    for sock in dps[0]._sockets:
        sock.refuse = 3
    dps[0].post(1, 3, 1, 1 << 20)
    deadline = time.monotonic() + 20
    while not any(isinstance(e, Completed) for e in events[0]):
        assert time.monotonic() < deadline
        for dp in dps.values():
            for sock in dp._sockets:
                dp.on_readable(sock)
            dp.tick(time.monotonic())
        reactor.run_writers()
    counters = dps[0].stats()["counters"]
    assert counters["send_retries"] == 6 and counters["retransmitted"] == 0
    for plane in range(PLAN.planes):  # per plane, first transmissions leave in PSN order
        psns = [int.from_bytes(p, "big") for k, p in order if k == plane]
        assert psns[:20] == sorted(psns[:20])
    assert [e.verified for e in events[3] if isinstance(e, Delivered)] == [True]


def test_mrc_datapath_retries_what_a_qdisc_refused_in_order():
    """ENOBUFS: the refused datagram and what follows it on that plane wait, and go after ENOBUFS_RETRY, in order;
    the other planes carry on meanwhile. Nothing is lost, nothing resent by the transport (its reorder window
    wide enough that this process's own pauses on a loaded machine never read as losses on the instant wire)."""
    wire, dps, events = make_pair({"reorder_window": 0.1, "reorder_window_max": 0.1})
    order = []
    wire.carry, carry = (lambda src, k, d, addr: (src == 0 and d[1] == 1 and order.append((k, d[8:12])),
                                                 carry(src, k, d, addr))), wire.carry
    dps[0]._sockets[1].refuse, dps[0]._sockets[1].refuse_errno = 2, errno.ENOBUFS
    dps[0].post(1, 3, 1, 1 << 20)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    counters = dps[0].stats()["counters"]
    assert counters["send_retries"] == 2 and counters["retransmitted"] == 0 and counters["socket_errors"] == 0
    for plane in range(PLAN.planes):
        psns = [int.from_bytes(p, "big") for k, p in order if k == plane]
        assert psns[:20] == sorted(psns[:20])
    assert [e.verified for e in events[3] if isinstance(e, Delivered)] == [True]


def test_mrc_datapath_tries_once_more_after_an_error_about_another_datagram():
    """An error the kernel reports on a send (here EHOSTUNREACH) is about an earlier datagram: it is counted, the
    datagram is sent once more, and the rest go on."""
    wire, dps, events = make_pair()
    dps[0]._sockets[0].refuse, dps[0]._sockets[0].refuse_errno = 1, errno.EHOSTUNREACH
    dps[0].post(1, 3, 1, 100_000)
    run_until(dps, lambda: any(isinstance(e, Completed) for e in events[0]))
    counters = dps[0].stats()["counters"]
    assert counters["socket_errors"] == 1 and counters["send_retries"] == 0 and counters["retransmitted"] == 0


def test_mrc_datapath_warms_every_path_to_a_peer_before_any_data():
    wire, dps, events = make_pair()
    assert dps[0].warm(9, 3) == PLAN.paths_per_pair
    run_until(dps, lambda: dps[0].stats()["counters"]["warm_replies"] == PLAN.paths_per_pair)
    counters = dps[0].stats()["counters"]
    assert counters["warm_probes"] == PLAN.paths_per_pair and counters["probes"] == 0
    assert counters["data_sent"] == 0 and not events[0] and not events[3]
    assert {(s, d) for s, d, _, _ in wire.paths} == {(0, 3), (3, 0)} and len(wire.paths) == 2 * PLAN.paths_per_pair
    with pytest.raises(ValueError):
        dps[0].warm(9, 0)


def test_mrc_datapath_rejects_bad_posts():
    _, dps, _ = make_pair()
    for peer in (0, 4):
        with pytest.raises(ValueError):
            dps[0].post(1, peer, 1, 10)
    dps[0].post(1, 3, 1, 10)
    with pytest.raises(ValueError):
        dps[0].post(1, 3, 1, 10)  # still in flight


def test_strangers_are_counted_not_fatal():
    _, dps, _ = make_pair()
    dps[0]._sockets[0].inbox += [(b"\x01" * 60, ("fcbb:0:4007::", MRC_UDP_PORT, 0, 0)),
                           (b"\x01" * 60, ("fd00::1", MRC_UDP_PORT, 0, 0)),
                           (b"\x01\x02", (str(PLAN.host_address(0, 3)), MRC_UDP_PORT, 0, 0))]
    dps[0].on_readable(dps[0]._sockets[0])
    assert dps[0].stats()["counters"]["strangers"] == 3


# -- the agent's request handling ------------------------------------------------------------------------

class FakeLog:
    def __init__(self):
        self.records = []

    def write(self, kind, **fields):
        self.records.append((kind, fields))


class FakeReactor:
    stop_reason = None

    def stop(self, reason):
        self.stop_reason = reason


def test_agent_handles_requests():
    _, dps, _ = make_pair()
    log, reactor = FakeLog(), FakeReactor()
    agent = Agent(0, reactor, log=log)
    agent.datapath = dps[0]
    ping = agent.handle(b'{"type": "ping", "id": 1}')
    assert isinstance(ping, Pong) and ping.host == 0 and ping.id == 1 and ping.pid > 0
    assert agent.handle(b'{"type": "post", "id": 2, "conn": 1, "peer": 3, "msg": 1, "size": 10}') == Done(2)
    bad = agent.handle(b'{"type": "post", "id": 3, "conn": 1, "peer": 9, "msg": 1, "size": 10}')
    assert isinstance(bad, Refused) and bad.id == 3 and "peer 9" in bad.error
    assert agent.handle(b"{") == Refused(None, agent.handle(b"{").error)
    assert isinstance(agent.handle(b'{"type": "done", "id": 6}'), Refused)  # an answer is no request
    stats = agent.handle(b'{"type": "stats", "id": 4}')
    assert isinstance(stats, Report)
    assert {"counters", "ev_states", "last_send", "base_rtt_s", "cpu_s"} <= set(stats.stats)
    assert set(stats.stats["counters"]) >= STAT_COUNTERS
    assert messages.decode(messages.encode(stats)) == stats
    assert agent.handle(b'{"type": "quit", "id": 5}') == Done(5) and reactor.stop_reason == "quit"
    assert [f.get("type") for k, f in log.records if k == "request"] == ["ping", "post", "post", None, None, None,
                                                                        "stats", "quit"]


# -- command line ------------------------------------------------------------------------------------------

BASE = ["--host", "1", "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2",
        "--control", "/nonexistent/c", "--log", "/nonexistent/l"]


@pytest.mark.parametrize("change, fragment", [
    (["--host", "4"], "--host 4"),
    (["--planes", "0"], "planes"),
    (["--transport", "udp"], "--transport"),
    (["--options", "[1]"], "JSON object"),
    (["--options", "{"], "not JSON"),
    (["--mtu", "100"], "--mtu"),
    (["--qp-options", "{}"], "--qp-options must be a JSON list"),
    (["--qp-options", "[[0, 1]]"], "--qp-options must be a JSON list"),
    (["--qp-options", "[["], "--qp-options is not JSON"),
])
def test_bad_arguments(change, fragment):
    with pytest.raises(BadArguments) as err:
        parse_args(BASE + change)
    assert fragment in str(err.value)


def test_bad_arguments_exit_2_with_one_line(tmp_path):
    for extra in (["--host", "9"], ["--options", '{"bogus": 1}'], ["--transport", "tcp", "--options", '{"x": 1}']):
        argv = BASE[:-4] + ["--control", str(tmp_path / "c"), "--log", str(tmp_path / "l")] + extra
        proc = subprocess.run([sys.executable, "-m", "mrclab.agent", *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("mrclab.agent: "), proc.stderr
        assert not (tmp_path / "c").exists()


def test_an_agents_end_is_told_by_its_signals_name():
    from mrclab.agents import exit_text
    assert exit_text(-9) == "was killed by SIGKILL" and exit_text(-15) == "was killed by SIGTERM"
    assert exit_text(2) == "exited with code 2" and exit_text(None) == "is still running"


def test_connections_started_together_start_on_different_paths():
    """Eight one-packet messages on eight connections to one peer: were every connection to start spraying at its
    first slot, all eight packets would take one path (the 64-way all-to-all that trimmed a fifth of its packets)."""
    _, dps, _ = make_pair()
    for conn in range(1, 9):
        dps[0].post(conn, 3, 0, 100)
    dps[0].tick(time.monotonic())
    first = dps[0].stats()["ev_sent"]["3"]
    assert sum(first.values()) == 8 and len(first) >= 4
