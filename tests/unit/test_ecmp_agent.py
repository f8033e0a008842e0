"""The agent under ``--routing ecmp-reconverge``, without a fabric: EVs become (plane, entropy source port)
towards host addresses, a message still completes both ways, and the default stays uSID paths."""
from __future__ import annotations

import time

from mrclab.addressing import Plan, decode
from mrclab.agent.__main__ import parse_args
from mrclab.agent.batchio import PythonIo
from mrclab.agent.endpoint import configure
from mrclab.agent.messages import Completed, Delivered
from mrclab.agent.mrc import ENTROPY_PORT_BASE, MrcDatapath
from mrclab.agent.payload import Payloads
from mrclab.transport import MRC_UDP_PORT
from tests.fakes import InboxSocket

PLAN = Plan(2, 2, 2, 2)
ARGS = ["--host", "0", "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2",
        "--control", "/nonexistent", "--log", "/dev/null"]


class Socket(InboxSocket):
    """A bound UDP socket on an in-memory ECMP fabric: delivers to the socket bound to the destination."""

    def __init__(self, fabric: dict, address: str, port: int):
        self.fabric, self.name, self.inbox = fabric, (address, port), []
        fabric[self.name] = self

    def sendto(self, datagram, addr):
        self.fabric["sent"].append((self.name, addr[:2]))
        self.fabric[addr[:2]].inbox.append((bytes(datagram), (*self.name, 0, 0)))


def _datapath(fabric: dict, host: int, events: list) -> MrcDatapath:
    planes = [Socket(fabric, str(PLAN.host_address(k, host)), MRC_UDP_PORT) for k in range(PLAN.planes)]
    entropy = [[Socket(fabric, str(PLAN.host_address(k, host)), ENTROPY_PORT_BASE + e) for e in range(PLAN.spines)]
               for k in range(PLAN.planes)]
    return MrcDatapath(planes, None, PLAN, host, configure({}, 9000, single_path=False), Payloads(3), events.append,
                       entropy, io=PythonIo())


def test_routing_defaults_to_static_srv6():
    assert parse_args(ARGS).routing == "static-srv6"
    assert parse_args(ARGS + ["--routing", "ecmp-reconverge"]).routing == "ecmp-reconverge"


def test_evs_spray_over_planes_and_source_ports_to_host_addresses():
    fabric = {"sent": []}
    events = {0: [], 3: []}
    dps = {h: _datapath(fabric, h, events[h]) for h in events}
    dps[0].post(conn_id=7, peer=3, msg=1, size=200_000)
    deadline = time.monotonic() + 10
    while not any(isinstance(e, Completed) for e in events[0]):
        assert time.monotonic() < deadline, "message did not complete"
        for dp in dps.values():
            for sock in dp._sockets:
                dp.on_readable(sock)
            dp.tick(time.monotonic())
    assert any(isinstance(e, Delivered) and e.verified for e in events[3])
    data = {(src, dst) for src, dst in fabric["sent"] if src[0] in {str(PLAN.host_address(k, 0)) for k in (0, 1)}}
    # every (plane, entropy) of host 0 was used, always towards host 3's own address and the MRC port
    assert {(decode(src[0])[0], src[1] - ENTROPY_PORT_BASE) for src, _ in data} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert {dst for _, dst in data} == {(str(PLAN.host_address(k, 3)), MRC_UDP_PORT) for k in (0, 1)}
    assert all(decode(src[0])[0] == decode(dst[0])[0] for src, dst in data)  # a plane's socket stays on its plane
