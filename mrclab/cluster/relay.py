"""An agent's control channel carried over SSH: ``mrclab cluster-relay SOCKET`` joins its standard input and
output (one SSH channel's) to an agent's control socket on that server, byte for byte, until either end closes.

The runner opens one such channel per agent of a server it reaches over SSH and speaks `agent.messages` through
it exactly as through the socket itself; when the channel closes (the runner went away, or the SSH connection
did) the relay closes the socket, and the agent, whose life is bound to its one connection, exits.
"""
from __future__ import annotations

import os
import selectors
import socket
import sys

CHUNK = 1 << 16


def relay(path: str, stdin: int = 0, stdout: int = 1) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        sys.stderr.write(f"mrclab cluster-relay: cannot connect to {path}: {exc.strerror}\n")
        return 3
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ, "in")
    selector.register(sock, selectors.EVENT_READ, "agent")
    with sock:
        while True:
            for key, _ in selector.select():
                if key.data == "in":
                    data = os.read(stdin, CHUNK)
                    if not data:
                        return 0
                    try:
                        sock.sendall(data)
                    except OSError:  # the agent is gone
                        return 0
                else:
                    try:
                        data = sock.recv(CHUNK)
                    except ConnectionError:
                        data = b""
                    if not data:
                        return 0
                    view = memoryview(data)
                    while view:
                        view = view[os.write(stdout, view):]


if __name__ == "__main__":
    sys.exit(relay(sys.argv[1]))
