"""Synthetic run directories for the report and compare tests, written with the runner's own writers.

A real run needs root and minutes, so `make_run` fabricates what `mrclab run` would
leave behind, in milliseconds, for three stories: MRC riding out a link failure at 3 s (a step-time
spike, EVs retired and revived, trims, an avoid_s), ECMP with a reconverging control
plane (a long stall, flow-mods after boot, no EVs), and a run aborted at its duration
limit (three steps, no samples, no events).
"""
import random

from mrclab.metrics import expectations
from mrclab.metrics import results as results_mod
from mrclab.spec import scenario as scenario_mod

FAULT_AT, CLEAR_AT, AVOID_S = 3.0, 6.0, 0.004
FAILED_LINK = "p0l1-p0s2"
BASE_STEP_S = 0.05
# inline, so the fixture does not follow the shipped files' rates
TOPOLOGY = {"name": "clos-4p-4l-4s", "planes": 4, "leaves": 4, "spines": 4, "hosts_per_leaf": 2,
            "links": {"host_rate": "100Mbit", "fabric_rate": "100Mbit", "queue": "64KiB", "mtu": 9000}}
STEPS = 150
# when the senders trimmed, retransmitted and timed out (results.json `recovery`, the agents' exact times)
RECOVERY = {"trimmed": [[1.0, 5], [FAULT_AT + 0.01, 40]],
            "retransmitted": [[FAULT_AT + 0.002, 12], [FAULT_AT + 0.5, 3]],
            "timeouts": [[FAULT_AT + 0.05, 3]]}


def _scenario(name, transport, routing, steps):
    return scenario_mod.from_mapping({
        "name": name, "description": "Ring all-reduce while a plane-0 leaf-spine link fails and comes back.",
        "topology": TOPOLOGY, "transport": transport, "routing": routing, "seed": 1,
        "duration_limit": "60s",
        "workload": {"pattern": "ring-allreduce", "message": "1MiB", "steps": steps},
        "events": [{"at": f"{FAULT_AT:g}s", "action": "link_down", "target": FAILED_LINK},
                   {"at": f"{CLEAR_AT:g}s", "action": "link_up", "target": FAILED_LINK}],
        "expect": {"failed_messages": 0, "max_step_time_ratio": 2.0, "min_goodput_fraction": 0.5},
    }, f"scenarios/{name}.yaml")


def _steps(kind, count, rng):
    """Back-to-back steps of ~50 ms; the one running at the fault is slower (MRC) or stalls (ECMP)."""
    out, t, hit = [], 0.0, False
    for i in range(count):
        d = BASE_STEP_S * rng.uniform(0.95, 1.08)
        if not hit and t + d > FAULT_AT:
            hit, d = True, 0.09 if kind == "mrc" else 2.3
        out.append({"index": i, "start_s": round(t, 6), "duration_s": round(d, 6), "ideal_s": BASE_STEP_S * 0.8})
        t += d + 0.002
    return out


def _series(kind, end_s):
    rows, t = [], 0.0
    while t <= end_s:
        faulted = FAULT_AT <= t < CLEAR_AT
        after = max(0.0, min(t, CLEAR_AT) - FAULT_AT)
        bad = 6 if faulted and kind == "mrc" else 0
        rows.append({"t_s": round(t, 6), "data_sent": int(t * 40000),
                     "retransmitted": int(after * 30) + (12 if t >= FAULT_AT else 0),
                     "trimmed": int(t * 20) + int(after * 150), "timeouts": 3 if t >= FAULT_AT else 0,
                     "nacks": int(t * 20), "probes": int(after * 24),
                     "ev_states": {"GOOD": 8 * 16 - bad, "ASSUMED_BAD": bad} if kind == "mrc" else {}})
        t += 0.25
    return rows


def _ev_changes():
    out = []
    for host in range(3):
        for ev in (2, 18):
            out.append({"t_s": FAULT_AT + 0.001 * (host + 1), "host": f"h{host}", "peer": f"h{host + 1}",
                        "ev": ev, "old": "GOOD", "new": "ASSUMED_BAD"})
            out.append({"t_s": CLEAR_AT + 0.1 + 0.01 * host, "host": f"h{host}", "peer": f"h{host + 1}",
                        "ev": ev, "old": "ASSUMED_BAD", "new": "GOOD"})
    return out


def _links(topo, kind, wall, rng):
    """Both directions of every cable; spraying spreads bytes evenly, ECMP piles flows on a few links."""
    out = []
    for link in topo.links:
        for src, dst in ((link.a, link.b), (link.b, link.a)):
            share = 0.4 if kind == "mrc" else rng.choice((0.05, 0.05, 0.1, 0.85))
            if link.name == FAILED_LINK:
                share *= 0.6
            tx_bytes = int(topo.link_rate_bps(link) / 8 * wall * share * rng.uniform(0.97, 1.03))
            down, lost = 7 if link.name == FAILED_LINK else 0, 5 if (src, dst) == ("p1l0", "p1s3") else 0
            out.append({"link": link.name, "from": src, "to": dst, "tx_packets": tx_bytes // 9000,
                        "tx_bytes": tx_bytes, "drops": down + lost, "queue_drops": 0, "loss_drops": lost,
                        "blackhole_drops": 0, "down_drops": down, "trims": 41 if (src, dst) == ("p1l0", "p1s3") else 0,
                        "ecn_marked": 12 if (src, dst) == ("p1s3", "p1l0") else 0})
    return out


def _messages(steps, hosts, rng, unfinished_step=None):
    rows = []
    for s in steps:
        for n in range(hosts):
            done = s["index"] != unfinished_step
            delivered = round(s["start_s"] + s["duration_s"] * rng.uniform(0.6, 1.0), 6) if done else ""
            rows.append([s["index"], f"h{n}", f"h{(n + 1) % hosts}", 1 << 20, s["start_s"], delivered,
                         "completed" if done else "unfinished"])
    return rows


def make_run(path, kind="mrc", aborted=False, fidelity_ok=True, name="link-failure", seed=1):
    """Write a run directory at `path` and return its results document.

    kind: "mrc" (mrc over static-srv6) or "ecmp" (tcp over ecmp-reconverge).
    aborted: the run hit its duration limit in step 3 (no samples, no events, no EVs).
    """
    rng = random.Random(seed)
    transport, routing = ("mrc", "static-srv6") if kind == "mrc" else ("tcp", "ecmp-reconverge")
    scenario = _scenario(name, transport, routing, STEPS)
    topo = scenario.topology
    steps = _steps(kind, 3 if aborted else STEPS, rng)
    wall = steps[-1]["start_s"] + steps[-1]["duration_s"] + (60.0 if aborted else 0.0)
    durations = [s["duration_s"] for s in steps]
    ideal_step = 2 * (1 << 20) * 8 / topo.host_rate_bps / topo.planes
    messages = _messages(steps, topo.hosts, rng, unfinished_step=2 if aborted else None)
    delivered = sum(r[3] for r in messages if r[5] != "")
    series = [] if aborted else _series(kind, wall)
    events = [] if aborted else [
        {"t_s": FAULT_AT, "action": "link_down", "target": FAILED_LINK, "event_index": 0,
         **({"avoid_s": AVOID_S} if kind == "mrc" else {})},
        {"t_s": CLEAR_AT, "action": "link_up", "target": FAILED_LINK, "event_index": 1}]
    last = series[-1] if series else {}
    doc = {
        "schema": results_mod.SCHEMA,
        "scenario": {"name": name, "file": scenario.source},
        "topology": {"name": topo.name, "planes": topo.planes, "leaves": topo.leaves, "spines": topo.spines,
                     "hosts": topo.hosts},
        "transport": transport, "routing": routing, "seed": 1, "started_at": "2026-03-02T10:00:00Z",
        "duration_s": round(wall + 0.3, 6), "steps": steps,
        "summary": {
            "step_time_s": {"p50": round(results_mod.percentile(durations, 50), 6),
                            "p99": round(results_mod.percentile(durations, 99), 6),
                            "p100": max(durations), "mean": round(sum(durations) / len(durations), 6)},
            "goodput_bps": round(delivered * 8 / wall, 1), "goodput_fraction": round(ideal_step * len(steps) / wall, 4),
            "ideal_time_s": round(ideal_step * len(steps), 6), "workload_time_s": round(wall, 6),
            "base_rtt_s": 0.00031, "rtt_p50_s": 0.00082, "rtt_p99_s": 0.0041,
            "messages": {"sent": len(messages), "completed": sum(1 for r in messages if r[6] == "completed"),
                         "failed": sum(1 for r in messages if r[6] != "completed")},
            "bytes": {"sent": sum(r[3] for r in messages), "delivered": delivered, "verified": delivered},
            "packets": {k: last.get(k, 0) for k in results_mod.PACKET_KEYS},
            "ecn": {"marked": 12, "ce_received": 11, "ev_skips": 9}},
        "events": events,
        "ev_changes": _ev_changes() if kind == "mrc" and not aborted else [],
        "nic_changes": [] if aborted else [{"t_s": FAULT_AT + 0.5, "host": "h2", "plane": 3, "state": "down",
                                            "seen_by": "h2"},
                                           {"t_s": CLEAR_AT, "host": "h2", "plane": 3, "state": "up", "seen_by": "h2"}],
        "series": series,
        "recovery": {} if aborted or kind != "mrc" else RECOVERY,
        "links": _links(topo, kind, wall, rng),
        "controller": {"flow_mods_boot": 224, "flow_mods_after_boot": 0 if kind == "mrc" else 32},
        "fidelity": {"cpu_busy_pct": 41.0 if fidelity_ok else 97.5, "hottest_thread": "ovs-vswitchd",
                     "hottest_thread_pct": 35.0 if fidelity_ok else 99.0, "ok": fidelity_ok,
                     "notes": ["machine CPU 41% busy, hottest thread ovs-vswitchd at 35% of a core"] if fidelity_ok
                     else ["machine CPU 98% busy (limit 85%): the host, not the fabric, set the pace"]},
    }
    doc["expectations"] = expectations.evaluate(scenario.expect, doc)
    if aborted:
        doc["expectations"].insert(0, {"name": "duration_limit", "expected": 60.0,
                                       "actual": "duration_limit of 60s reached in step 2", "ok": False})
    path.mkdir(parents=True, exist_ok=True)
    (path / "scenario.yaml").write_text(scenario.to_yaml())
    results_mod.write(path, doc)
    log = results_mod.MessageLog(path / "messages.csv")
    for row in messages:
        log.write(row)
    log.close()
    (path / "runner.log").write_text("synthetic run\n")
    return doc

