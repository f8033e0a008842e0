"""`mrclab run --capture` on a real fabric: one pcapng per interface (host namespaces and the root
namespace), named by SPEC names, merged, decoded by the shipped dissector in tshark and by the scapy
layer, time-aligned with events.csv, and no capture process left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.all import rdpcap

from mrclab.transport import wire
from mrclab.transport.scapy_layer import MRC, MRCData
from tests.tshark import fields, undecodable

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

REPO = Path(__file__).resolve().parents[2]
ENDS = ["h0-p0l0", "p0l0-p0s1", "p0s1-p0l1", "p0l1-h2"]   # h0's plane-0 NIC up to p0s1 and down to h2


def test_smoke_run_with_capture(tmp_path, leftovers):
    out = tmp_path / "smoke"
    done = subprocess.run([sys.executable, "-m", "mrclab", "run", "scenarios/smoke.yaml", "--out", str(out), "--json",
                           "--capture", ",".join(ENDS), "--set", "workload.steps=10", "--set", "expect={}",
                           "--set", "events=[{at_step: 4, action: link_down, target: p0l0-p0s1}]"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["summary"]["messages"]["failed"] == 0
    folder = out / "capture"
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{name}.pcapng" for name in ENDS] + ["all.pcapng"])
    cap = doc["capture"]
    assert cap["interfaces"] == 4 and cap["packets"] > 0 and cap["packets_kept"] == "headers"
    assert any(note.startswith("packet capture was on (links: 4 interfaces, headers only") for note in
               doc["fidelity"]["notes"])
    merged = folder / "all.pcapng"
    assert undecodable(merged) == []
    rows = fields(merged, ["frame.interface_name", "frame.time_epoch", "frame.len", "frame.cap_len", "mrc.type",
                           "mrc.conn", "mrc.psn", "mrc.path.plane", "mrc.path.spine", "mrc.flags.retx"])
    assert {row[0] for row in rows} == set(ENDS)
    data = [row for row in rows if row[4] == str(wire.DATA)]
    assert data and {row[4] for row in rows} >= {str(wire.DATA), str(wire.SACK), str(wire.PROBE), str(wire.PROBE_REPLY)}
    # headers only: a full-size DATA frame is cut after its MRC header
    assert all(int(row[3]) <= 128 for row in rows) and max(int(row[2]) for row in data) > 1000
    # every packet on these interfaces is on plane 0; h0's NIC carries paths through both spines, while a
    # packet on a cable of p0s1 that still carries a spine's uSID names p0s1
    assert {row[7] for row in rows} == {"0"}
    assert {row[8] for row in rows if row[0] == "h0-p0l0"} >= {"0", "1"}
    assert {row[8] for row in rows if row[0] in ("p0l0-p0s1", "p0s1-p0l1")} == {"1", ""}
    # time-aligned with events.csv: DATA flows from t=0 to the end of the workload
    times = [float(row[1]) - cap["t0_epoch_s"] for row in data]
    assert -0.01 <= min(times) < 1.0 and max(times) <= doc["duration_s"] + 0.01
    # p0l0-p0s1 was cut at step 4: nothing crosses it after the cut (+ one in-flight packet's worth)
    [cut] = [e["t_s"] for e in doc["events"] if e["action"] == "link_down"]
    late = [t for row, t in zip(data, times, strict=True) if row[0] == "p0l0-p0s1" and t > cut + 0.05]
    assert late == []
    # the scapy layer reads the same capture the same way
    packets = rdpcap(str(folder / "h0-p0l0.pcapng"))
    scapy_data = [(p[MRCData].conn_id, p[MRCData].psn) for p in packets if MRC in p and p[MRC].type == wire.DATA]
    tshark_data = [(int(r[5]), int(r[6])) for r in data if r[0] == "h0-p0l0"]
    assert scapy_data == tshark_data
    # every capture process is gone, and so is the rest of the run
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and str(out) in _cmdline(pid)]
    assert leftovers(f"m{doc['run_id']}") == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


SEND_TRIMMED = """
from scapy.all import IPv6, UDP
from scapy.supersocket import L3RawSocket6
from mrclab.transport.scapy_layer import MRC, MRCData, usid_destination

# h0 (under leaf 0) to h3 (under leaf 1) on plane 0, through spine 1
dst = usid_destination(plane=0, leaf=1, spine=1, host=3, first_leaf=0)
pkt = (IPv6(src="fcbb:0:4000::", dst=dst) / UDP()
       / MRC(flags="TRIMMED") / MRCData(conn_id=(0 << 16) | 3, psn=123456, msg_id=99, msg_len=8192,
                                        offset=0, length=8192, ev=8))
L3RawSocket6().send(pkt)  # the kernel routes it, as it routes the agents' packets
"""


def test_crafted_trimmed_packet_from_a_host_namespace(tmp_path, leftovers):
    """docs/packets.md's example: scapy in h0's namespace sends a trimmed DATA header along a uSID path; a
    Recording started on the fabric (host namespaces, and switch ports wherever the datapath keeps them) sees it
    at every hop."""
    from mrclab.capture import Recording
    from mrclab.fabric.net import Fabric
    from mrclab.spec import Capture, topology

    with Fabric(topology.load("clos-2p-2l-2s")) as fabric:
        prefix, processes = fabric.state.prefix, fabric.state.processes
        assert fabric.netns_pid("h0") == fabric.host("h0").pid
        own = None if fabric.datapath.name == "ovs" else fabric.switches.netns_pid("p0l0")
        assert fabric.netns_pid("p0l0") == own
        recording = Recording(Capture(("h0-p0l0", "p0l0-p0s1", "h3-p0l1")), fabric, fabric.state, tmp_path)
        recording.start()
        sent = subprocess.run(["nsenter", f"--net=/proc/{fabric.netns_pid('h0')}/ns/net", sys.executable, "-c",
                               SEND_TRIMMED], capture_output=True, text=True, timeout=60, check=False)
        assert sent.returncode == 0, sent.stderr
        counts = recording.stop()
        merged = recording.finish()
    assert counts["interfaces"] == 3 and counts["dropped"] == 0
    rows = fields(merged, ["frame.interface_name", "mrc.path", "mrc.flags.trimmed", "mrc.length", "_ws.col.Info"],
                  "mrc && !icmpv6")  # h3 has no agent listening: it answers port unreachable, quoting the packet
    # one packet, three hops: the uSIDs shift out on the way, the trimmed header keeps the original length
    assert rows == [["h0-p0l0", "p0 l0 s1 l1 h3", "1", "8192", "DATA conn 3 psn 123456 ev 8 p0 s1 TRIMMED"],
                    ["p0l0-p0s1", "p0 s1 l1 h3", "1", "8192", "DATA conn 3 psn 123456 ev 8 p0 s1 TRIMMED"],
                    ["h3-p0l1", "p0 h3", "1", "8192", "DATA conn 3 psn 123456 ev 8 p0 TRIMMED"]]
    # the kernel sent it to its permanent gateway neighbour: no neighbour solicitation, no broadcast frame
    assert fields(merged, ["frame.number"], "icmpv6.type == 135 || eth.dst == ff:ff:ff:ff:ff:ff") == []
    assert leftovers(prefix, processes) == []
