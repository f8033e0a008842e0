"""The runner's live view: one line whose fields stay put while it refreshes."""
import io
import time

from rich.console import Console

from mrclab import progress
from mrclab.spec import scenario as scenario_mod


def test_live_view_is_one_line_with_stable_columns():
    """The live view keeps every field where it was as the numbers grow, on one line with no title."""
    spec = scenario_mod.load("smoke")
    start = progress.start_record(spec, "abc")
    lines = []
    for step, last, delivered, failed in ((0, None, 0, 0), (22, 1.234, 5 * 2**30, 12)):
        p = progress.Progress(steps_total=24, step=step, step_started=time.monotonic(), last_step_s=last,
                              delivered_bytes=delivered, failed=failed)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(progress.view(start, p.record()))
        lines.append(console.export_text().rstrip("\n"))
    assert all("\n" not in line for line in lines)
    for word in ("this", "last", "delivered", "failed", "faults:"):
        assert lines[0].index(word) == lines[1].index(word), word


def test_a_simulated_run_shows_simulated_and_wall_time():
    p = progress.Progress(steps_total=4, step=1, step_started=0.0012, clock=lambda: 0.0015, simulated=True)
    record = p.record()
    assert record["simulated_s"] == 0.0015 and record["this_step_s"] == 0.0003 and record["wall_s"] >= 0
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(progress.view(progress.start_record(scenario_mod.load("smoke"), "abc"), record))
    assert "simulated 0.0015 s in 0 s" in console.export_text()
