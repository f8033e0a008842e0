"""Every key of results.json is documented in docs/spec.md, and the EV states have one set of names: the
transport's, in results, in the report's plot, in the README and in the docs."""
import json
import re
from pathlib import Path

import pytest

from mrclab import api
from mrclab.report import plots
from mrclab.report.run import load as load_report_run
from mrclab.spec.keys import transport_options
from mrclab.transport.ev import EvState
from tests.conftest import REPO

STATES = {s.name for s in EvState}
LAB_RUN = REPO / "examples" / "runs" / "smoke-lab"
PAIR = re.compile(r"h\d+>h\d+")


def documented_words() -> set[str]:
    spec = (REPO / "docs" / "spec.md").read_text()
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", spec[spec.index("## Results"):]))


def keys_of(node, path: str = ""):
    """(dotted path, key) of every mapping key in a results document; the keys a mapping holds by name (options,
    stream pairs, EV states, --set keys, servers) are checked apart."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else key
            if path.endswith("ev_states"):
                assert key in STATES, f"{where}: not an EV state"
            elif path == "transport_options":
                assert key in transport_options().names(), f"{where}: not a transport option"
            elif path == "timeseries" and PAIR.fullmatch(key):
                pass
            elif path in ("overrides", "capture.counts", "summary.cpu_s_per_mib.hosts", "summary.cpu_s_per_mib.cpu_s") \
                    or path.endswith("time_uncertainty_s"):
                continue
            else:
                yield where, key
            yield from keys_of(value, where)
    elif isinstance(node, list):
        for item in node[:200]:
            yield from keys_of(item, f"{path}[]")


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    return api.run("smoke", engine="sim", out=tmp_path_factory.mktemp("sim") / "run")


def test_every_results_key_is_documented(sim_run):
    words = documented_words()
    docs = [api.load(LAB_RUN).results, sim_run.results]
    undocumented = sorted({path for doc in docs for path, key in keys_of(doc) if key not in words})
    assert undocumented == [], "results keys docs/spec.md does not name"


def test_the_check_fails_on_an_undocumented_key(sim_run):
    doc = {**sim_run.results, "summary": {**sim_run.results["summary"], "hidden_figure": 1}}
    assert [p for p, k in keys_of(doc) if k not in documented_words()] == ["summary.hidden_figure"]


def test_ev_states_have_one_set_of_names(sim_run):
    """The transport's states name the EVs in results.json, in the plot's legend, in the README and in the docs;
    the plot's marks say EVs, not paths (summary.paths counts paths: 18 paths were 144 EVs)."""
    results = sim_run.results
    assert {c[k] for c in results["ev_changes"] for k in ("old", "new")} <= STATES
    figure = plots.ev_states(load_report_run(sim_run.dir))
    labels = [t.get_text() for ax in figure.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    named = {w for label in labels for w in re.findall(r"\b[A-Z][A-Z_]{2,}\b", label)}
    assert named and named <= STATES, labels
    assert not any("retired" in label for label in labels), labels
    for doc in (REPO / "README.md", REPO / "docs" / "spec.md"):
        text = doc.read_text()
        assert all(state in text for state in STATES), f"{doc.name} does not name every EV state"
    for doc in [REPO / "README.md", *Path(REPO / "docs").glob("*.md")]:
        shouting = set(re.findall(r"\b(?:GOOD|BAD|UNKNOWN|SKIP|RETIRED|ASSUMED_BAD|DENIED|DEAD|ALIVE)\b",
                                  doc.read_text()))
        assert shouting <= STATES, f"{doc.name}: {shouting - STATES} is no EV state"


def test_the_shipped_lab_run_is_a_lab_run():
    run = api.load(LAB_RUN)
    assert run.results["engine"] == "lab" and run.results["datapath"] in ("linux", "ovs")
    assert json.loads((LAB_RUN / "results.json").read_text())["summary"]["messages"]["failed"] == 0
