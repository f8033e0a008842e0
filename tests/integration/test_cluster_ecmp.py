"""The traditional fabric over two servers, for real: `routing: ecmp-reconverge` with each server's controller
programming its own leaves and flooding its link states to the other's (`controller.flood`). A cable within
server 0 is cut: server 1's leaf, which sees nothing of it, is rewritten too, a convergence delay after the cut;
then a cable between the servers is cut, and each server's end loses carrier as a local cable's does."""
from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import REPO
from tests.integration.test_cluster_run import cluster, run_over  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

DELAY_S = 0.3


def test_ecmp_reconverges_every_servers_leaves_after_a_cut_on_either(cluster, tmp_path):  # noqa: F811
    servers, _sshd, env = cluster
    smoke = yaml.safe_load((REPO / "scenarios/smoke.yaml").read_text())
    smoke.update(routing="ecmp-reconverge", transport="single-path",
                 routing_options={"convergence_delay": f"{DELAY_S}s"}, expect={"failed_messages": 0},
                 events=[{"at": "0.5s", "action": "link_down", "target": "p0l0-p0s0"},   # within server 0
                         {"at": "1.3s", "action": "link_up", "target": "p0l0-p0s0"},
                         {"at": "2.1s", "action": "link_down", "target": "p1l1-p1s0"},  # between the servers
                         {"at": "2.9s", "action": "link_up", "target": "p1l1-p1s0"}])
    smoke["workload"]["steps"] = 150
    scenario = tmp_path / "ecmp.yaml"
    scenario.write_text(yaml.safe_dump(smoke))
    proc = run_over(servers, env, scenario, tmp_path / "out", "--json")
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-2000:]
    doc = json.loads(stdout)
    assert all(check["ok"] for check in doc["expectations"]), doc["expectations"]
    s = doc["summary"]
    assert s["messages"]["failed"] == 0 and s["bytes"]["delivered"] == s["bytes"]["verified"] == s["bytes"]["sent"]
    where = {node: i for i, server in enumerate(doc["cluster"]["servers"]) for node in server["switches"]}
    assert where["p0l0"] == where["p0s0"] == 0 and where["p0l1"] == 1 and where["p1l1"] != where["p1s0"]
    changes = doc["controller"]["reconvergences"]
    print(json.dumps(changes, indent=1))
    # the cut within server 0: its own leaves reconverge on carrier, server 1's on server 0's flooded state
    first = [c for c in changes if "p0l0" in c["trigger"] or "p0s0" in c["trigger"]]
    heard = [c for c in changes if c["trigger"] == "link states of server 0" and c["switches"] == ["p0l1"]]
    assert first and len(heard) >= 2  # down and up
    for remote in heard[:1]:
        assert abs(remote["trigger_t"] - first[0]["trigger_t"]) < 0.2  # the flood took less than 0.2 s
        assert DELAY_S - 0.05 < remote["t"] - remote["trigger_t"] < DELAY_S + 1.0
    # the cut between the servers: a tunnel end loses carrier (protodown) as a local cable's sending end does, and
    # the leaves of both servers are rewritten (each on whichever comes first: its own end's carrier or the other
    # server's flood)
    crossing = [c for c in changes if c["trigger_t"] > heard[1]["t"]]
    assert {"p1l1 port to p1s0 down", "p1s0 port to p1l1 down"} & {c["trigger"] for c in crossing}
    assert {"p1l0", "p1l1"} <= {leaf for c in crossing for leaf in c["switches"]}
    assert doc["controller"]["flow_mods_after_boot"] == sum(c["flow_mods"] for c in changes)
