"""One server's share of a cluster lab: its messages are checked on decode, and a share that cannot be built
over servers is refused before anything exists."""
from __future__ import annotations

import io

import pytest

from mrclab.cluster import messages as msg
from mrclab.cluster import server
from mrclab.cluster.placement import assign
from mrclab.cluster.share import Share
from mrclab.cluster.tunnel import Underlay
from mrclab.errors import UsageError
from mrclab.fabric.net import Fabric
from mrclab.spec import topology

TOPO = topology.load("clos-2p-2l-2s")


def test_every_message_survives_a_round_trip():
    for message in (msg.Hello("fdcc::2"), msg.Underlay("fdcc::1", "u0", 9070, True),
                    msg.Build(TOPO.to_dict(), 1, {"h0": 0}, {"0": ["fdcc::1", "u0"]}, port=4790, seed=3, run="smoke"),
                    msg.Built({"h0": 10}, {"p0l0": 11}, "abc", 40000, [12, 13], "b00t"), msg.Clock(),
                    msg.Clocked(12.5), msg.Tick("fdcc::2", 40000), msg.Ticked(1e-6, 2e-5), msg.Stop(),
                    msg.Failed("why"), msg.Launch({"name": "smoke"}),
                    msg.Launched({"h0": [10, "/run/mrclab/x/h0.sock"]}),
                    msg.Apply("loss", "p0l0-p0s0", 0.02), msg.Applied(3.5), msg.Watch([1, 2], ["abc"]),
                    msg.Watching(), msg.Quiesce(), msg.Spent({"agent h0": 0.5}, 0.1, 30), msg.Read(),
                    msg.Readings([{"link": "h0-p0l0"}], [1, 2, 3, 4], {"flow_mods_boot": 0}),
                    msg.Judge(0, 0.8, None, [1e6, 2.5e7]), msg.Judged({"ok": True}), msg.Reap("h0", 1.0),
                    msg.Kill("h0"), msg.Reaped(None), msg.Logs(), msg.Logged({"agent-h0.jsonl": "{}"})):
        assert msg.decode(msg.encode(message)) == message


@pytest.mark.parametrize("line, why", [("{", "not JSON"), ('{"type": "boot"}', "unknown message type"),
                                       ('["stop"]', "must be a JSON object"),
                                       ('{"type": "stop", "now": 1}', "takes no 'now'"),
                                       ('{"type": "built", "hosts": {}}', "'built' has no"),
                                       ('{"type": "counted", "counts": {"p0s0": "7"}}', "each value an integer"),
                                       ("", "closed the channel")])
def test_a_malformed_line_names_what_is_wrong(line, why):
    with pytest.raises(ValueError, match=why):
        msg.decode(line)


def test_a_server_answers_failed_and_builds_nothing_when_the_first_line_is_not_a_build():
    out = io.StringIO()
    assert server.serve(io.StringIO(msg.encode(msg.Stop())), out) == 1
    answer = msg.decode(out.getvalue())
    assert isinstance(answer, msg.Failed) and "expected Build" in answer.error


def share(placement="pods") -> Share:
    where = assign(TOPO, ["a", "b"], placement, source="test").server_of()
    return Share(0, where, {0: Underlay("fdcc::1", "u0"), 1: Underlay("fdcc::2", "u1")})


@pytest.mark.parametrize("kwargs, why", [({"datapath": "ovs"}, "needs the linux datapath"),
                                         ({"routing": "ecmp-reconverge", "datapath": "linux"}, "routes statically")])
def test_a_share_the_servers_cannot_hold_is_refused_before_anything_exists(kwargs, why):
    with pytest.raises(UsageError, match=why):
        Fabric(TOPO, share=share(), **kwargs)


def test_a_host_cable_between_servers_is_refused():
    with pytest.raises(UsageError, match="host cable .* between two servers"):
        Fabric(TOPO, share=share("planes"), datapath="linux")
