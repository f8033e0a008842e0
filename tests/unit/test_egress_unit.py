"""Egress pieces that need neither root nor a kernel: compilation cache, HTB plan, check row, run state."""
from __future__ import annotations

import ctypes
import re
import shutil

import pytest

from mrclab import check
from mrclab.fabric import egress
from mrclab.runstate import RunState
from mrclab.transport.departures import NIC_BURST


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_program_compiles_once_per_source(tmp_path, monkeypatch):
    monkeypatch.setattr(egress, "CACHE_DIR", tmp_path)
    obj = egress.compiled_object()
    assert obj.parent == tmp_path and obj.read_bytes()[:4] == b"\x7fELF"
    mtime = obj.stat().st_mtime_ns
    assert egress.compiled_object() == obj and obj.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [obj.name]  # no temporary left behind


def test_config_struct_matches_the_c_layout():
    source = egress.SOURCE.read_text()
    fields = re.search(r"struct port_cfg \{(.*?)\};", source, re.S).group(1)
    assert [m for m in re.findall(r"\b(\w+)(?:\[\d+\])?;", fields)] == [f for f, _ in egress._Cfg._fields_]
    assert ctypes.sizeof(egress._Cfg) == 40
    for name in ("CSUM_CARRIER", "CSUM_FINAL", "CSUM_MAKE_FINAL"):
        assert re.search(rf"#define {name} {getattr(egress, name)}\b", source), name
    # the high-priority class's guaranteed rate and burst, as HTB is given them
    assert f"#define CTL_SHARE {egress._HTB_TRIMMED_SHARE}\n" in source and f"#define HTB_BURST {NIC_BURST}\n" in source
    stats = re.search(r"struct port_stats \{(.*?)\};", source, re.S).group(1)
    assert re.findall(r"(\w+)[,;]", stats) == list(egress.PortCounters._fields)
    assert f"#define MAX_PORTS {egress.MAX_PORTS}" in source


def test_htb_plan_keeps_the_parent_at_rate_and_trimmed_first():
    lines = egress.Egress._htb_classes("replace", "p0l0-eth1", 100_000_000, 9000)
    parent, trimmed, bulk = lines
    assert "classid 1:1 htb rate 100000000bit" in parent
    assert "classid 1:10" in trimmed and "prio 0" in trimmed and "ceil 100000000bit" in trimmed
    assert "classid 1:20" in bulk and "prio 1" in bulk and "ceil 100000000bit" in bulk
    rates = [int(re.search(r" rate (\d+)bit", line).group(1)) for line in (trimmed, bulk)]
    assert sum(rates) == 100_000_000  # guarantees never exceed the port


def test_check_row_without_root_states_the_consequence(monkeypatch):
    monkeypatch.setattr(check.os, "geteuid", lambda: 1000)
    row = check.ebpf()
    assert not row.ok and not row.required and row.name == "ebpf trimming"
    assert "tail drop" in row.detail and "blackhole" in row.detail


def test_runstate_records_only_its_own_mounts(tmp_path, monkeypatch):
    monkeypatch.setattr("mrclab.runstate.STATE_DIR", tmp_path)
    state = RunState.create("unit")
    try:
        with pytest.raises(ValueError):
            state.add_mount(str(tmp_path / "someone-else.bpf"))
        mount = tmp_path / f"{state.run_id}.bpf"
        mount.mkdir()
        state.add_mount(str(mount))
        assert RunState.load(state.path).mounts == [str(mount)]
        state.release_mount(str(mount))  # not mounted: only the directory goes
        assert not mount.exists() and RunState.load(state.path).mounts == []
    finally:
        state.teardown()


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_a_cached_program_others_could_have_written_is_not_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(egress, "CACHE_DIR", tmp_path)
    obj = egress.compiled_object()
    obj.chmod(0o666)
    with pytest.raises(egress.EnvironmentNotReady, match="not trusted"):
        egress.compiled_object()
    obj.unlink()
    planted = tmp_path / "planted.o"
    planted.write_bytes(b"\x7fELF")
    obj.symlink_to(planted)
    with pytest.raises(egress.EnvironmentNotReady, match="not a plain file"):
        egress.compiled_object()
    obj.unlink()
    tmp_path.chmod(0o777)
    with pytest.raises(egress.EnvironmentNotReady, match="not trusted"):
        egress.compiled_object()
    tmp_path.chmod(0o700)
