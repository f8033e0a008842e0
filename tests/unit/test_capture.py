"""Capture selection (the scenario key and `--capture`), which interfaces each choice records, and the
pcapng post-processing: interfaces renamed to SPEC names, files merged in time order (real mergecap)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scapy.all import UDP, Ether, IPv6, wrpcapng

from mrclab import capture
from mrclab.errors import UsageError
from mrclab.spec import Capture
from mrclab.spec import scenario as scenario_mod
from mrclab.transport import wire
from tests.tshark import fields

REPO = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "topology": "clos-2p-2l-2s", "workload": {"pattern": "ring-allreduce", "steps": 4}}


def load(tmp_path, capture_value=None, overrides=()):
    data = dict(BASE) if capture_value is None else {**BASE, "capture": capture_value}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return scenario_mod.load(path, list(overrides))


@pytest.mark.parametrize("value, interfaces, packets", [
    (None, "off", "headers"),
    ("hosts", "hosts", "headers"),
    (False, "off", "headers"),                                      # a bare `off` in YAML
    ({"interfaces": "all", "packets": "full"}, "all", "full"),
    ("h0-p0l0, p0l0-p0s1", ("h0-p0l0", "p0l0-p0s1"), "headers"),
    ({"interfaces": ["p0s1-p0l0", "p0s1-p0l0"]}, ("p0s1-p0l0",), "headers"),
])
def test_scenario_key(tmp_path, value, interfaces, packets):
    s = load(tmp_path, value)
    assert s.capture == Capture(interfaces, packets)
    assert s.capture.on == (interfaces != "off")
    again = scenario_mod.from_mapping(s.to_dict(), "resolved")
    assert again.capture == s.capture


def test_cli_overrides_reach_the_shorthand(tmp_path):
    s = load(tmp_path, "hosts", ["capture.interfaces=switches", "capture.packets=full"])
    assert s.capture == Capture("switches", "full")


@pytest.mark.parametrize("value, fragment", [
    ("h0-p1l1", "capture.interfaces: no link 'h0-p1l1'"),
    ({"interfaces": []}, "capture.interfaces: expected one of off, hosts, switches, all"),
    ({"interfaces": "hosts", "packets": "some"}, "capture.packets: 'some' is not one of: headers, full"),
    ({"interfaces": "hosts", "snap": 9}, "capture.snap: unknown key"),
])
def test_bad_capture_names_the_key(tmp_path, value, fragment):
    with pytest.raises(UsageError) as info:
        load(tmp_path, value)
    assert fragment in str(info.value)


def test_bad_capture_on_the_command_line_exits_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mrclab", "run", str(REPO / "scenarios/smoke.yaml"),
                           "--capture", "p9l0-p9s0"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "capture.interfaces: no link 'p9l0-p9s0'" in done.stderr
    assert "Traceback" not in done.stderr


def test_which_interfaces(tmp_path):
    topo = load(tmp_path).topology  # 2 planes x (2 leaves + 2 spines), 4 hosts
    hosts = capture.ends(topo, Capture("hosts"))
    switches = capture.ends(topo, Capture("switches"))
    assert len(hosts) == 4 * 2 and ("h0", "p0l0") in hosts and ("h3", "p1l1") in hosts
    assert len(switches) == 4 * 2 + 2 * 2 * 2 * 2 and ("p0l0", "h0") in switches and ("p0s1", "p0l0") in switches
    assert capture.ends(topo, Capture("all")) == hosts + switches
    assert capture.ends(topo, Capture("off")) == []
    assert capture.ends(topo, Capture(("p0s1-p0l0", "h2-p1l1"))) == [("p0s1", "p0l0"), ("h2", "p1l1")]


def _pcapng(path, t0: float, psns) -> None:
    frames = []
    for i, psn in enumerate(psns):
        pkt = (Ether() / IPv6(src="fcbb:0:4000::", dst="fcbb:0:4001::") / UDP(sport=4793, dport=4793)
               / bytes(wire.encode_probe(3, psn, psn, 1)))
        pkt.time = t0 + i
        frames.append(pkt)
    wrpcapng(str(path), frames)


def test_rename_and_merge(tmp_path):
    folder = tmp_path / "capture"
    folder.mkdir()
    _pcapng(folder / "h0-p0l0.pcapng", 100.0, [0, 2])
    _pcapng(folder / "p0l0-h0.pcapng", 100.5, [1, 3])
    capture.rename_interface(folder / "h0-p0l0.pcapng", "h0-p0l0", "mab1h0-p0 (headers)")
    capture.rename_interface(folder / "p0l0-h0.pcapng", "p0l0-h0", "mab1p0l0-h0 (headers)")
    merged = capture.merge(tmp_path)
    assert merged == folder / "all.pcapng"
    rows = fields(merged, ["frame.interface_name", "frame.interface_description", "mrc.ev"])
    assert rows == [["h0-p0l0", "mab1h0-p0 (headers)", "0"], ["p0l0-h0", "mab1p0l0-h0 (headers)", "1"],
                    ["h0-p0l0", "mab1h0-p0 (headers)", "2"], ["p0l0-h0", "mab1p0l0-h0 (headers)", "3"]]
    # merging again replaces all.pcapng and never reads it as an input
    assert len(fields(capture.merge(tmp_path), ["mrc.ev"])) == 4


def test_merge_without_captures_exits_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mrclab", "capture", "merge", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no per-interface pcapng files" in done.stderr


def test_wireshark_command_points_at_the_shipped_dissector():
    done = subprocess.run([sys.executable, "-m", "mrclab", "wireshark"], capture_output=True, text=True, check=False)
    path = subprocess.run([sys.executable, "-m", "mrclab", "wireshark", "--path"], capture_output=True,
                          text=True, check=False).stdout.strip()
    assert done.returncode == 0 and path.endswith("mrclab/wireshark/mrc.lua")
    assert f"-X lua_script:{path}" in done.stdout and "~/.local/lib/wireshark/plugins" in done.stdout
    assert 'Proto("mrc"' in Path(path).read_text()
