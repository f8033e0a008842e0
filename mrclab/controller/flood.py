"""Link states between the controllers of a lab over servers, as a link-state routing protocol floods them.

Each server's kernel controller (`kernel`) sees carrier only on its own routers' ports, yet a reconverging
routing (ecmp-reconverge) rewrites a leaf's multipath routes when any leaf-spine link dies, wherever it is. So
each controller tells every other server's controller its own down ports, and hears theirs: one UDP datagram
per change, sent from and to the servers' underlay addresses (where the VXLAN tunnels run), with the whole of
the sender's state and a sequence number, so a lost or reordered datagram is mended by the next. Every
`REFRESH_S` the state goes again, as a link-state protocol refreshes its advertisements.

The peers' ports are learnt at run time: each controller binds an ephemeral port (in its stats as
``flood_port``), the runner gathers them, and each share hands its controller the others' in a datagram
``{"peers": [[address, port], ...]}`` from its own address (`cluster.server`). Datagrams from any address but
the lab's servers' are ignored.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from typing import Any

log = logging.getLogger("mrclab.controller.flood")

REFRESH_S = 0.5
Port = tuple[str, str]  # (switch, peer): that switch's port towards that peer has no carrier


def _normal(address: str) -> str:
    return str(ipaddress.ip_address(address.split("%")[0]))


class Flood:
    """One controller's end: `sock` (non-blocking) is read when select says so (`receive`); `tell` after a change
    of its own ports, `refresh` when due."""

    def __init__(self, *, server: int, address: str, peers: list[str]) -> None:
        self.server = server
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((address, 0))
        self.sock.setblocking(False)
        self.port: int = self.sock.getsockname()[1]
        self.allowed = {_normal(a) for a in (address, *peers)}
        self.peers: list[tuple[str, int]] = []
        self.seq = 0
        self.mine: frozenset[Port] = frozenset()
        self.heard: dict[int, tuple[int, frozenset[Port]]] = {}  # server -> (its last seq, its down ports)
        self.sent_at = 0.0

    def down(self) -> frozenset[Port]:
        """The other servers' down ports, as last heard."""
        return frozenset().union(*(ports for _, ports in self.heard.values()))

    def tell(self, mine: frozenset[Port]) -> None:
        """This server's down ports changed (or are due again): every peer hears the whole set."""
        self.mine = mine
        self.seq += 1
        data = json.dumps({"server": self.server, "seq": self.seq, "down": sorted(mine)}).encode()
        for peer in self.peers:
            try:
                self.sock.sendto(data, peer)
            except OSError as exc:  # the next refresh tries again
                log.warning("link states to %s:%d: %s", *peer, exc)
        self.sent_at = time.monotonic()

    def refresh(self) -> None:
        if self.peers and time.monotonic() - self.sent_at >= REFRESH_S:
            self.tell(self.mine)

    def receive(self) -> list[str]:
        """Read what arrived; the servers whose link states changed (as "server N" triggers)."""
        changed: list[str] = []
        while True:
            try:
                data, source = self.sock.recvfrom(1 << 16)
            except BlockingIOError:
                return changed
            if _normal(source[0]) not in self.allowed:
                continue
            try:
                doc: Any = json.loads(data)
                if "peers" in doc:
                    self.peers = [(str(a), int(p)) for a, p in doc["peers"]]
                    log.info("flooding link states to %s", ", ".join(f"[{a}]:{p}" for a, p in self.peers))
                    self.tell(self.mine)
                    continue
                server, seq = int(doc["server"]), int(doc["seq"])
                ports = frozenset((str(s), str(p)) for s, p in doc["down"])
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a datagram from %s that is not a link state", source[0])
                continue
            last, before = self.heard.get(server, (0, frozenset()))
            if seq <= last:
                continue
            self.heard[server] = (seq, ports)
            if ports != before:
                changed.append(f"server {server}")

    def close(self) -> None:
        self.sock.close()
