"""CPU per delivered MiB: read from /proc for real processes, divided by what was delivered."""
import subprocess
import sys

from mrclab.metrics.cost import MIB, CpuMeter
from mrclab.report.summary import cpu_text


def test_meter_counts_the_cpu_a_process_burns_between_start_and_stop():
    program = ("import sys, time\nsys.stdin.readline()\n"
               "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
               "print('done', flush=True)\nsys.stdin.readline()")
    spin = subprocess.Popen([sys.executable, "-c", program],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    idle = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    try:
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
    assert cpu_text(cost).startswith(f"{cost['agents']:.4f} / {cost['lab']:.4f} (costliest agent h0")


def test_nothing_delivered_gives_no_ratio():
    meter = CpuMeter({})
    meter.start()
    meter.stop()
    assert meter.per_mib(0)["agents"] is None
    assert cpu_text(meter.per_mib(0)) == "-" and cpu_text(None) == "-"
