"""Each vocabulary is one table, and every row has its implementation."""
import importlib.util

from mrclab import actions, routing, transports
from mrclab.agent.__main__ import parse_args
from mrclab.fabric.faults import Faults
from mrclab.spec import keys

AGENT_ARGS = ["--host", "0", "--planes", "2", "--leaves", "2", "--spines", "2", "--hosts-per-leaf", "2",
              "--control", "/tmp/x.sock", "--log", "/tmp/x.log"]


def test_every_routing_mode_has_its_controller_app():
    for row in routing.ROUTINGS.values():
        assert importlib.util.find_spec(f"mrclab.controller.{row.app}") is not None
        assert routing.APPS[row.app] is row
    assert not routing.ROUTINGS[routing.DEFAULT].baseline


def test_every_fault_action_is_a_fabric_fault_or_the_timelines():
    for row in actions.ACTIONS.values():
        assert hasattr(Faults, row.name) or row.name == "flap"  # a flap is link_down/link_up by turns
        assert set(row.clears) <= set(actions.ACTIONS)
    assert actions.mends_cut("link_up") and actions.mends_cut("switch_up") and not actions.mends_cut("restore")
    assert actions.clears_target("loss", 0.0) and not actions.clears_target("loss", 0.01)
    assert not actions.cuts("no_such_action")


def test_the_scenario_reader_and_the_agent_take_the_tables_names():
    for name in transports.TRANSPORTS:
        assert parse_args(AGENT_ARGS + ["--transport", name]).transport == name
    for name in routing.ROUTINGS:
        assert parse_args(AGENT_ARGS + ["--routing", name]).routing == name
    rows = keys.SCENARIO
    assert rows["transport"].default == transports.DEFAULT and rows["routing"].default == routing.DEFAULT
