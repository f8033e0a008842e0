"""The paper suite's table: every claim of PAPER.md has a row, its scenarios load, and judging reads results."""
import json

import pytest

from mrclab import paper
from mrclab.errors import UsageError
from mrclab.spec.scenario import load


def test_every_experiment_of_the_paper_has_a_row_and_every_run_loads():
    assert [c.id for c in paper.CLAIMS] == ["9a", "9b", "9c", "9d", "10", "11", "12-13", "14", "16", "16-loss", "17",
                                          "16-sim", "16-loss-sim", "16-loss-sim-8p", "17-sim",
                                          "18"]
    for claim in paper.CLAIMS:
        assert claim.differs and claim.paper
        assert (claim.judge is None) == (not claim.runs), claim.id  # a row without runs says why
        for _, path, sets in claim.runs:
            load(path, list(sets))


def test_only_and_quick_select_claims():
    assert [c.id for c in paper.select("16,9a", False)] == ["9a", "16"]
    assert {c.id for c in paper.select(None, True)} == {"9a", "14", "18"}
    with pytest.raises(UsageError, match="--only '99': no such claim"):
        paper.select("99", False)


def stream_doc(totals, events, ideal=100.0, failed=0, ok=True):
    return {"timeseries": {"bin_s": 0.5, "total": totals}, "workloads": [{"ideal_bps": ideal, "duration_s": 4.0}],
            "events": events, "summary": {"messages": {"failed": failed}}, "fidelity": {"ok": ok}}


def test_a_stream_that_steps_down_by_a_planes_share_and_back_agrees(tmp_path):
    claim = next(c for c in paper.CLAIMS if c.id == "9a")
    events = [{"action": "link_down", "t_s": 1.5}, {"action": "link_up", "t_s": 2.5}]
    (tmp_path / "9a-mrc").mkdir()
    doc = stream_doc([90, 90, 90, 70, 68, 69, 90, 90], events)
    (tmp_path / "9a-mrc" / "results.json").write_text(json.dumps(doc))
    row = paper.judge(claim, tmp_path)
    assert row["verdict"] == "agree" and "during 68% (expected 68%)" in row["lab"]
    doc = stream_doc([90, 90, 90, 10, 10, 10, 90, 90], events)  # lost everything: the paper says otherwise
    (tmp_path / "9a-mrc" / "results.json").write_text(json.dumps(doc))
    assert paper.judge(claim, tmp_path)["verdict"] == "disagree"


def test_a_claim_without_results_is_not_measured_and_the_table_says_so(tmp_path):
    rows = [paper.judge(c, tmp_path) for c in paper.CLAIMS if c.id in ("9a", "17")]
    assert [r["verdict"] for r in rows] == ["not measured", "not measured"]
    text = paper.markdown(rows, "mrclab paper", "2026-11-25")
    assert "| 9a |" in text and "**not measured**" in text and "run 9a-mrc left no results" in text


def write_shares(root, claim_id, shares, failed=0, ideal_s=1.0):
    for label, share in shares.items():
        (root / f"{claim_id}-{label}").mkdir(exist_ok=True)
        ideal = ideal_s * (0.01 if "16KiB" in label else 1)  # the small size is below the lab's step floor
        doc = {"summary": {"goodput_fraction": share, "messages": {"failed": failed}, "ideal_time_s": 3 * ideal},
               "steps": [{}, {}, {}], "fidelity": {"ok": True}}
        (root / f"{claim_id}-{label}" / "results.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("mrc_at_1, roce_at_1, verdict", [(0.3, 0.05, "agree"), (0.85, 0.05, "disagree"),
                                                          (0.3, 0.25, "disagree")])
def test_loss_rows_hold_mrc_to_a_third_at_one_percent_and_roce_far_below(tmp_path, mrc_at_1, roce_at_1, verdict):
    claim = next(c for c in paper.CLAIMS if c.id == "16-loss")
    assert {label for label, _, _ in claim.runs} == {"mrc-0", "mrc-0.1", "mrc-1", "roce-0.1", "roce-1"}
    write_shares(tmp_path, "16-loss", {"mrc-0": 0.9, "mrc-0.1": 0.85, "mrc-1": mrc_at_1, "roce-0.1": 0.4,
                                       "roce-1": roce_at_1})
    row = paper.judge(claim, tmp_path)
    assert row["verdict"] == verdict and "MRC 90% / 85% / " in row["lab"]


@pytest.mark.parametrize("mrc_at_1, verdict", [(0.46, "agree"), (0.55, "disagree"), (0.2, "disagree")])
def test_the_eight_plane_loss_row_judges_mrc_alone_against_a_third_of_ideal(tmp_path, mrc_at_1, verdict):
    claim = next(c for c in paper.CLAIMS if c.id == "16-loss-sim-8p")
    assert {label for label, _, _ in claim.runs} == {"mrc-0", "mrc-0.1", "mrc-1"}
    write_shares(tmp_path, "16-loss-sim-8p", {"mrc-0": 0.92, "mrc-0.1": 0.9, "mrc-1": mrc_at_1})
    row = paper.judge(claim, tmp_path)
    assert row["verdict"] == verdict and "roce" not in row["lab"], row["lab"]


def test_all_to_all_row_wants_mrc_ahead_at_every_size(tmp_path):
    claim = next(c for c in paper.CLAIMS if c.id == "17")
    shares = {"mrc-16KiB": 0.1, "roce-16KiB": 0.15, "mrc-1MiB": 0.6, "roce-1MiB": 0.3, "mrc-16MiB": 0.9,
              "roce-16MiB": 0.4, "roce16-16MiB": 0.5}
    write_shares(tmp_path, "17", shares)
    row = paper.judge(claim, tmp_path)
    assert row["verdict"] == "agree" and "16KiB: MRC 10%, roce 1 QP 15% (ideal step 10 ms" in row["lab"]
    write_shares(tmp_path, "17", {**shares, "roce-1MiB": 0.7})
    assert paper.judge(claim, tmp_path)["verdict"] == "disagree"


def test_repetitions_run_with_their_own_seeds_and_the_majority_decides(tmp_path):
    claim = next(c for c in paper.CLAIMS if c.id == "17")
    names = [name for name, _, sets in paper.runs(claim, 3)]
    assert names[:2] == ["17-mrc-16KiB", "17-roce-16KiB"] and "17-mrc-16KiB-r3" in names and len(names) == 21
    assert [sets[-1] for name, _, sets in paper.runs(claim, 2) if name == "17-mrc-16KiB-r2"] == ["seed=102"]
    shares = {"mrc-16KiB": 0.1, "roce-16KiB": 0.05, "mrc-1MiB": 0.6, "roce-1MiB": 0.3, "mrc-16MiB": 0.9,
              "roce-16MiB": 0.4, "roce16-16MiB": 0.5}
    write_shares(tmp_path, "17", shares)
    for k, roce in ((2, 0.05), (3, 0.7)):  # the third repetition has roce ahead at 1 MiB
        write_shares(tmp_path, "17", {f"{label}-r{k}": s for label, s in {**shares, "roce-1MiB": roce}.items()})
    row = paper.judge(claim, tmp_path, 3)
    assert row["verdict"] == "agree" and "agrees in 2 of 3 repetitions" in row["lab"] and len(row["runs"]) == 21
    mrc = row["shares"]["mrc-1MiB"]
    assert mrc[0] == 0.6 and mrc[3] == 3 and mrc[1] <= 0.6 <= mrc[2]  # median and interval over 3 repetitions
    roce = row["shares"]["roce-1MiB"]
    assert roce[0] == 0.3 and roce[1] == 0.05 and roce[2] == 0.7  # the spread of its three seeds
    text = paper.markdown([row], "mrclab paper --only 17 --repeat 3", "2026-11-25")
    assert "roce-1MiB 30% [5%, 70%]" in text


def test_paper_html_has_the_table_and_a_plot_per_claim_with_runs(tmp_path):
    from mrclab.report import paper_page
    claim = next(c for c in paper.CLAIMS if c.id == "17")
    write_shares(tmp_path, "17", {"mrc-16KiB": 0.1, "roce-16KiB": 0.05, "mrc-1MiB": 0.6, "roce-1MiB": 0.3,
                                  "mrc-16MiB": 0.9, "roce-16MiB": 0.4, "roce16-16MiB": 0.5})
    rows = [paper.judge(claim, tmp_path), paper.judge(next(c for c in paper.CLAIMS if c.id == "9a"), tmp_path)]
    page = paper_page.write(tmp_path, rows, "mrclab paper", "2026-11-25").read_text()
    assert page.count("<tr>") == 3 and page.count("data:image/png;base64,") == 1  # 9a left no runs: no plot
    assert '<span class="ok">agree</span>' in page and "not measured" in page


@pytest.mark.parametrize("many, verdict", [(0.86, "agree"), (0.21, "disagree")])
def test_qp_scaling_wants_sixteen_qps_to_help_by_a_fifth(tmp_path, many, verdict):
    claim = next(c for c in paper.CLAIMS if c.id == "16-sim")
    write_shares(tmp_path, "16-sim", {"mrc": 0.95, "single-path": 0.5, "roce-1": 0.19, "roce-16": many})
    assert paper.judge(claim, tmp_path)["verdict"] == verdict


def test_a_long_timeline_is_counted_in_the_progress_line():
    claim = next(c for c in paper.CLAIMS if c.id == "16-loss-sim-8p")
    sets = dict((label, sets) for label, _, sets in claim.runs)["mrc-1"]
    text = paper.sets_text(sets)
    assert "events=[512 events]" in text and "transport=mrc" in text and "h63" not in text
