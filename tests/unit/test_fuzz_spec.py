"""Fuzz: mutated shipped scenario and topology files through the loader, and through `run --dry-run`.
Every outcome is a valid object or the project's own one-line error, quickly and in little memory."""
from __future__ import annotations

import resource
import subprocess
import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrclab import preflight
from mrclab.errors import UsageError
from mrclab.spec import scenario as scenario_mod
from mrclab.spec import topology as topology_mod
from tests.mutations import REPO, SHIPPED, kind, mutate


def load(path, what):
    if what == "topology":
        return topology_mod.load(path)
    scenario = scenario_mod.load(path)
    preflight.check(scenario)
    preflight.plan(scenario)
    return scenario


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(SHIPPED), seed=st.integers(0, 2 ** 32 - 1))
def test_a_mutated_file_loads_or_is_refused_in_one_line(tmp_path_factory, base, seed):
    target = tmp_path_factory.mktemp("m") / base.name
    content = mutate(base, seed)
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    try:
        result = load(target, kind(base))
        assert isinstance(result, (scenario_mod.Scenario, topology_mod.Topology))
    except UsageError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) <= 700, message[:800]
    assert time.monotonic() - start < 10.0  # a hang guard, not a performance figure (benchmarks/fuzz_spec.py)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100_000  # KiB


def test_dry_run_over_a_seeded_corpus_exits_0_or_2_with_one_line(tmp_path):
    corpus = []
    for seed in range(12):
        base = [p for p in SHIPPED if kind(p) == "scenario"][seed % 9]
        path = tmp_path / f"{seed}-{base.name}"
        content = mutate(base, seed * 7919)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        corpus.append(path)
    procs = [subprocess.Popen([sys.executable, "-m", "mrclab", "run", str(p), "--dry-run"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in corpus]
    codes = []
    for path, proc in zip(corpus, procs, strict=True):
        stdout, stderr = proc.communicate(timeout=120)
        codes.append(proc.returncode)
        assert proc.returncode in (0, 2, 3), (path.name, stderr)
        assert "Traceback" not in stderr, (path.name, stderr)
        if proc.returncode == 3:  # a well-formed scenario on a machine that cannot run a lab (a dry run checks it)
            assert stderr.startswith("mrclab: cannot run a lab: `mrclab check` row"), (path.name, stderr)
        if proc.returncode == 2:
            assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("mrclab: "), (path.name, stderr)
        else:
            assert "timeline:" in stdout and stderr == ""
    assert 2 in codes, "the corpus never exercised a rejection"
    assert not (tmp_path / "results").exists() and REPO.exists()
