"""Benchmark: mrclab's build + program + verify-every-path + teardown of a topology, against
Mininet's own build + start + stop of the same switches and cables (no controller, no
shaping, no host configuration, no verification), measured in one run on this machine.

    sudo .venv/bin/python benchmarks/fabric_build.py [TOPOLOGY] [--json]

Both sides use run-prefixed names recorded in a RunState, so concurrent runs are safe
and an interrupted benchmark is cleaned up by `mrclab clean`. Mininet's hosts get no IP
address (they never send anything; its switches are fail-secure with no controller).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mininet.net import Mininet  # noqa: E402
from mininet.node import OVSSwitch  # noqa: E402
from mininet.topo import Topo  # noqa: E402

from mrclab.check import kernel_datapath_available  # noqa: E402
from mrclab.fabric.verify import verify_topology  # noqa: E402
from mrclab.runstate import RunState  # noqa: E402
from mrclab.spec import topology as topology_mod  # noqa: E402


class ClosTopo(Topo):
    """The same hosts, switches and cables as mrclab builds, in Mininet's own naming (`<node>-eth<port>`)."""

    def build(self, t, prefix: str) -> None:
        for name in t.host_names:
            self.addHost(prefix + name, ip=None)
        for n, name in enumerate(t.switch_names):
            self.addSwitch(prefix + name, dpid=f"{n + 1:016x}")
        for link in t.links:
            self.addLink(prefix + link.a, prefix + link.b)


def mininet_bare(t) -> dict:
    state = RunState.create(f"benchmark: mininet bare {t.name}")
    topo = ClosTopo(t=t, prefix=state.prefix)
    for name in topo.switches():
        state.add_bridge(name)
    for a, b, info in topo.links(withInfo=True):
        for node, port in ((a, info["port1"]), (b, info["port2"])):
            if node in topo.switches():
                state.add_interface(f"{node}-eth{port}")
    datapath = "kernel" if kernel_datapath_available() else "user"
    net = Mininet(topo=None, switch=partial(OVSSwitch, datapath=datapath, protocols="OpenFlow13"),
                  controller=None, build=False, waitConnected=False)
    try:
        t0 = time.monotonic()
        net.topo = topo
        net.build()
        for node in net.hosts + net.switches:
            state.add_process(node.pid, f"mininet {node.name}")
        t1 = time.monotonic()
        net.start()
        t2 = time.monotonic()
        net.stop()
        t3 = time.monotonic()
    finally:
        state.teardown()
    return {"build": round(t1 - t0, 3), "start": round(t2 - t1, 3), "stop": round(t3 - t2, 3),
            "total": round(t3 - t0, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topology", nargs="?", default="clos-4p-4l-4s")
    parser.add_argument("--datapath", choices=("auto", "ovs", "linux"), default="auto")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    t = topology_mod.load(args.topology)
    ours = verify_topology(t, datapath=args.datapath)
    if not ours["ok"]:
        sys.exit(f"verification failed: {ours['paths'] - ours['ok_paths']} of {ours['paths']} paths")
    bare = mininet_bare(t)
    doc = {"topology": t.name, "datapath": ours["datapath"], "paths": ours["paths"],
           "mrclab_s": ours["timings_s"], "mininet_bare_s": bare,
           "ratio": round(ours["timings_s"]["total"] / bare["total"], 2)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    m, b = doc["mrclab_s"], doc["mininet_bare_s"]
    print(f"{t.name} ({len(t.switch_names)} switches, {len(t.links)} links, {t.hosts} hosts), "
          f"{doc['datapath']} datapath")
    print(f"  mrclab   build+program {m['build']:.2f} s  verify {doc['paths']} paths {m['verify']:.2f} s  "
          f"teardown {m['teardown']:.2f} s  total {m['total']:.2f} s")
    print(f"  mininet  build {b['build']:.2f} s  start {b['start']:.2f} s  stop {b['stop']:.2f} s  "
          f"total {b['total']:.2f} s  (no controller, shaping, host config or verification)")
    print(f"  ratio mrclab/mininet: {doc['ratio']:.2f}")


if __name__ == "__main__":
    main()
