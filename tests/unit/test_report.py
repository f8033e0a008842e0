"""`mrclab report DIR`: the PNGs and report.html hold the pictures and facts of the run they describe."""
import base64
import csv
import json
import re
import subprocess
import sys
from html import escape

import pytest
from PIL import Image

from mrclab.metrics import expectations
from mrclab.report import PLOTS, plots, write_report
from mrclab.report.run import load
from tests.conftest import REPO
from tests.report_fixture import AVOID_S, BASE_STEP_S, CLEAR_AT, FAILED_LINK, FAULT_AT, RECOVERY, STEPS, make_run


def mrclab(*args):
    return subprocess.run([sys.executable, "-m", "mrclab", *args], capture_output=True, text=True, cwd=REPO)


@pytest.fixture
def mrc_dir(tmp_path):
    make_run(tmp_path / "mrc")
    return tmp_path / "mrc"


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def assert_png(path, min_size=(500, 300)):
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1], image.size


def test_report_writes_every_plot_and_embeds_exactly_those(mrc_dir):
    written = write_report(mrc_dir)
    assert written.missing == {}
    drawn = sorted(spec.file for spec in PLOTS  # no stream and no trace in the run
                   if spec.file not in ("report-throughput.png", "report-trace-timeline.png"))
    assert sorted(p.name for p in written.pngs) == drawn
    for png in written.pngs:
        assert_png(png)
    page = written.html.read_text()
    assert sorted(embedded_pngs(page)) == sorted(p.read_bytes() for p in written.pngs)
    for png in written.pngs:
        assert f'href="{png.name}"' in page


def test_report_html_names_the_run_its_events_and_expectations(mrc_dir):
    doc = json.loads((mrc_dir / "results.json").read_text())
    page = write_report(mrc_dir).html.read_text()
    assert "<title>mrclab report: link-failure</title>" in page
    assert "mrc over static-srv6 on clos-4p-4l-4s" in page
    for event in doc["events"]:
        assert f"<td>{event['action']}</td><td>{event['target']}</td>" in page
    assert f"{AVOID_S * 1e3:.1f} ms" in page
    for check in doc["expectations"]:
        verdict = '<span class="ok">ok</span>' if check["ok"] else '<span class="failed">FAILED</span>'
        assert f"<td>{check['name']}</td><td>{escape(expectations.bound_text(check))}</td>" \
               f"<td>{escape(expectations.value_text(check['name'], check['actual']))}</td><td>{verdict}" in page
    assert "<td>min_goodput_fraction</td><td>≥ 50% of ideal</td>" in page
    assert "<td>topology.links.fabric_rate</td><td>100Mbit</td>" in page
    assert "Fidelity ok" in page and "banner bad" not in page
    assert "<td>ECN: packets marked / CE received / EV turns skipped</td><td>12 / 11 / 9</td>" in page
    for change in doc["nic_changes"]:
        assert f"<td>{change['t_s']:.3f}</td><td>h2</td><td>3</td><td>{change['state']}</td>" in page


def test_step_time_plot_is_steps_csv(mrc_dir):
    run = load(mrc_dir)
    with open(mrc_dir / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    ax = plots.step_time(run).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    step = lines["step time"]
    assert list(step.get_xdata()) == [float(r["start_s"]) for r in rows]
    assert list(step.get_ydata()) == pytest.approx([float(r["duration_s"]) * 1e3 for r in rows])
    st = run.results["summary"]["step_time_s"]
    assert lines[f"p50 {st['p50'] * 1e3:.1f} ms"].get_ydata()[0] == pytest.approx(st["p50"] * 1e3)
    assert lines[f"p100 {st['p100'] * 1e3:.1f} ms"].get_ydata()[0] == pytest.approx(max(step.get_ydata()))
    labels = [t.get_text().strip() for t in ax.texts]
    assert labels == [f"link_down {FAILED_LINK} (avoid 4.0 ms)", f"link_up {FAILED_LINK}"]
    assert ax.get_ylim()[1] > max(step.get_ydata())


def test_utilisation_grid_is_the_link_counters(mrc_dir):
    run = load(mrc_dir)
    wall = run.results["summary"]["workload_time_s"]
    links = {(link["from"], link["to"]): link for link in run.results["links"]}
    grids = plots.utilisation_grids(run)
    assert len(grids) == 4 * 2
    up = links[("p0l1", "p0s2")]
    assert grids[(0, "up")]["util"][1, 2] == pytest.approx(up["tx_bytes"] * 8 / (100e6 * wall))
    down = links[("p3s0", "p3l2")]
    assert grids[(3, "down")]["util"][2, 0] == pytest.approx(down["tx_bytes"] * 8 / (100e6 * wall))
    assert grids[(1, "up")]["trims"][0, 3] == 41 and grids[(0, "down")]["drops"][1, 2] == 7
    assert grids[(1, "up")]["loss"][0, 3] == 5 and grids[(1, "down")]["loss"][0, 3] == 0
    texts = [t.get_text() for ax in plots.link_utilisation(run).axes for t in ax.texts]
    assert any("T41" in t and "L5" in t for t in texts) and sum("D7" in t for t in texts) == 2
    assert grids[(1, "down")]["ecn"][0, 3] == 12 and sum("E12" in t for t in texts) == 1


def test_many_planes_wrap_into_more_rows(mrc_dir):
    run = load(mrc_dir)
    run.results["topology"]["planes"] = 10     # planes 4-9 have no counters
    axes = plots.link_utilisation(run).axes[:-1]   # the last one is the colour bar
    shown = [ax.get_title() for ax in axes if ax.axison]
    assert len(axes) == 4 * 8 and len(shown) == 20
    assert shown[0].startswith("p0 up") and "p9 down (spine→leaf)\nno counters" in shown


def test_ev_states_plot_counts_and_transitions(mrc_dir):
    run = load(mrc_dir)
    top, low = plots.ev_states(run).axes[:2]
    series = run.results["series"]
    bad = next(line for line in low.get_lines() if line.get_label() == "ASSUMED_BAD")
    assert max(bad.get_ydata()) == max(r["ev_states"]["ASSUMED_BAD"] for r in series) == 6
    legend = [t.get_text() for t in low.get_legend().get_texts()]
    assert "EVs to ASSUMED_BAD (6)" in legend and "EVs back to GOOD (6)" in legend
    assert [t.get_text() for t in top.get_legend().get_texts()][:2] == ["GOOD", "ASSUMED_BAD"]


def test_completion_cdf_and_recovery_rates(mrc_dir):
    run = load(mrc_dir)
    with open(mrc_dir / "messages.csv") as f:
        expected = sorted((float(r["delivered_s"]) - float(r["posted_s"])) * 1e3 for r in csv.DictReader(f))
    cdf = plots.completion_cdf(run).axes[0].get_lines()[0]
    assert list(cdf.get_xdata()) == pytest.approx(expected)
    assert cdf.get_ydata()[-1] == 1.0
    series = run.results["series"]
    t, rate = plots.interval_rates(series, "trimmed")
    assert t == [r["t_s"] for r in series[1:]]
    assert rate[0] == pytest.approx((series[1]["trimmed"] - series[0]["trimmed"]) / 0.25)
    ax = plots.recovery_counters(run).axes[0]
    assert [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")] == [
        f"{k} ({sum(n for _, n in RECOVERY[k])} total)" for k in ("trimmed", "retransmitted", "timeouts")]


def _at(line, t: float) -> float:
    """The value a steps-post line shows at time t."""
    xs, ys = list(line.get_xdata()), list(line.get_ydata())
    return ys[max(i for i, x in enumerate(xs) if x <= t)]


def test_time_plots_follow_the_exact_event_times(mrc_dir):
    """Known transitions (fixture): EVs retired 1-3 ms after the fault at 3 s and revived 100-120 ms after the
    repair at 6 s; retransmissions only from 2 ms after the fault. The 0.25 s samples say otherwise (the
    series drops to 0 bad EVs at 6 s): the plots must follow the events, not the samples."""
    run = load(mrc_dir)
    low = plots.ev_states(run).axes[1]
    bad = next(line for line in low.get_lines() if line.get_label() == "ASSUMED_BAD")
    assert _at(bad, FAULT_AT) == 0 and _at(bad, FAULT_AT + 0.0015) == 2 and _at(bad, FAULT_AT + 0.004) == 6
    assert _at(bad, CLEAR_AT + 0.05) == 6 and _at(bad, CLEAR_AT + 0.105) == 4 and _at(bad, CLEAR_AT + 0.2) == 0
    top = plots.ev_states(run).axes[0]
    assert top.get_xlim()[0] == 0  # GOOD from the first transitions, never UNKNOWN for a whole sample
    ax = plots.recovery_counters(run).axes[0]
    retx = next(line for line in ax.get_lines() if line.get_label().startswith("retransmitted"))
    width = plots.recovery_bin_s(run)
    assert width <= run.results["summary"]["step_time_s"]["p50"] / 4
    assert max(y for x, y in zip(retx.get_xdata(), retx.get_ydata(), strict=True) if x + width <= FAULT_AT) == 0
    assert _at(retx, FAULT_AT + 0.002) == pytest.approx(12 / width)


def test_aborted_run_reports_what_it_has_and_flags_fidelity(tmp_path):
    make_run(tmp_path / "aborted", aborted=True, fidelity_ok=False)
    written = write_report(tmp_path / "aborted")
    assert set(written.missing) == {"EV states over time", "Trims, retransmissions and timeouts over time"}
    page = written.html.read_text()
    assert len(embedded_pngs(page)) == len(written.pngs) == 3
    assert page.count("Not drawn:") == 2
    assert '<div class="banner bad">Fidelity NOT OK' in page
    assert "3 of 4 expectations FAILED: duration_limit, failed_messages, min_goodput_fraction" in page
    assert "No fault fired during this run." in page


def test_bare_results_json_still_gives_a_page(tmp_path):
    """Only results.json, and that nearly empty: no plot, no crash, the page says what is missing."""
    (tmp_path / "results.json").write_text(json.dumps({"schema": "mrclab.results/v1", "scenario": {"name": "x"}}))
    written = write_report(tmp_path)
    assert written.pngs == [] and len(written.missing) == len(PLOTS) - 2  # all but the streams' and traces'
    page = written.html.read_text()
    assert "scenario.yaml is missing" in page and embedded_pngs(page) == []


def test_every_kind_of_event_is_shown(mrc_dir):
    """A flap (many toggles), a loss and a rate change next to the link failure: all in the page and the plot."""
    doc = json.loads((mrc_dir / "results.json").read_text())
    flap = [{"t_s": round(1.0 + 0.1 * i, 3), "action": "link_down" if i % 2 == 0 else "link_up",
             "target": "p1l1-p1s0", "event_index": 2} for i in range(20)]
    doc["events"] += flap + [{"t_s": 4.0, "action": "loss", "target": "p1l0-p1s1", "event_index": 3, "rate": 0.01},
                             {"t_s": 5.0, "action": "rate", "target": "p2l0-p2s0", "event_index": 4, "rate": 2e7}]
    (mrc_dir / "results.json").write_text(json.dumps(doc))
    page = write_report(mrc_dir).html.read_text()
    for target in ("p0l1-p0s2", "p1l1-p1s0", "p1l0-p1s1", "p2l0-p2s0"):
        assert f"<td>{target}</td>" in page
    assert "<td>1%</td>" in page and "<td>20Mbit</td>" in page
    labels = [t.get_text().strip() for t in plots.step_time(load(mrc_dir)).axes[0].texts]
    assert labels == ["p1l1-p1s0: 20 events 1.0-2.9 s", "link_down p0l1-p0s2 (avoid 4.0 ms)",
                      "loss p1l0-p1s1 1%", "rate p2l0-p2s0 20Mbit", "link_up p0l1-p0s2"]


def test_flap_is_one_labelled_burst():
    flap = [{"t_s": 2 + 0.1 * i, "action": "link_down" if i % 2 == 0 else "link_up", "target": "p1l1-p1s0"}
            for i in range(60)]
    fault = [{"t_s": 3.0, "action": "link_down", "target": "p0l1-p0s2"},
             {"t_s": 6.0, "action": "link_up", "target": "p0l1-p0s2"}]
    groups = plots.bursts(flap + fault, 0.5)
    assert [len(g) for g in groups] == [60, 1, 1]
    assert len(plots.down_intervals(flap + fault, 10.0)) == 30 + 1


def test_cli_report(mrc_dir):
    result = mrclab("report", str(mrc_dir))
    assert result.returncode == 0, result.stderr
    assert f"report: {mrc_dir / 'report.html'}" in result.stdout and "5 plots" in result.stdout
    assert_png(mrc_dir / "report-step-time.png")


@pytest.mark.parametrize("setup,fragment", [
    (lambda d: None, "no such run directory"),
    (lambda d: d.mkdir(), "no results.json"),
    (lambda d: (d.mkdir(), (d / "results.json").write_text("{not json")), "not readable JSON"),
    (lambda d: (d.mkdir(), (d / "results.json").write_text('{"schema": "other/v9"}')), "has schema 'other/v9'"),
])
def test_cli_report_bad_input_exits_2(tmp_path, setup, fragment):
    target = tmp_path / "run"
    setup(target)
    result = mrclab("report", str(target))
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0] and fragment in lines[0], result.stderr


def test_report_says_what_ran_and_how_it_ended(tmp_path):
    """Overrides change what ran, so the scenario's prose is not shown as its description; a failed run and a
    killed one say so instead of looking like a normal run (or not a run at all)."""
    doc = make_run(tmp_path / "over", kind="ecmp")
    doc["overrides"] = {"routing": "ecmp-reconverge", "transport": "tcp"}
    (tmp_path / "over" / "results.json").write_text(json.dumps(doc))
    page = write_report(tmp_path / "over").html.read_text()
    assert "tcp over ecmp-reconverge on clos-4p-4l-4s; 2 fault events." in page
    assert "--set routing=ecmp-reconverge transport=tcp" in page and "<b>The scenario:</b>" not in page
    page = write_report(tmp_path / "over").html.read_text()
    doc.update(status="failed", error="AgentError: agent h3 exited (code 1); see its log")
    (tmp_path / "over" / "results.json").write_text(json.dumps(doc))
    page = write_report(tmp_path / "over").html.read_text()
    assert "This run did not complete (failed: AgentError: agent h3 exited (code 1); see its log)" in page
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "runner.log").write_text("... mrclab.runner INFO run abc: scenario x\n")
    result = mrclab("report", str(killed))
    assert result.returncode == 2 and "the run stopped before it wrote results.json" in result.stderr


def test_titles_fit_their_figures(tmp_path):
    """The longest labels (scenario · single-path · ecmp-reconverge) leave no title cut at the figure's edge."""
    make_run(tmp_path / "long", name="link-failure-of-a-leaf-spine-link-under-load-at-step-ten")
    doc = json.loads((tmp_path / "long" / "results.json").read_text())
    doc.update(transport="single-path", routing="ecmp-reconverge")
    doc["topology"]["planes"] = 2  # the narrowest utilisation figure
    (tmp_path / "long" / "results.json").write_text(json.dumps(doc))
    run = load(tmp_path / "long")
    for build in (plots.step_time, plots.link_utilisation, plots.ev_states, plots.recovery_counters):
        fig = build(run)
        fig.canvas.draw()
        titles = [ax.title for ax in fig.axes if ax.get_title()] + ([fig._suptitle] if fig._suptitle else [])
        for title in titles:
            box = title.get_window_extent()
            assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (build.__name__, title.get_text())


def test_fixture_reads_back_like_a_run(tmp_path):
    """The fabricated directory is a valid v1 run: it loads, and its parts agree with each other."""
    doc = make_run(tmp_path / "run")
    run = load(tmp_path / "run")
    assert run.results == doc
    assert run.link_rate_bps("fabric_rate") == 100e6
    assert len(run.messages) == STEPS * 8 and all(m.completion_s > 0 for m in run.messages)
    slowest = max(doc["steps"], key=lambda s: s["duration_s"])
    assert FAULT_AT - BASE_STEP_S * 1.1 < slowest["start_s"] <= FAULT_AT + 0.002   # the step the fault hit
    assert doc["summary"]["packets"]["trimmed"] > 0
    assert all(c["ok"] for c in doc["expectations"])   # MRC rides out the failure
    ecmp = make_run(tmp_path / "ecmp", kind="ecmp")
    assert {c["name"] for c in ecmp["expectations"] if not c["ok"]} == {"max_step_time_ratio"}


def test_a_trace_run_gets_its_timeline_per_rank(tmp_path):
    """trace-moe on the simulator: the report draws one row per rank with the fault marked."""
    from mrclab import runner
    from mrclab.report import gantt
    from mrclab.report.run import load as load_run
    from mrclab.spec import scenario as scenario_mod

    out = tmp_path / "moe"
    runner.run_scenario(scenario_mod.load("trace-moe", ["engine=sim", "workload.iterations=2"]), out)
    written = write_report(out)
    assert "report-trace-timeline.png" in [p.name for p in written.pngs]
    assert_png(out / "report-trace-timeline.png")
    fig = gantt.gantt(load_run(out))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r0 h0", "r1 h1", "r2 h2", "r3 h3"]
    assert any("switch_down p0s1" in t.get_text() for t in ax.texts)
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"compute", "all-to-all", "all-reduce"}
