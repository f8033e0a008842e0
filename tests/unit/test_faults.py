"""Fault timing and dead-cable accounting, with the fabric's I/O replaced by a log of calls."""
import time

from mrclab.fabric import faults as faults_mod
from mrclab.fabric import layout as layout_mod
from mrclab.spec import topology


def _faults(monkeypatch, read_s=0.05):
    """Faults on clos-2p-2l-2s whose counter reads take `read_s` and record (what, when)."""
    calls = []
    drops = {"n": 0}

    def tx_dropped(ports):
        time.sleep(read_s)  # a busy ovs-vswitchd answers dump-ports slowly
        calls.append(("read", time.monotonic()))
        return {name: drops["n"] for name in ports}

    def ip_batch(lines, netns_pid=None):
        calls.append(("ip " + ";".join(lines), time.monotonic()))

    monkeypatch.setattr(faults_mod.ovs, "tx_dropped", tx_dropped)
    monkeypatch.setattr(faults_mod, "_ip_batch", ip_batch)
    topo = topology.load("clos-2p-2l-2s")
    layout = layout_mod.build(topo, "mtf1")
    return faults_mod.Faults(topo, layout, egress=None, host_pids={}), calls, drops


def test_a_fault_is_timed_at_the_ip_command_not_before_the_slow_counter_read(monkeypatch):
    faults, calls, _ = _faults(monkeypatch)
    t = faults.apply("link_down", "p0l0-p0s1")
    [(first, t_read), (command, t_ip)] = calls
    assert first == "read" and command.startswith("ip ") and " down" in command
    assert t_read <= t <= t_ip


def test_the_cable_is_read_while_up_so_every_send_into_it_while_down_is_the_faults(monkeypatch):
    faults, calls, drops = _faults(monkeypatch, read_s=0.0)
    faults.apply("link_down", "p0l0-p0s1")
    drops["n"] = 7  # sends into the dead cable, up to the repair
    faults.apply("link_up", "p0l0-p0s1")
    assert [what.split()[0] for what, _ in calls] == ["read", "ip", "ip", "read"]  # down: read first; up: last
    assert set(faults._dead_drops.values()) == {7} and not faults._down_at
