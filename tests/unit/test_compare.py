"""`mrclab compare DIR...`: both runs side by side, the right worst values, one JSON document, exit 2 on bad input."""
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from mrclab.report import compare, summary
from tests.conftest import REPO
from tests.report_fixture import AVOID_S, FAILED_LINK, make_run


def mrclab(*args, cwd=REPO):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture
def two_runs(tmp_path):
    make_run(tmp_path / "mrc", kind="mrc")
    make_run(tmp_path / "ecmp", kind="ecmp")
    return tmp_path / "mrc", tmp_path / "ecmp"


def test_headlines_pick_worst_avoid_or_stall(two_runs):
    runs = compare.load_all([str(d) for d in two_runs])
    mrc, ecmp = compare.headlines(runs)
    assert mrc["worst_disruption"] == {"kind": "avoid_s", "s": AVOID_S, "what": f"link_down {FAILED_LINK} @3.00s"}
    longest = max(runs[1].results["steps"], key=lambda s: s["duration_s"])
    assert ecmp["worst_disruption"] == {"kind": "stall", "s": longest["duration_s"],
                                        "what": f"step {longest['index']} @{longest['start_s']:.2f}s"}
    assert ecmp["flow_mods_after_boot"] == 32 and mrc["flow_mods_after_boot"] == 0
    worst = {row.label: summary.worst_index(row, [mrc, ecmp]) for row in summary.ROWS}
    assert worst["step time p100"] == 1 and worst["worst avoid_s / stall"] == 1
    assert worst["flow-mods after boot"] == 1 and worst["goodput"] == 1
    assert worst["failed messages"] is None and worst["steps"] is None


def test_compare_plot_holds_every_run(two_runs, tmp_path):
    runs = compare.load_all([str(d) for d in two_runs])
    fig = compare.figure(runs)
    steps_ax, p100_ax, goodput_ax = fig.axes
    lines = {line.get_label(): line for line in steps_ax.get_lines()}
    for run in runs:
        line = lines[run.label]
        assert list(line.get_xdata()) == [s["start_s"] for s in run.results["steps"]]
    assert [bar.get_height() for bar in p100_ax.patches] == pytest.approx(
        [r.results["summary"]["step_time_s"]["p100"] * 1e3 for r in runs])
    assert [bar.get_height() for bar in goodput_ax.patches] == pytest.approx(
        [r.results["summary"]["goodput_bps"] / 1e6 for r in runs])


def test_cli_compare_json_is_one_document(two_runs, tmp_path):
    plot = tmp_path / "cmp.png"
    result = mrclab("compare", *map(str, two_runs), "--out", str(plot), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["label"] for r in doc["runs"]] == ["link-failure · mrc · static-srv6",
                                                 "link-failure · tcp · ecmp-reconverge"]
    assert doc["plot"] == str(plot)
    assert [r["worst_disruption"]["kind"] for r in doc["runs"]] == ["avoid_s", "stall"]
    with Image.open(plot) as image:
        assert image.format == "PNG" and image.size[0] >= 800 and image.size[1] >= 600


def test_cli_compare_table_lists_both_runs(two_runs, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = mrclab("compare", *map(str, two_runs), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    for text in ("static-srv6", "ecmp-reconverge",
                 f"avoid_s {AVOID_S * 1e3:g} ms (link_down", f"{FAILED_LINK} @3.00s)", "stall 2.3 s",
                 "step time p100", "flow-mods after boot"):
        assert text in result.stdout, result.stdout
    # the plot goes next to the runs, not into the folder the command ran in
    assert (tmp_path / "compare.png").is_file() and not (elsewhere / "compare.png").exists()
    assert f"plot: {tmp_path / 'compare.png'}" in result.stdout


def test_compare_warns_when_runs_are_not_like_for_like(tmp_path):
    make_run(tmp_path / "a", name="link-failure")
    make_run(tmp_path / "b", name="switch-failure", fidelity_ok=False)
    runs = compare.load_all([str(tmp_path / "a"), str(tmp_path / "b")])
    assert compare.warnings(runs) == [
        "the runs are of different scenarios (link-failure, switch-failure): not like for like",
        "switch-failure · mrc · static-srv6: fidelity NOT OK, the host machine limited that run (see its report)"]
    result = mrclab("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert "warning: the runs are of different scenarios" in result.stderr
    make_run(tmp_path / "c", name="link-failure", seed=2)
    assert compare.warnings(compare.load_all([str(tmp_path / "a"), str(tmp_path / "c")])) == []


def test_compare_plot_uses_labels_and_a_log_axis_for_10x(two_runs):
    """MRC's worst step is 90 ms, ECMP's stall 2.3 s: more than 10x apart, so the step axes are logarithmic."""
    fig = compare.figure(compare.load_all([str(d) for d in two_runs]))
    steps_ax, p100_ax, goodput_ax = fig.axes
    assert steps_ax.get_yscale() == "log" and p100_ax.get_yscale() == "log" and goodput_ax.get_yscale() == "linear"
    assert [t.get_text() for t in p100_ax.get_xticklabels()] == ["link-failure\nmrc\nstatic-srv6",
                                                                 "link-failure\ntcp\necmp-reconverge"]
    legend = steps_ax.get_legend()
    assert legend.get_bbox_to_anchor().y0 < steps_ax.get_window_extent().y0  # below the data, not on it


def test_same_scenario_twice_gets_told_apart(tmp_path):
    make_run(tmp_path / "seed1", seed=1)
    make_run(tmp_path / "seed2", seed=2)
    make_run(tmp_path / "aborted", aborted=True)
    runs = compare.load_all([str(tmp_path / d) for d in ("seed1", "seed2", "aborted")])
    assert [r.label for r in runs] == [f"link-failure · mrc · static-srv6 [{d}]" for d in ("seed1", "seed2", "aborted")]
    assert compare.headlines(runs)[2]["worst_disruption"]["kind"] == "stall"
    compare.figure(runs)   # an aborted run (no events, three steps) plots too


@pytest.mark.parametrize("setup,fragment", [
    (lambda d: None, "no such run directory"),
    (lambda d: d.mkdir(), "no results.json"),
    (lambda d: (d.mkdir(), (d / "results.json").write_text('{"schema": "mrclab.results/v0"}')), "has schema"),
])
def test_cli_compare_bad_dir_exits_2(two_runs, tmp_path, setup, fragment):
    bad = tmp_path / "bad"
    setup(bad)
    result = mrclab("compare", str(two_runs[0]), str(bad), "--json", "--out", str(tmp_path / "c.png"))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and fragment in lines[0], result.stderr


def test_cli_compare_needs_a_dir_and_a_writable_plot_path(two_runs, tmp_path):
    assert mrclab("compare").returncode == 2
    result = mrclab("compare", str(two_runs[0]), "--out", str(tmp_path / "nowhere" / "c.png"))
    assert result.returncode == 2 and "nowhere" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cli_compare_of_runs_in_several_folders_needs_out(two_runs, tmp_path):
    moved = tmp_path / "elsewhere" / "ecmp"
    moved.parent.mkdir()
    two_runs[1].rename(moved)
    result = mrclab("compare", str(two_runs[0]), str(moved), cwd=tmp_path)
    assert result.returncode == 2 and "--out" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("compare.png"))
    result = mrclab("compare", str(two_runs[0]), str(moved), "--out", str(tmp_path / "both.png"), cwd=tmp_path)
    assert result.returncode == 0 and (tmp_path / "both.png").is_file()


def test_repeated_runs_get_a_median_and_interval_and_overlaps_are_named(tmp_path):
    for seed in (1, 2, 3):
        make_run(tmp_path / f"mrc{seed}", seed=seed)
        make_run(tmp_path / f"tcp{seed}", kind="ecmp", seed=seed)
    runs = compare.load_all([str(tmp_path / d) for d in ("mrc1", "mrc2", "mrc3", "tcp1", "tcp2", "tcp3")])
    rows = compare.repetitions(runs)
    assert [r["n"] for r in rows] == [3, 3]
    median, low, high = rows[0]["goodput fraction"]
    assert low <= median <= high
    lines = compare.repetition_lines(rows)
    assert lines[0].startswith("link-failure · mrc · static-srv6: 3 runs, median [95% interval] goodput fraction")
    single = compare.repetitions(runs[:1] + runs[3:4])
    assert single == []  # one run of each: nothing to give an interval of


@pytest.mark.parametrize("columns", ["80", "200"])
def test_compare_fits_80_columns_without_trailing_spaces(tmp_path, columns):
    """Its table, the repetitions' lines and the plot's line fit 80 columns however wide the terminal says it is
    (the last line read 144 characters)."""
    for seed in (1, 2, 3):
        make_run(tmp_path / f"mrc{seed}", seed=seed)
        make_run(tmp_path / f"ecmp{seed}", kind="ecmp", seed=seed)
    result = subprocess.run([sys.executable, "-m", "mrclab", "compare", *(str(p) for p in sorted(tmp_path.iterdir()))],
                            capture_output=True, text=True, cwd=REPO, env={**os.environ, "COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines() + result.stderr.splitlines():
        assert len(line) <= 80 and line == line.rstrip(), repr(line)
    assert "median [95% interval]" in result.stdout and "plot: " in result.stdout
