"""Egress shaping accuracy and attach cost: `sudo .venv/bin/python benchmarks/egress_rate.py`.

Configured vs measured rate: iperf3 TCP across the shaped veth of the integration tests'
two-namespace lab (MTU 9000), reported as TCP goodput and as Ethernet wire rate (goodput
scaled by frame / payload). Attach time: many veths in a throwaway namespace and in the
root namespace, each attached as a switch port would be.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from test_egress import VethLab, tcp_goodput  # noqa: E402  (the lab the integration tests use)

RATES = (10_000_000, 50_000_000, 100_000_000, 500_000_000, 1_000_000_000)
MTU = 9000
PORTS = 96  # veth pairs, so 96 attached ports per namespace


def rates(lab: VethLab) -> None:
    print(f"{'configured':>12} {'goodput':>10} {'wire':>10} {'error':>7}")
    for rate in RATES:
        lab.egress.attach(lab.port, rate, 4 << 20, MTU, True, netns_pid=lab.holder)
        goodput = lab.iperf_bps(3)
        wire = goodput * rate / tcp_goodput(rate, MTU)
        print(f"{rate / 1e6:>9.0f}Mbit {goodput / 1e6:>7.2f}Mbit {wire / 1e6:>7.2f}Mbit {wire / rate - 1:>+7.2%}")


def attach_time(lab: VethLab, netns: bool) -> None:
    names = [f"{lab.state.prefix}{'n' if netns else 'r'}{i}" for i in range(PORTS)]
    batch = "".join(f"link add {n} type veth peer name {n}x\n" for n in names)
    if netns:
        lab.ns(lab.ns_a, "ip", "-batch", "-", input=batch)
    else:
        for n in names:
            lab.state.add_interface(n)
        lab.ns(None, "ip", "-batch", "-", input=batch)
    start = time.perf_counter()
    for n in names:
        lab.egress.attach(n, 100_000_000, 65536, MTU, True, netns_pid=lab.holder if netns else None)
    per_port = (time.perf_counter() - start) / PORTS
    print(f"attach, {'host namespace (nsenter)' if netns else 'root namespace'}: {per_port * 1e3:.1f} ms per port")


def main() -> None:
    load = time.perf_counter()
    lab = VethLab(mtu=MTU)
    print(f"lab set-up incl. loading the program: {time.perf_counter() - load:.2f} s")
    try:
        rates(lab)
        attach_time(lab, netns=True)
        attach_time(lab, netns=False)
    finally:
        lab.close()


if __name__ == "__main__":
    main()
