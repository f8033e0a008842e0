import shutil
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("vagrant") is None, reason="vagrant is not installed on this machine")
def test_vagrantfile_validates():
    result = subprocess.run(["vagrant", "validate"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_vagrantfile_uses_the_shared_provisioner():
    text = (REPO / "Vagrantfile").read_text()
    assert "vagrant/provision.sh" in text and "debian/bookworm64" in text
    assert 'vb.cpus = 2' in text and 'vb.memory = 4096' in text
