from mrclab.spec import Event
from mrclab.timeline import step_actions, timed_actions


def test_flap_toggles_and_ends_up():
    actions = timed_actions((Event("flap", "p0l0-p0s0", at_s=2.0, period_s=0.2, until_s=2.5),))
    assert [(round(a.t_s, 3), a.action) for a in actions] == [
        (2.0, "link_down"), (2.1, "link_up"), (2.2, "link_down"), (2.3, "link_up"), (2.4, "link_down"),
        (2.5, "link_up")]


def test_actions_are_time_ordered_and_step_events_wait_for_their_step():
    events = (Event("link_up", "p0l0-p0s0", at_s=6.0), Event("link_down", "p0l0-p0s0", at_s=3.0),
              Event("switch_down", "p0s1", at_step=4), Event("loss", "p0l0-p0s1", at_s=1.0, loss_probability=0.1))
    assert [(a.t_s, a.action, a.event_index) for a in timed_actions(events)] == [
        (1.0, "loss", 3), (3.0, "link_down", 1), (6.0, "link_up", 0)]
    assert timed_actions(events)[0].loss_probability == timed_actions(events)[0].rate_field == 0.1
    assert step_actions(events, 3, 1.0) == []
    [fired] = step_actions(events, 4, 7.5)
    assert (fired.t_s, fired.action, fired.target) == (7.5, "switch_down", "p0s1")
