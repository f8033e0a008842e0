"""`mrclab topo verify --servers local,root@[fdcc::2]:PORT`, for real: the runner runs in server 0's namespace
("local", this machine), server 1 is another namespace whose own sshd listens on its underlay address only; the
runner reaches it over SSH (known host, key only), starts its share there with `mrclab cluster-server`, and every
path of the fabric, crossing ones included, is proven from both servers' hosts. An unknown host key and an
underlay too small for the fabric's frames inside VXLAN are each one line (exit 3), and `mrclab check --servers`
names the underlay that is too small. Nothing is left on either."""
from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import time

import pytest

from mrclab import build
from mrclab.cluster.tunnel import underlay_mtu
from mrclab.runstate import STATE_DIR
from mrclab.spec import topology
from tests.cluster_servers import NamespaceServers, sh
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab")]

TOPO = topology.load("clos-2p-2l-2s")


def check(servers: NamespaceServers, env: dict, target: str) -> dict[str, bool]:
    """`mrclab check --servers` from server 0: its server rows, by name."""
    done = subprocess.run([*servers.enter(0), sys.executable, "-m", "mrclab", "check", "--servers",
                           f"local,{target}", "--topology", TOPO.name, "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    rows = {r["name"]: r["ok"] for r in json.loads(done.stdout)["rows"] if r["name"].startswith("server ")}
    assert done.returncode == (0 if all(rows.values()) else 3), done.stderr
    return rows


def test_topo_verify_over_two_servers_reached_by_ssh(tmp_path, leftovers):
    servers = NamespaceServers(TOPO.mtu)
    try:
        sshd = servers.sshd(1, tmp_path / "sshd")
        env = servers.runner_env(tmp_path / "home")
        argv = [*servers.enter(0), sys.executable, "-m", "mrclab", "topo", "verify", TOPO.name, "--servers",
                f"local,{sshd.target}", "--json"]
        stranger = {**env, "HOME": str(tmp_path / "stranger")}  # server 1's host key is unknown there
        refused = subprocess.run(argv, cwd=REPO, env=stranger, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 3 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert sshd.target in refused.stderr and "Traceback" not in refused.stderr
        u = servers.underlays[1]
        sh("ip", "-n", servers.names[1], "link", "set", u.device, "mtu", "1500")  # too small for 9000 in VXLAN
        small = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert small.returncode == 3 and len(small.stderr.strip().splitlines()) == 1, small.stderr
        assert "has MTU 1500" in small.stderr and f"mtu {underlay_mtu(TOPO.mtu, 6)}" in small.stderr
        assert check(servers, env, sshd.target) == {"server local": True, f"server {sshd.target}": True,
                                                    "server local underlay": True,
                                                    f"server {sshd.target} underlay": False}
        sh("ip", "-n", servers.names[1], "link", "set", u.device, "mtu", str(underlay_mtu(TOPO.mtu, 6)))
        assert all(check(servers, env, sshd.target).values())
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        doc = json.loads(done.stdout)
        assert doc["ok"] and doc["paths"] == doc["ok_paths"] == TOPO.hosts * (TOPO.hosts - 1) * TOPO.planes * \
            TOPO.spines
        assert [s["server"] for s in doc["servers"]] == ["local", sshd.target]
        assert all(s["hosts"] and s["switches"] for s in doc["servers"])
        local, remote = doc["servers"]
        for when in ("start", "end"):  # local is the runner's own clock; server 1 is read over the underlay, and
            assert local["clock"][when] == {"offset_s": 0.0, "uncertainty_s": 0.0}  # with one kernel, one clock,
            clock = remote["clock"][when]  # its offset is within its own uncertainty of 0
            assert 0 < clock["uncertainty_s"] < 1e-3 and abs(clock["offset_s"]) <= clock["uncertainty_s"], remote
        assert "2 servers" in doc["datapath_detail"]
        for s in doc["servers"]:
            assert leftovers(f"m{s['run_id']}") == []
    finally:
        servers.close()
    assert leftovers(servers.state.prefix, servers.state.processes) == []


def test_a_server_on_another_build_than_the_runner_is_named(tmp_path):
    """Every host of a lab over servers costs the same per packet: a server on another transport build than the
    runner fails its row of `mrclab check --servers`, which names both builds and the fix."""
    if build.running()["build"] != "compiled":
        pytest.skip("this mrclab runs the pure build: a server's pure build is the same")
    servers = NamespaceServers(TOPO.mtu)
    try:
        sshd = servers.sshd(1, tmp_path / "sshd")
        env = servers.runner_env(tmp_path / "home")
        command = shlex.split(env["MRCLAB_REMOTE_COMMAND"])
        env["MRCLAB_REMOTE_COMMAND"] = shlex.join(["env", "MRCLAB_PURE=1", *command[1:]])
        done = subprocess.run([*servers.enter(0), sys.executable, "-m", "mrclab", "check", "--servers",
                               f"local,{sshd.target}", "--topology", TOPO.name, "--json"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 3, done.stderr
        row = next(r for r in json.loads(done.stdout)["rows"] if r["name"] == f"server {sshd.target}")
        assert not row["ok"] and "runs the pure transport build (MRCLAB_PURE=1)" in row["detail"], row
        assert "the compiled one" in row["detail"] and "make build" in row["detail"], row
    finally:
        servers.close()


def test_a_runner_killed_mid_build_leaves_nothing_on_either_server(tmp_path, leftovers):
    """SIGKILL the runner while both shares build: the local share gets SIGTERM from its lifeline, the remote one
    loses its SSH session (EOF); each tears its share down, and within 15 s nothing of either is left."""
    servers = NamespaceServers(TOPO.mtu)
    try:
        sshd = servers.sshd(1, tmp_path / "sshd")
        env = servers.runner_env(tmp_path / "home")
        since = time.time()
        runner = subprocess.Popen([*servers.enter(0), sys.executable, "-m", "mrclab", "topo", "verify",
                                   "clos-4p-4l-4s", "--servers", f"local,{sshd.target}", "--json"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def shares() -> dict[str, dict]:
            """The shares' run records (as root, every mrclab records in /run/mrclab), of this test's time."""
            found = {}
            for path in STATE_DIR.glob("*.json"):
                with contextlib.suppress(OSError, ValueError):
                    doc = json.loads(path.read_text())
                    if doc.get("purpose") == "fabric clos-4p-4l-4s" and doc.get("created_at", 0) >= since:
                        found[doc["run_id"]] = doc
            return found

        records: dict[str, list] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and runner.poll() is None and \
                not (len(records) == 2 and all(len(p) > 8 for p in records.values())):  # both well into the build
            records.update({run_id: doc["processes"] for run_id, doc in shares().items()})
            time.sleep(0.02)
        assert runner.poll() is None and len(records) == 2, runner.stderr.read() if runner.stderr else ""
        runner.kill()
        runner.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and set(shares()) & set(records):
            time.sleep(0.2)
        assert not set(shares()) & set(records), "a share is left"
        assert not [p for run_id in records for p in STATE_DIR.glob(f"{run_id}*")], "a share left files"
        for run_id, processes in records.items():
            assert leftovers(f"m{run_id}", processes) == []
    finally:
        servers.close()
    assert leftovers(servers.state.prefix, servers.state.processes) == []
