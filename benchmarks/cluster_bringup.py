"""Bring-up over two servers against bring-up on one machine, with `mrclab topo verify`:

    sudo .venv/bin/python benchmarks/cluster_bringup.py [--topology clos-4p-4l-4s] [--repeat 3]

The two servers are network namespaces of this machine joined by a veth underlay, the second reached over SSH
through its own sshd (the harness of tests/integration/test_cluster_verify.py), so what is measured is the
cluster's own cost (SSH, the second mrclab's start, tunnels, the probes' round trips through the share
processes), not a network's. Runs alternate local / two servers; printed per run: build, verify and teardown
seconds, and per phase the median of the two-server runs over the local ones, measured in the same invocation.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mrclab.spec import topology as topology_mod  # noqa: E402
from tests.cluster_servers import NamespaceServers  # noqa: E402


def verify(argv_prefix: list[str], topology: str, extra: list[str], env: dict) -> dict:
    done = subprocess.run([*argv_prefix, sys.executable, "-m", "mrclab", "topo", "verify", topology, "--json", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise SystemExit(f"topo verify {' '.join(extra)} failed (exit {done.returncode}): {done.stderr[-600:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="clos-4p-4l-4s")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    topo = topology_mod.load(args.topology)
    servers = NamespaceServers(topo.mtu)
    try:
        with tempfile.TemporaryDirectory(prefix="mrclab-bench-") as tmp:
            sshd = servers.sshd(1, Path(tmp) / "sshd")
            env = servers.runner_env(Path(tmp) / "home")
            rows: dict[str, list[dict]] = {"local": [], "2 servers": []}
            for _ in range(args.repeat):
                rows["local"].append(verify(servers.enter(0), args.topology, [], env))
                rows["2 servers"].append(verify(servers.enter(0), args.topology,
                                                ["--servers", f"local,{sshd.target}"], env))
    finally:
        servers.close()
    print(f"{args.topology}: {topo.hosts} hosts, {len(topo.switch_names)} routers; linux datapath")
    print(f"{'run':<10} {'paths ok':>10} {'build s':>8} {'verify s':>9} {'teardown s':>11}")
    for label, docs in rows.items():
        for d in docs:
            t = d["timings_s"]
            print(f"{label:<10} {d['ok_paths']:>5}/{d['paths']:<4} {t['build']:>8.2f} {t['verify']:>9.2f} "
                  f"{t['teardown']:>11.2f}")
    for phase in ("build", "verify", "teardown", "total"):
        local = statistics.median(d["timings_s"][phase] for d in rows["local"])
        two = statistics.median(d["timings_s"][phase] for d in rows["2 servers"])
        print(f"{phase:<9} median local {local:6.2f} s, 2 servers {two:6.2f} s: x{two / local:.2f} "
              f"(aim for build: <= 2 x local + 5 s = {2 * local + 5:.2f} s)" if phase == "build" else
              f"{phase:<9} median local {local:6.2f} s, 2 servers {two:6.2f} s: x{two / local:.2f}")


if __name__ == "__main__":
    main()
