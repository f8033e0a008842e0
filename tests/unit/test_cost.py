"""CPU per delivered MiB: read from /proc for real processes, divided by what was delivered."""
import subprocess
import sys

from mrclab.metrics.cost import MIB, CpuMeter
from mrclab.report.summary import cpu_text


def test_meter_counts_the_cpu_a_process_burns_between_start_and_stop():
    program = ("import sys, time\nprint('ready', flush=True)\nsys.stdin.readline()\n"
               "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
               "print('done', flush=True)\nsys.stdin.readline()")
    spin = subprocess.Popen([sys.executable, "-c", program],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.readline()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for proc in (spin, idle):  # the interpreters' own start-up is not the meter's to count
            assert proc.stdout.readline() == "ready\n"
        meter = CpuMeter({spin.pid: "agent h0", idle.pid: "agent h1", 999_999_999: "ovs-vswitchd"})
        meter.start()
        spin.stdin.write("go\n")
        spin.stdin.flush()
        assert spin.stdout.readline() == "done\n"
        used = meter.stop()
    finally:
        for proc in (spin, idle):
            proc.kill()
            proc.wait()
    assert 0.25 <= used["agent h0"] <= 1.0
    assert used["agent h1"] < 0.05
    assert "ovs-vswitchd" not in used  # no such process: nothing made up
    cost = meter.per_mib(10 * MIB)
    assert cost["agents"] == round((used["agent h0"] + used["agent h1"]) / 10, 5)
    assert cost["hosts"]["h0"] == round(used["agent h0"] / 10, 5)
    assert cost["delivered_mib"] == 10
    assert cpu_text(cost).startswith(f"{cost['agents']:.4f} / {cost['lab']:.4f}, agents less softirq ")
    assert "(costliest agent h0" in cpu_text(cost)


def test_nothing_delivered_gives_no_ratio():
    meter = CpuMeter({})
    meter.start()
    meter.stop()
    assert meter.per_mib(0)["agents"] is None
    assert cpu_text(meter.per_mib(0)) == "-" and cpu_text(None) == "-"


def test_softirq_charged_to_the_agents_is_taken_from_them_as_a_bound():
    meter = CpuMeter({})
    meter.used = {"agent h0": 3.0, "agent h1": 1.0, "ksoftirqd/0": 0.5, "runner": 0.2}
    meter.softirq = 2.5  # 0.5 of it is ksoftirqd's own: at most 2.0 was charged to the agents
    cost = meter.per_mib(100 * MIB)
    assert cost["agents"] == 0.04 and cost["softirq"] == 0.025
    assert cost["agents_less_softirq"] == 0.02
    meter.softirq = 9.0  # more than the agents used (softirq served while CPUs idled): never below zero
    assert meter.per_mib(100 * MIB)["agents_less_softirq"] == 0.0
    assert "agents less softirq 0.0000" in cpu_text(meter.per_mib(100 * MIB))


def test_softirq_seconds_come_from_the_machine_wide_counter():
    from mrclab.metrics.cost import softirq_s
    first = softirq_s()
    assert first > 0 and softirq_s() >= first


def test_agent_wakeups_are_their_voluntary_sleeps_between_start_and_stop():
    program = ("import sys, time\nsys.stdin.readline()\nfor _ in range(40): time.sleep(0.002)\n"
               "print('done', flush=True)\nsys.stdin.readline()")
    procs = [subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        meter = CpuMeter({procs[0].pid: "agent h0", procs[1].pid: "runner"})
        meter.start()
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        assert all(proc.stdout.readline() == "done\n" for proc in procs)
        meter.stop()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert 40 <= meter.agent_wakeups <= 60  # the agent's sleeps and its wait for "go"; not the runner's
    cost = meter.per_mib(4 * MIB)
    assert cost["wakeups_per_mib"] == round(meter.agent_wakeups / 4, 1)
    assert cpu_text(cost).endswith(f"; the agents woke {cost['wakeups_per_mib']:.0f} times per MiB")
