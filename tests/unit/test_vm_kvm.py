"""Which KVM boots the lab VM's Debian kernel: hardware KVM does; PVM (a nested hypervisor) does not."""
import os

import pytest

from mrclab import vm


@pytest.fixture
def dev_kvm(monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: path == "/dev/kvm")


@pytest.mark.parametrize("modules, problem", [
    (["kvm", "kvm_intel"], None),
    (["kvm", "kvm_amd"], None),
    (["kvm", "kvm_pvm", "kvm_amd"], None),
    (["kvm", "kvm_pvm"], "this machine's KVM is PVM"),
])
def test_only_hardware_kvm_boots_debian(tmp_path, dev_kvm, modules, problem):
    for name in modules:
        (tmp_path / name).mkdir()
    found = vm.kvm_problem(tmp_path)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


def test_no_dev_kvm_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    (tmp_path / "kvm_intel").mkdir()
    assert vm.kvm_problem(tmp_path) == "no /dev/kvm to use"
