"""Link states between the controllers of a lab over servers (`controller.flood`), over real UDP on loopback
addresses: the whole state with a sequence number, so a stale or repeated datagram changes nothing, and only the
lab's servers are heard."""
from __future__ import annotations

import json
import socket
import time

import pytest

from mrclab.controller import flood as flood_mod
from mrclab.controller.flood import Flood


def wait_for(end: Flood, timeout: float = 2.0) -> list[str]:
    deadline = time.monotonic() + timeout
    changed: list[str] = []
    while not changed and time.monotonic() < deadline:
        changed = end.receive()
        time.sleep(0.01)
    return changed


@pytest.fixture
def pair():
    a = Flood(server=0, address="127.0.0.1", peers=["127.0.0.2"])
    b = Flood(server=1, address="127.0.0.2", peers=["127.0.0.1"])
    try:
        for end, other in ((a, b), (b, a)):
            mine = f"127.0.0.{end.server + 1}"
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as share:  # as a share hands them over
                share.bind((mine, 0))
                share.sendto(json.dumps({"peers": [[f"127.0.0.{other.server + 1}", other.port]]}).encode(),
                             (mine, end.port))
            deadline = time.monotonic() + 2
            while not end.peers and time.monotonic() < deadline:
                end.receive()
        assert a.peers == [("127.0.0.2", b.port)] and b.peers == [("127.0.0.1", a.port)]
        yield a, b
    finally:
        a.close()
        b.close()


def test_a_change_reaches_the_other_server_and_its_repair_too(pair):
    a, b = pair
    a.tell(frozenset({("p0l0", "p0s1")}))
    assert wait_for(b) == ["server 0"] and b.down() == {("p0l0", "p0s1")}
    a.refresh()  # not due yet: nothing new
    a.sent_at -= flood_mod.REFRESH_S
    a.refresh()  # due: the same state again changes nothing
    time.sleep(0.1)
    assert b.receive() == [] and b.down() == {("p0l0", "p0s1")}
    a.tell(frozenset())
    assert wait_for(b) == ["server 0"] and b.down() == frozenset()


def test_a_stale_datagram_is_ignored(pair):
    a, b = pair
    a.tell(frozenset({("p0l0", "p0s1")}))
    wait_for(b)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as old:
        old.bind(("127.0.0.1", 0))
        old.sendto(json.dumps({"server": 0, "seq": 1, "down": []}).encode(), ("127.0.0.2", b.port))
    time.sleep(0.1)
    assert b.receive() == [] and b.down() == {("p0l0", "p0s1")}


def test_only_the_labs_servers_are_heard():
    end = Flood(server=0, address="127.0.0.1", peers=["127.0.0.2"])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            stranger.bind(("127.0.0.3", 0))
            stranger.sendto(json.dumps({"server": 1, "seq": 5, "down": [["p0l1", "p0s0"]]}).encode(),
                            ("127.0.0.1", end.port))
            stranger.sendto(json.dumps({"peers": [["127.0.0.3", 9]]}).encode(), ("127.0.0.1", end.port))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.bind(("127.0.0.2", 0))
            peer.sendto(b"not json", ("127.0.0.1", end.port))
        time.sleep(0.1)
        assert end.receive() == [] and end.down() == frozenset() and end.peers == []
    finally:
        end.close()
