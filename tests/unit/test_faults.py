"""Fault timing and dead-cable accounting, with the fabric's I/O replaced by a log of calls."""
import time

from mrclab import layout as layout_mod
from mrclab.fabric import faults as faults_mod
from mrclab.spec import topology


def _faults(monkeypatch, read_s=0.05):
    """Faults on clos-2p-2l-2s whose counter reads take `read_s` and record (what, when)."""
    calls = []
    drops = {"n": 0}

    def tx_dropped(ports):
        time.sleep(read_s)  # a busy ovs-vswitchd answers dump-ports slowly
        calls.append(("read", time.monotonic()))
        return {name: drops["n"] for name in ports}

    def ip_batches(batches):
        calls.append(("ip " + ";".join(line for lines in batches.values() for line in lines), time.monotonic()))

    monkeypatch.setattr(faults_mod.ovs, "tx_dropped", tx_dropped)
    monkeypatch.setattr(faults_mod, "ip_batches", ip_batches)
    topo = topology.load("clos-2p-2l-2s")
    layout = layout_mod.build(topo, "mtf1")
    return faults_mod.OvsFaults(topo, layout, egress=None, host_pids={}, cables=None), calls, drops


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


def test_queue_waits_are_per_port_means_of_bulk_and_high_priority_packets_along_a_path(monkeypatch):
    """Every switch port sent 10 packets: 2 high priority (waited 1 ms each) and 1 trimmed (not counted as bulk);
    the other 7 bulk packets waited 21 ms between them, 3 ms each on average. A DATA packet crosses three switch
    ports, its SACK four ports back. A host NIC's bulk packets waited long (a paced burst: the sender's own, not in
    its RTT samples) and count only for their high-priority ones."""
    from mrclab.fabric.egress import PortCounters

    class Egress:
        def counters(self, ifname):
            host_nic = ifname in host_nics
            return PortCounters(tx_packets=10, tx_bytes=0, drops=0, trims=1, loss_drops=0, blackhole_drops=0,
                                queued_ns=900_000_000 if host_nic else 21_000_000, ctl_packets=2,
                                ctl_queued_ns=2_000_000, cut_drops=0, ecn_marked=0)

    faults, _, _ = _faults(monkeypatch)
    host_nics = {ifname for ifname, (_, node, _) in faults._ports().items() if node in faults.layout.hosts}
    assert host_nics
    faults.egress = Egress()
    data, control = faults.queue_waits()
    assert abs(data - 3 * 0.003) < 1e-12 and abs(control - 4 * 0.001) < 1e-12


def test_link_counters_show_every_kind_of_drop(monkeypatch):
    """A lossy, blackholed link's drops are in `drops` and in a field of their own, per direction."""
    from mrclab.fabric.egress import PortCounters

    class Egress:
        def counters(self, ifname):
            lossy = ifname in faults._cables(faults._ends(faults._link("p0l0-p0s1")))
            return PortCounters(tx_packets=10, tx_bytes=0, drops=1, trims=0, loss_drops=5 if lossy else 0,
                                blackhole_drops=3 if lossy else 0, queued_ns=0, ctl_packets=0, ctl_queued_ns=0,
                                cut_drops=0, ecn_marked=0)

    faults, _, _ = _faults(monkeypatch)
    faults.egress = Egress()
    rows = faults.link_counters()
    lossy = [r for r in rows if r["link"] == "p0l0-p0s1"]
    assert len(lossy) == 2
    for r in lossy:
        assert (r["loss_drops"], r["blackhole_drops"], r["queue_drops"], r["drops"]) == (5, 3, 1, 9)
    other = next(r for r in rows if r["link"] != "p0l0-p0s1")
    assert (other["loss_drops"], other["drops"]) == (0, 1)


def test_the_emulators_drops_count_from_the_workloads_start(monkeypatch):
    """A drop while the fabric came up (an interface's report sent before its peer was up) is not the
    workload's; one after start_counting is."""
    from mrclab.fabric.egress import PortCounters

    class Egress:
        def counters(self, ifname):
            return PortCounters(tx_packets=10, tx_bytes=0, drops=0, trims=0, loss_drops=0, blackhole_drops=0,
                                queued_ns=0, ctl_packets=0, ctl_queued_ns=0, cut_drops=0, ecn_marked=0)

    faults, _, drops = _faults(monkeypatch, read_s=0.0)
    faults.egress = Egress()
    drops["n"] = 1
    before = [r["emulator_drops"] for r in faults.link_counters()]
    assert set(before) == {0, 1}  # switch ports count; a host sends through its own NIC, no OVS port
    faults.start_counting()
    assert {r["emulator_drops"] for r in faults.link_counters()} == {0}
    drops["n"] = 3
    assert [r["emulator_drops"] for r in faults.link_counters()] == [2 * n for n in before]
