"""The paper suite: MRC's published testbed experiments (../shared/PAPER.md, the paper's §5.2) at the lab's
scale, one row per claim in `CLAIMS`, each judged from the results of real runs.

A claim names its runs (a scenario and its --set values), the paper's outcome, the lab's figure read off
the runs' results.json, a verdict (agree / disagree), and what differs from the paper's setup. `mrclab
paper` runs them one after another into results/paper-<UTC>/ (a folder per run) and writes paper.md there;
an experiment the lab cannot hold has a row that says why, and no runs.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .shipped import folder
from .sweeps import interval

SCENARIOS = folder("scenarios")
PAPER = SCENARIOS / "paper"
Docs = dict[str, dict]  # run label -> its results.json
Verdict = tuple[str, bool | None]  # (the lab's figure in words, agrees: None when it cannot say)


@dataclass(frozen=True)
class Claim:
    id: str
    experiment: str
    paper: str  # the paper's outcome
    runs: tuple[tuple[str, Path, tuple[str, ...]], ...]  # (label, scenario file, --set values)
    judge: Callable[[Docs], Verdict] | None
    differs: str  # what differs from the paper's setup, and why the comparison holds (or does not)
    quick: bool = False  # in --quick


def _window_bins(doc: dict, start: float, end: float) -> list[float]:
    """The stream's total bins lying wholly inside [start, end), as shares of its ideal rate."""
    series, ideal = doc["timeseries"], doc["workloads"][0]["ideal_bps"]
    width = series["bin_s"]
    return [v / ideal for i, v in enumerate(series["total"]) if start <= i * width and (i + 1) * width <= end]


def _fault_times(doc: dict, action: str) -> list[float]:
    return [e["t_s"] for e in doc["events"] if e["action"] == action]


def _steps_down(share: float) -> Callable[[Docs], Verdict]:
    """A stream that loses `share` of its capacity at the first fault, and gets it back at the repair if any."""
    def judge(docs: Docs) -> Verdict:
        doc = docs["mrc"]
        down = sorted(_fault_times(doc, "link_down") + _fault_times(doc, "switch_down") + _fault_times(doc, "loss"))
        up = _fault_times(doc, "link_up") + _fault_times(doc, "switch_up")
        end = doc["workloads"][0]["duration_s"]
        before = _window_bins(doc, 0.2, down[0])
        during = _window_bins(doc, down[0] + 0.1, up[0] if up else end)
        after = _window_bins(doc, up[0] + 0.2, end) if up else []
        expected = (1 - share) * statistics.mean(before)
        held = statistics.mean(during)
        text = (f"before {statistics.mean(before):.0%} of ideal; during {held:.0%} (expected {expected:.0%}), "
                f"worst bin {min(during):.0%}" + (f"; after the repair {statistics.mean(after):.0%}" if after else ""))
        agree = abs(held - expected) <= 0.1 * statistics.mean(before) and (
            not after or statistics.mean(after) >= 0.9 * statistics.mean(before))
        return text + f"; {doc['summary']['messages']['failed']} failed", agree and not doc["summary"][
            "messages"]["failed"]
    return judge


def _lossy_path(docs: Docs) -> Verdict:
    """No loss of throughput, and the lossy path's EVs retired soon after the loss starts."""
    text, agree = _steps_down(0.0)(docs)
    doc = docs["mrc"]
    fault = next(e for e in doc["events"] if e["action"] == "loss")
    spine = fault["target"].split("-")[1]
    retired = [c["t_s"] for c in doc["ev_changes"]
               if c["spine"] == spine and c["new"] == "ASSUMED_BAD" and c["t_s"] >= fault["t_s"]]
    if not retired:
        return text + "; the lossy path was never retired", False
    after = retired[0] - fault["t_s"]
    return text + f"; its EVs retired {after * 1e3:.0f} ms after the loss began", agree and after < 0.5


def _ecn(docs: Docs) -> Verdict:
    on, off = docs["ecn"], docs["no-ecn"]
    shares = [[w["goodput_bps"] / 25e6 for w in d["workloads"]] for d in (on, off)]
    text = (f"ECN on: a {shares[0][0]:.0%}, b {shares[0][1]:.0%} of line rate, {on['summary']['ecn']['ev_skips']} "
            f"ECN skips, {on['summary']['packets']['trimmed']} trims; off: a {shares[1][0]:.0%}, b "
            f"{shares[1][1]:.0%}, {off['summary']['packets']['trimmed']} trims")
    return text, min(shares[0]) >= 0.85 and sum(shares[0]) > sum(shares[1])


def _qp_scaling(docs: Docs) -> Verdict:
    mrc, one, many = (docs[k]["summary"]["goodput_fraction"] for k in ("mrc", "roce-1", "roce-16"))
    single = docs["single-path"]["summary"]["goodput_fraction"]
    fidelity = "" if docs["roce-16"]["fidelity"]["ok"] else " (16 QPs: fidelity not ok, a direction only)"
    text = (f"share of ideal: MRC {mrc:.0%}, single-path 1 QP {single:.0%} ({single / mrc:.2f}x MRC), roce 1 QP "
            f"{one:.0%}, roce 16 QP {many:.0%}{fidelity}")
    return text, single < 0.75 * mrc and one < 0.75 * mrc and many > 1.2 * one  # 16 QPs help: by a fifth at least


def _victim(docs: Docs) -> Verdict:
    def victim(doc: dict) -> float:
        row = next(w for w in doc["workloads"] if w["name"] == "victim")
        return row["goodput_bps"] / row["ideal_bps"]
    mrc, roce = victim(docs["mrc"]), victim(docs["roce"])
    return f"victim at {mrc:.0%} of its rate with MRC, {roce:.0%} with roce", mrc >= 0.9 and roce < mrc - 0.1


def _under_loss(docs: Docs) -> Verdict:
    """MRC keeps most of its lossless throughput at 0.1% loss and gets about a third of the intended (ideal)
    throughput at 1% (within 1.5x); RoCE, where the row runs it, far below."""
    share = {label: doc["summary"]["goodput_fraction"] for label, doc in docs.items()}
    mrc = [share["mrc-0"], share["mrc-0.1"], share["mrc-1"]]
    kept = [s / mrc[0] for s in mrc[1:]]
    roce = "roce-1" in share
    text = (f"share of ideal at 0 / 0.1% / 1% loss: MRC {' / '.join(f'{s:.0%}' for s in mrc)} (kept "
            f"{kept[0]:.0%}, {kept[1]:.0%}; at 1% {mrc[2] * 3:.2f}x a third of ideal)"
            + (f"; roce 1 QP at 0.1% {share['roce-0.1']:.0%}, at 1% {share['roce-1']:.0%}" if roce else ""))
    failed = sum(docs[k]["summary"]["messages"]["failed"] for k in ("mrc-0", "mrc-0.1", "mrc-1"))
    agree = (kept[0] >= 0.8 and 1 / 3 / 1.5 <= mrc[2] <= 1 / 3 * 1.5
             and (not roce or share["roce-1"] < 0.5 * share["mrc-1"]) and not failed)
    return text + f"; MRC {failed} failed", agree


STEP_FLOOR_S = 0.1  # below this ideal step time a lab step measures its Python control path, not the network


def _all_to_all(floor: float) -> Callable[[Docs], Verdict]:
    """MRC beats RoCE at every message size the network sets the pace of (an ideal step of at least ``floor``
    seconds: below the lab's, a step measures its Python control path); 16 QPs do not rescue RoCE."""
    def judge(docs: Docs) -> Verdict:
        share = {label: doc["summary"]["goodput_fraction"] for label, doc in docs.items()}
        sizes = [label.removeprefix("mrc-") for label in docs if label.startswith("mrc-")]
        ideal = {s: docs["mrc-" + s]["summary"]["ideal_time_s"] / max(len(docs["mrc-" + s]["steps"]), 1)
                 for s in sizes}
        judged = [s for s in sizes if ideal[s] >= floor]
        text = "; ".join(f"{size}: MRC {share['mrc-' + size]:.0%}, roce 1 QP {share['roce-' + size]:.0%}"
                         + ("" if size in judged else f" (ideal step {ideal[size] * 1e3:.0f} ms: bound by the lab's "
                                                      "per-step control path, not judged)")
                         for size in sizes) + f"; roce 16 QP at {sizes[-1]}: {share['roce16-' + sizes[-1]]:.0%}"
        if not judged:
            return text, None
        return text, all(share["mrc-" + s] > share["roce-" + s] for s in judged) and \
            share["roce16-" + sizes[-1]] < share["mrc-" + sizes[-1]]
    return judge


def _permutation(*sets: str) -> tuple[str, ...]:
    return ("topology=clos-1p-4l-4s", "workload.steps=10", *sets)


def _lossy_nics(rate: float, hosts: int = 8, planes: int = 1, per_leaf: int = 2) -> str:
    """`events` losing ``rate`` of the packets on every host link (of clos-1p-4l-4s by default) from the first
    step."""
    links = [f"h{h}-p{p}l{h // per_leaf}" for h in range(hosts) for p in range(planes)]
    return "events=[" + ", ".join(f"{{at_step: 0, action: loss, target: {link}, rate: {rate}}}"
                                  for link in links) + "]"


SIM_SCALE = ("engine=sim", "topology=clos-1p-8l-8s-400g")
"""The paper's scale, in the simulator: 64 hosts with 400 Gb/s NICs, on one plane as the lab's collective rows
are, so that a RoCE QP's one path can carry its whole NIC."""
Runs = tuple[tuple[str, Path, tuple[str, ...]], ...]


PLANES_AT_SCALE = ("engine=sim", "topology=clos-8p-8l-8s-400g")
"""The paper's fabric shape at its scale: 64 hosts whose 400 Gb/s NICs are 8 planes of 50 Gb/s."""


def _ring_at_scale(*sets: str, scale: tuple[str, ...] = SIM_SCALE) -> tuple[str, ...]:
    return (*scale, "workload.pattern=ring-allreduce", "workload.message=16MiB", "workload.steps=4",
            "duration_limit=10s", *sets)


def _qp_scaling_runs(shape: Callable[..., tuple[str, ...]]) -> Runs:
    """MRC, single-path, and roce with 1 and 16 QPs, on the collective ``shape`` makes the --set values of."""
    return tuple((label, SCENARIOS / "permutation.yaml", shape(*sets)) for label, sets in (
        ("mrc", ("transport=mrc",)), ("single-path", ("transport=single-path",)), ("roce-1", ("transport=roce",)),
        ("roce-16", ("transport=roce", "workload.connections=16"))))


def _loss_runs(shape: Callable[..., tuple[str, ...]], lossy: Callable[[float], str], roce: bool = True) -> Runs:
    """MRC at 0, 0.1% and 1% loss and (with ``roce``) roce at 0.1% and 1%, ``lossy`` giving the events of a loss
    rate."""
    kinds = (("mrc", (0.0, 0.001, 0.01)),) + ((("roce", (0.001, 0.01)),) if roce else ())
    return tuple((f"{kind}-{rate * 100:g}", SCENARIOS / "permutation.yaml",
                  shape(f"transport={kind}", *([lossy(rate)] if rate else [])))
                 for kind, rates in kinds for rate in rates)


def _all_to_all_runs(messages: tuple[str, ...], *common: str) -> Runs:
    """MRC and roce at each message size, and roce with 16 QPs at the largest, all-to-all with ``common`` set."""
    def run(label: str, message: str, *sets: str) -> tuple[str, Path, tuple[str, ...]]:
        return (f"{label}-{message}", SCENARIOS / "permutation.yaml",
                (*common, "workload.pattern=all-to-all", f"workload.message={message}", "workload.steps=3", *sets))
    return tuple(r for message in messages for r in (run("mrc", message, "transport=mrc"),
                                                     run("roce", message, "transport=roce"))) + (
        run("roce16", messages[-1], "transport=roce", "workload.connections=16"),)


QP_SCALING = "RoCE 1 QP about half of what is possible; 16 QPs help; MRC beats both"
UNDER_LOSS = ("MRC loses little at 0.1% and gets about a third of the intended throughput at 1%; RoCE is nearly "
              "unusable at 1%")
ALL_TO_ALL = "MRC beats RoCE at every size; QP scaling does not help RoCE"


CLAIMS: tuple[Claim, ...] = (
    Claim("9a", "a host's NIC links cut under a bidirectional stream",
          "throughput steps down with each NIC link lost and back up when restored",
          (("mrc", SCENARIOS / "nic-cut-stream.yaml", ()),), _steps_down(0.25),
          "1 of 4 planes cut once (the paper: links of 8 planes one after another); 25 Mbit, 4 QPs", quick=True),
    Claim("9b", "half of a NIC's links down together, then restored", "about half the bandwidth while down, back "
          "quickly", (("mrc", PAPER / "nic-flap-half.yaml", ()),), _steps_down(0.5),
          "2 of 4 planes for 1.5 s (the paper: 4 of 8 for about 12 s)"),
    Claim("9c", "leaf-spine links cut one after another under a cross-leaf stream", "minimal impact on throughput",
          (("mrc", PAPER / "links-cut.yaml", ()),), _steps_down(0.0),
          "6 links of 48 cut, one per 500 ms (the paper: 20, one per second)"),
    Claim("9d", "leaf-spine links flapped together under a cross-leaf stream", "negligible impact on throughput",
          (("mrc", PAPER / "links-flap.yaml", ()),), _steps_down(0.0),
          "8 of the 32 leaf-spine links on the stream's paths, down together for 1.5 s, two per plane (the paper: "
          "8 T0-T1 links for a few seconds)"),
    Claim("10", "a leaf of one plane down", "steady state drops by that plane's share, stable on the rest",
          (("mrc", PAPER / "leaf-down.yaml", ()),), _steps_down(0.25), "4 planes (the paper: 8)"),
    Claim("11", "a spine of one plane down, then restored", "no steady-state loss of bandwidth",
          (("mrc", PAPER / "spine-down.yaml", ()),), _steps_down(0.0), "4 spines per plane"),
    Claim("12-13", "16 EVs, one path dropping 20%", "that EV goes inactive at once, a spare takes over, line rate",
          (("mrc", PAPER / "lossy-path.yaml", ()),), _lossy_path,
          "8 planes at 25 Mbit, one direction, one drop rate (the paper: several)"),
    Claim("14", "two flows, the second forced onto the first's EV", "ECN moves the first flow; both near line rate",
          (("ecn", SCENARIOS / "ecn-shared-link.yaml", ()),
           ("no-ecn", SCENARIOS / "ecn-shared-link.yaml", ("topology.links.ecn=false",))), _ecn,
          "1 plane, 2 spines, 25 Mbit; the lab's MRC also moves off a queued path by trims and path holds, so "
          "the ECN-off contrast is smaller", quick=True),
    Claim("16", "ring/permutation collectives, RoCE 1 and 16 QPs against MRC", QP_SCALING,
          _qp_scaling_runs(_permutation),
          _qp_scaling, "a permutation of 8 hosts on one plane, 1 MiB per step, no PFC (roce meets drops a PFC "
          "fabric would pause); the loss rows are 16-loss"),
    Claim("16-loss", "the same collectives with random loss on every NIC link", UNDER_LOSS,
          _loss_runs(lambda *sets: _permutation("duration_limit=120s", *sets), _lossy_nics),
          _under_loss, "a permutation of 8 hosts on one plane, 1 MiB per step (the paper: a 64-way ring, 4 MB-16 GB "
          "messages); loss on both directions of every host link from the first step"),
    Claim("17", "all-to-all at a small and a large message, RoCE 1 and 16 QPs against MRC", ALL_TO_ALL,
          _all_to_all_runs(("16KiB", "1MiB", "16MiB"), "topology=clos-1p-4l-2s", "duration_limit=180s"),
          _all_to_all(STEP_FLOOR_S), "8 hosts on one plane whose uplinks carry exactly what the hosts send "
          "(clos-1p-4l-2s), 16 KiB to 16 MiB per host per step, 3 orders of magnitude (the paper: 64-way, "
          "4 MB-16 GB); sizes whose ideal step is under 100 ms measure the lab's control path and are shown, "
          "not judged; no loss rows (16-loss has them for the permutation)"),
    Claim("16-sim", "16 at the paper's scale, in the simulator", QP_SCALING, _qp_scaling_runs(_ring_at_scale),
          _qp_scaling, "the simulator engine: a 64-way ring on one plane at 400 Gb/s, 16 MiB per step, no loss, no "
          "PFC; hosts are infinitely fast"),
    Claim("16-loss-sim", "16-loss at the paper's scale, in the simulator", UNDER_LOSS,
          _loss_runs(_ring_at_scale, lambda rate: _lossy_nics(rate, 64, 1, 8)),
          _under_loss, "the simulator engine: a 64-way ring on one plane at 400 Gb/s, 16 MiB per step (the paper: "
          "4 MB-16 GB); loss on both directions of every host link from the first step; hosts are infinitely fast"),
    Claim("16-loss-sim-8p", "16-loss at the paper's scale on its 8 planes, in the simulator", UNDER_LOSS,
          _loss_runs(lambda *sets: _ring_at_scale(*sets, scale=PLANES_AT_SCALE),
                     lambda rate: _lossy_nics(rate, 64, 8, 8), roce=False),
          _under_loss, "the simulator engine: a 64-way ring over 8 planes of 50 Gb/s (the paper's NICs), 16 MiB per "
          "step; loss on both directions of every host link on every plane from the first step; MRC only (a RoCE "
          "QP's one path would carry an eighth of its NIC: 16-loss-sim has roce on one plane); hosts are "
          "infinitely fast"),
    Claim("17-sim", "17 at the paper's scale, in the simulator", ALL_TO_ALL,
          _all_to_all_runs(("1MiB", "16MiB"), *SIM_SCALE, "duration_limit=10s"),
          _all_to_all(0.0), "the simulator engine: 64-way all-to-all on one plane at 400 Gb/s, 1 and 16 MiB per "
          "host per step (the paper: 4 MB-16 GB); no PFC; hosts are infinitely fast"),
    Claim("18", "cross-spine incast plus a victim flow into the receiver's rack",
          "RoCE: the victim loses about 25%; MRC: the victim is unaffected",
          (("mrc", SCENARIOS / "incast-victim.yaml", ()), ("roce", SCENARIOS / "incast-victim.yaml",
                                                          ("transport=roce",))), _victim,
          "5-to-1 (the paper: 7-to-1), 1 plane of 4 racks, 25 Mbit, no PFC", quick=True),
)


def select(only: str | None, quick: bool) -> list[Claim]:
    """The claims to run: ``--only 9a,16``, or the quick ones, or all."""
    if only:
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        known = {c.id for c in CLAIMS}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            from .errors import UsageError
            raise UsageError(f"--only {unknown[0]!r}: no such claim; claims: {', '.join(c.id for c in CLAIMS)}")
        return [c for c in CLAIMS if c.id in wanted]
    return [c for c in CLAIMS if c.quick or not quick]


def run_folder(claim: Claim, label: str, repetition: int = 1) -> str:
    """A run's folder name: the first repetition runs the scenario's own seed, repetition k seed 100 + k (apart
    from any scenario's own)."""
    return f"{claim.id}-{label}" + (f"-r{repetition}" if repetition > 1 else "")


def runs(claim: Claim, repeat: int = 1) -> list[tuple[str, Path, tuple[str, ...]]]:
    """(folder, scenario, --set values) of every run of the claim, repetitions included."""
    return [(run_folder(claim, label, k), path, sets + ((f"seed={100 + k}",) if k > 1 else ()))
            for k in range(1, repeat + 1) for label, path, sets in claim.runs]


def sets_text(sets: tuple[str, ...]) -> str:
    """A run's --set values for its progress line, a timeline counted rather than spelled out (a loss on every host
    link of 64 hosts x 8 planes is 512 events; the run's scenario.yaml has them all)."""
    return " ".join(f"events=[{s.count('action:')} events]" if s.startswith("events=") else s for s in sets)


def shares(claim: Claim, root: Path, repeat: int = 1) -> dict[str, list[float]]:
    """Each run label's median share of ideal (summary.goodput_fraction) and its 95% interval over the repetitions
    that left results: [median, low, high, runs]. The figure every row's runs have in common."""
    out = {}
    for label, _, _ in claim.runs:
        values = []
        for k in range(1, repeat + 1):
            try:
                doc = json.loads((root / run_folder(claim, label, k) / "results.json").read_text())
                values.append(float(doc["summary"]["goodput_fraction"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        if values:
            out[label] = [*(round(v, 4) for v in interval(values)), len(values)]
    return out


def shares_text(figures: dict[str, list[float]]) -> str:
    """``label median [low, high]`` per run label (the interval only where repetitions give one)."""
    return "; ".join(f"{label} {m:.0%}" + (f" [{lo:.0%}, {hi:.0%}]" if n > 1 else "")
                     for label, (m, lo, hi, n) in figures.items())


def judge(claim: Claim, root: Path, repeat: int = 1) -> dict:
    """The claim's row, from its runs' results in ``root``: each repetition judged on its own, the row agreeing
    when most of them do."""
    row = {"id": claim.id, "experiment": claim.experiment, "paper": claim.paper, "differs": claim.differs,
           "runs": [name for name, _, _ in runs(claim, repeat)], "shares": shares(claim, root, repeat)}
    if claim.judge is None:
        return {**row, "lab": "-", "verdict": "not comparable"}
    texts: list[str] = []
    verdicts: list[bool | None] = []
    untrusted: set[str] = set()
    for k in range(1, repeat + 1):
        docs: Docs = {}
        for label, _, _ in claim.runs:
            try:
                docs[label] = json.loads((root / run_folder(claim, label, k) / "results.json").read_text())
            except (OSError, ValueError):
                return {**row, "lab": f"run {run_folder(claim, label, k)} left no results", "verdict": "not measured"}
        try:
            text, agree = claim.judge(docs)
        except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, statistics.StatisticsError) as exc:
            return {**row, "lab": f"could not be read: {type(exc).__name__}: {exc}", "verdict": "not measured"}
        texts.append(text)
        verdicts.append(agree)
        untrusted.update(label for label, d in docs.items() if not d["fidelity"]["ok"])
    text = texts[0]
    if repeat > 1:
        text += f"; agrees in {verdicts.count(True)} of {repeat} repetitions (seeds: the scenario's, then 102 on)"
    if untrusted:
        text += f" [fidelity not ok: {', '.join(sorted(untrusted))}]"
    agreed = None if None in verdicts else verdicts.count(True) * 2 > repeat
    return {**row, "lab": text, "verdict": {True: "agree", False: "disagree", None: "not comparable"}[agreed]}


def markdown(rows: list[dict], command: str, date: str) -> str:
    lines = [f"# The paper suite: the lab against MRC's published experiments ({date})", "",
             f"`{command}`; every figure is read off the run folders named in the last column.", "",
             "| # | experiment | the paper | the lab | verdict | share of ideal per run: median [95% interval] | "
             "what differs | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['experiment']} | {r['paper']} | {r['lab']} | **{r['verdict']}** | "
                     f"{shares_text(r.get('shares', {})) or '-'} | {r['differs']} | {', '.join(r['runs']) or '-'} |")
    return "\n".join(lines) + "\n"
