"""Packets per second of the MRC transport state machine alone, and of the simulator around it.

    python benchmarks/transport_sim.py [--packets N] [--mss BYTES]

"state machine": one sender and one receiver Connection in this process, every
datagram handed straight across (no network, no loss), so the figure is the Python
cost per DATA packet on both ends including SACKs, the ceiling an agent can reach.
"simulated": the same transfer through mrclab.transport.sim's 4-plane Clos.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mrclab.addressing import Plan  # noqa: E402
from mrclab.transport import Connection, TransportConfig  # noqa: E402
from mrclab.transport.sim import Network, clos  # noqa: E402

PLAN = Plan(planes=4, leaves=2, spines=4, hosts_per_leaf=1)


def plane(ev: int) -> int:
    return PLAN.ev_path(ev)[0]


def state_machine(packets: int, config: TransportConfig) -> float:
    a = Connection(1, list(range(128)), plane, config=config)
    b = Connection(1, list(range(128)), plane, config=config)
    message = os.urandom(config.mss * 256)
    messages = -(-packets // 256)
    for i in range(messages):
        a.send_message(i, message)
    now = 0.0
    start = time.perf_counter()
    while a.busy:
        now += 1e-5
        for _, datagram in a.datagrams_to_send(now):
            b.receive(datagram, None, now)
        for _, datagram in b.datagrams_to_send(now):
            a.receive(datagram, None, now)
        a.pop_events()
        b.pop_events()
    return a.counters.data_sent / (time.perf_counter() - start)


def simulated(packets: int, config: TransportConfig) -> float:
    links, route = clos(PLAN, 100e9, 100e9, delay=5e-6, queue=1 << 20)
    net = Network(route, seed=1)
    a, b = net.connect(0, 1, 1, list(range(128)), plane, config)
    message = os.urandom(config.mss * 256)
    for i in range(-(-packets // 256)):
        net.send(a, i, message)
    start = time.perf_counter()
    net.run(stop=lambda: not a.conn.busy and net.now > 0)
    return a.conn.counters.data_sent / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=100_000)
    parser.add_argument("--mss", type=int, nargs="*", default=[1400, 8192])
    args = parser.parse_args()
    for mss in args.mss:
        for sack_every in (1, 4):
            config = TransportConfig(mss=mss, sack_every=sack_every, cc_init_window=1 << 20)
            rate = state_machine(args.packets, config)
            print(f"state machine  mss={mss:5d} sack_every={sack_every}: {rate:9,.0f} DATA packets/s "
                  f"({rate * mss * 8 / 1e9:.2f} Gbit/s of payload)")
        rate = simulated(args.packets // 4, TransportConfig(mss=mss))
        print(f"simulated      mss={mss:5d} sack_every=4: {rate:9,.0f} DATA packets/s")


if __name__ == "__main__":
    main()
