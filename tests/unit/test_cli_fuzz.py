"""The command line under hostile input: seeded random `--set` keys and values, bad folders and targets. Every
case ends in exit 0, 2 or 3 with at most one line on stderr, and none is an internal error."""
import random
import subprocess
import sys

import pytest

from tests.conftest import REPO

KEYS = ["workload.steps", "workload.message", "workload.pattern", "workload.connections", "transport", "seed",
        "topology", "events", "workloads", "transport_options.mss", "transport_options.cc_algorithm",
        "duration_limit", "capture", "routing_options.convergence_delay", "workload.pairs", "expect.fidelity_ok",
        "topology.links.host_rate", "workload.duration", "workload.bin", "a.b.c", "", "workload..steps"]
VALUES = ["0", "-1", "1e309", "nan", "[]", "{}", "[[h0, h0]]", "null", "true", "'x' * 3", "\x00", "9" * 400,
          "{a: [1, {b: 2}]}", "10Gbit", "1us", "stream", "roce", "../../etc/passwd", "*alias", "&anchor x",
          "[h0, h1", "64KiB", "dcqcn", "'\\u202e'"]
OUTS = ["/proc/self/x", "/sys/x", "/dev/null/x", "/etc/hostname", "", ".", "/"]  # none a folder a run may use


def cases(n=40, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sets = [f"{rng.choice(KEYS)}={rng.choice(VALUES)}" for _ in range(rng.randint(1, 3))]
        out.append(["run", "smoke", "--dry-run", *(a for s in sets for a in ("--set", s))])
    out += [["run", "smoke", "--out", o] for o in OUTS]
    out += [["run", "smoke", "--dry-run", "--target", t] for t in ("", "@", "a@b:99999", "x" * 300, "-oProxy=x")]
    out += [["sweep", "smoke", "--grid", g] for g in ("=", "seed=", "transport=mrc,mrc", "x.y=1,2", "seed=a,b")]
    out += [["paper", "--only", "99"], ["run", "/dev/zero"], ["run", "smoke", "--set", "=1"]]
    return out


def test_no_case_is_an_internal_error():
    bad = []
    for args in cases():
        args = [a.replace("\x00", "") for a in args]  # a NUL cannot be an argv byte
        r = subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO,
                           timeout=60)
        lines = r.stderr.strip().splitlines()
        if r.returncode not in (0, 2, 3) or len(lines) > 1 or "internal error" in r.stderr or "Traceback" in r.stderr:
            bad.append(f"{args}: exit {r.returncode}: {r.stderr.strip()[:200]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("args", [["run", "smoke", "--dry-run", "--set", "workload.steps=0"]])
def test_a_case_can_fail(args):
    r = subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "workload.steps" in r.stderr
