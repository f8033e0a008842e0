"""`vagrant up` for real (`make vagrant-test`, not in CI: many minutes of CPU): the mrclab/bookworm box
(`mrclab vm box`) under libvirt. libvirtd, its bridge and the VM live in a network namespace this test
makes, on a management network without <forward>: the VM reaches nothing beyond it. `sudo make lab` in the
guest runs on the kernel OVS datapath, the smoke scenario runs through `--target vagrant`, `vagrant
provision` runs twice, and halt and destroy leave no domain, network, volume or namespace behind.
Timings are printed (-s) for docs/setup.md. A step this machine cannot take is a skip naming why."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrclab import box, vm
from mrclab.remote import target as target_mod
from tests.integration.test_run import check_schema

pytestmark = pytest.mark.skipif(os.environ.get("MRCLAB_VAGRANT_TEST") != "1",
                                reason="boots the Vagrant box (many minutes of CPU): run with `make vagrant-test`")

REPO = Path(__file__).resolve().parents[2]
VM_DIR = REPO / ".vm"
VAGRANT_HOME = VM_DIR / "vagrant-home"   # the test's own: the user's ~/.vagrant.d stays as it is
NS = f"mrclab-vagrant-{os.getpid()}"
NETWORK = "mrclab-isolated"              # the Vagrantfile's management network for the local box
VIRSH = ["virsh", "-c", "qemu:///system"]
TIMINGS: dict[str, float] = {}


def run(cmd, timeout=600, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def virsh_names(*what: str) -> set[str]:
    return set(run([*VIRSH, *what, "--name"]).stdout.split())


def volumes() -> set[str]:
    """pool/volume, from `virsh vol-list`'s table (a header, a rule, then one `name path` a line)."""
    return {f"{pool}/{line.split()[0]}" for pool in virsh_names("pool-list", "--all")
            for line in run([*VIRSH, "vol-list", pool]).stdout.splitlines()[2:] if line.strip()}


def kvm_runs_a_guest() -> bool:
    """A KVM guest's kernel gets as far as printing its banner (some nested set-ups start the domain but
    never run the guest: `vm.kvm_problem` names the one it knows)."""
    if vm.kvm_problem() is not None or not (VM_DIR / "vmlinuz").exists():
        return False
    try:
        out = run(["qemu-system-x86_64", "-accel", "kvm", "-m", "256", "-nodefaults", "-display", "none",
                   "-no-reboot", "-kernel", str(VM_DIR / "vmlinuz"), "-append", "console=ttyS0 panic=-1",
                   "-serial", "stdio"], timeout=20).stdout
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
    return "Linux version" in out


class Lab:
    """Runs vagrant and mrclab in the test's namespace, with the test's VAGRANT_HOME."""

    def __init__(self, driver: str, before: dict[str, set[str]]):
        self.before = before    # libvirt's domains, networks, pools and volumes before the test
        self.env = {**os.environ, "VAGRANT_HOME": str(VAGRANT_HOME), "MRCLAB_LIBVIRT_DRIVER": driver}
        for name in ("MRCLAB_REMOTE_COMMAND", "MRCLAB_REMOTE_DIR"):
            self.env.pop(name, None)
        self.driver = driver

    def __call__(self, *cmd: str, timeout: float = 1800, step: str | None = None):
        t0 = time.monotonic()
        result = run(["ip", "netns", "exec", NS, *cmd], timeout=timeout, cwd=REPO, env=self.env)
        if step:
            TIMINGS[step] = round(time.monotonic() - t0, 1)
        return result

    def vagrant(self, *args: str, **kwargs):
        return self("vagrant", *args, **kwargs)


def tail(result) -> str:
    return "\n".join((result.stdout + result.stderr).replace("\r", "\n").splitlines()[-25:])


def _start_daemon(name: str) -> int:
    result = run(["ip", "netns", "exec", NS, name, "-d"], timeout=30)
    pidfile = Path(f"/run/{name}.pid")
    for _ in range(50):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.1)
    if result.returncode != 0 or not pidfile.exists():
        pytest.skip(f"{name} does not start here: {tail(result) or 'no pid file'}")
    return int(pidfile.read_text())


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _preconditions() -> None:
    """Skip, naming why, where this machine cannot run the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root (libvirtd, a network namespace)")
    missing = [t for t in ("vagrant", "virsh", "libvirtd", "virtlogd", "qemu-system-x86_64", "rsync")
               if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (fix: make vagrant-setup)")
    if not box.BOX_FILE.exists():
        pytest.skip(f"no box at {box.BOX_FILE}: `mrclab vm box` makes it (make vagrant-test does)")
    if run([*VIRSH, "version"]).returncode == 0:
        pytest.skip("a libvirtd already runs here: this test starts its own, in a network namespace")


def _remove_what_the_test_made(before: dict[str, set[str]]) -> None:
    """The domain (through vagrant), then volumes, networks and pools that were not there before."""
    if (REPO / ".vagrant/machines/default/libvirt/id").exists():
        Lab("qemu", before).vagrant("destroy", "-f", timeout=600)
    for volume in volumes() - before["volumes"]:
        pool, name = volume.split("/", 1)
        run([*VIRSH, "vol-delete", "--pool", pool, name])
    for network in virsh_names("net-list", "--all") - before["networks"]:
        run([*VIRSH, "net-destroy", network])
        run([*VIRSH, "net-undefine", network])
    for pool in virsh_names("pool-list", "--all") - before["pools"]:
        run([*VIRSH, "pool-destroy", pool])
        run([*VIRSH, "pool-undefine", pool])


@pytest.fixture(scope="module")
def lab():
    _preconditions()
    if run(["ip", "netns", "add", NS]).returncode != 0:
        pytest.skip(f"cannot make the network namespace {NS}")
    started: list[int] = []
    before: dict[str, set[str]] = {}
    try:
        run(["ip", "-n", NS, "link", "set", "lo", "up"])
        if not Path("/run/libvirt/virtlogd-sock").exists():
            started.append(_start_daemon("virtlogd"))
        started.append(_start_daemon("libvirtd"))
        for _ in range(50):
            if run([*VIRSH, "version"]).returncode == 0:
                break
            time.sleep(0.2)
        before = {"domains": virsh_names("list", "--all"), "networks": virsh_names("net-list", "--all"),
                  "pools": virsh_names("pool-list", "--all"), "volumes": volumes()}
        if NETWORK in before["networks"]:
            pytest.skip(f"a libvirt network {NETWORK} exists already: not this test's to use")
        driver = "kvm" if kvm_runs_a_guest() else "qemu"
        print(f"\nlibvirt driver: {driver}" + ("" if driver == "kvm" else
                                                  f" (TCG: {vm.kvm_problem() or 'KVM runs no guest kernel here'})"))
        lab = Lab(driver, before)
        added = lab.vagrant("box", "add", "--force", "--name", box.NAME, str(box.BOX_FILE), step="box_add_s")
        assert added.returncode == 0, tail(added)
        up = lab.vagrant("up", "--provider", "libvirt", timeout=3600, step="up_s")
        print(tail(up))
        assert up.returncode == 0, tail(up)
        yield lab
    finally:
        if before:
            _remove_what_the_test_made(before)
        for pid in reversed(started):
            _stop(pid)
        run(["ip", "netns", "delete", NS])
        print("timings:", json.dumps(TIMINGS))
        assert NS not in run(["ip", "netns", "list"]).stdout


def test_make_lab_in_the_guest_uses_the_kernel_datapath(lab):
    made = lab.vagrant("ssh", "-c", "cd /vagrant && sudo make lab", timeout=3600, step="make_lab_s")
    print(tail(made))
    found = lab.vagrant("ssh", "-c", 'cat "$(ls -dt /vagrant/results/*/ | head -1)results.json"')
    assert found.returncode == 0, tail(made)
    doc = json.loads(found.stdout)
    failed = [e["name"] for e in doc.get("expectations", []) if not e["ok"]]
    fidelity_ok = doc.get("fidelity", {}).get("ok")
    print("datapath:", doc["datapath"], doc["datapath_detail"], "| status:", doc["status"], "| fidelity ok:",
          fidelity_ok, "| failed expectations:", failed)
    assert doc["datapath"] == "ovs", doc["datapath"]
    if made.returncode != 0 and lab.driver == "qemu" and not fidelity_ok:
        why = next((line for line in reversed(made.stdout.splitlines() + made.stderr.splitlines())
                    if line.startswith("mrclab:")), f"expectations {failed} failed, fidelity NOT OK")
        pytest.skip(f"make lab exit 0: not under TCG (no KVM guest here): the lab ran on the kernel OVS datapath "
                    f"and ended {doc['status']}: {why}")
    assert made.returncode == 0 and doc["status"] == "completed", tail(made)


def test_smoke_through_target_vagrant(lab):
    config = lab.vagrant("ssh-config")
    vm = target_mod.from_ssh_config(config.stdout, "vagrant")
    known = VM_DIR / "vagrant-known_hosts"
    host_key = (VM_DIR / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    known.write_text(f"{vm.address} {' '.join(host_key)}\n")
    local = VM_DIR / "results" / f"vagrant-smoke-{time.time():.0f}"
    result = lab(sys.executable, "-m", "mrclab", "run", "scenarios/smoke.yaml", "--target", "vagrant",
                 "--known-hosts", str(known), "--out", str(local), "--json",
                 "--set", "expect.fidelity_ok=false", "--set", "expect.max_avoid_s=10s",
                 "--set", "expect.max_step_time_ratio=100", "--set", "duration_limit=600s",
                 timeout=3600, step="smoke_target_vagrant_s")
    print(result.stderr[-3000:])
    if result.returncode != 0 and lab.driver == "qemu":
        why = (result.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"--target vagrant under TCG (no KVM guest here) exited {result.returncode}: {why}")
    doc = json.loads(result.stdout)
    check_schema(doc)
    s = doc["summary"]
    print(json.dumps({"driver": lab.driver, "datapath": doc.get("datapath"), "duration_s": doc["duration_s"],
                      "step_time_s": s["step_time_s"], "fidelity": doc["fidelity"]}, indent=1, default=str))
    assert s["bytes"]["sent"] == s["bytes"]["delivered"] == s["bytes"]["verified"] == 24 * 4 * 256 * 1024
    assert (local / "results.json").is_file()


def test_provision_twice(lab):
    for n in (1, 2):
        again = lab.vagrant("provision", timeout=1800, step=f"provision_{n}_s")
        assert again.returncode == 0, tail(again)


def test_halt_then_destroy_leave_nothing(lab):
    domain = (REPO / ".vagrant/machines/default/libvirt/id").read_text().strip()
    name = run([*VIRSH, "domname", domain]).stdout.strip()
    halted = lab.vagrant("halt", timeout=600, step="halt_s")
    assert halted.returncode == 0, tail(halted)
    assert run([*VIRSH, "domstate", name]).stdout.strip() == "shut off"
    destroyed = lab.vagrant("destroy", "-f", timeout=600, step="destroy_s")
    assert destroyed.returncode == 0, tail(destroyed)
    assert name not in virsh_names("list", "--all")
    assert NETWORK not in virsh_names("net-list", "--all")
    # the base box's volume is Vagrant's cache, kept by destroy: the only volume left, and the fixture's to remove
    assert {v for v in volumes() if "_vagrant_box_image_" not in v} <= lab.before["volumes"], volumes()
