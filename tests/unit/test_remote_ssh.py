"""What a target's sshd must offer, tried against a real one on 127.0.0.1 (tests/sshd.py); no lab needed."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.sshd import SSHD, Sshd, mrclab, one_line_exit_3

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not SSHD.exists(),
                                reason="needs root and openssh-server (vagrant/provision.sh installs it)")


def test_a_target_without_sftp_is_refused_before_anything_is_written():
    root = Path(tempfile.mkdtemp(prefix="mrs"))
    server = Sshd(root, sftp=False)
    try:
        line = one_line_exit_3(mrclab(server, "remote", "setup", server.target),
                               "its sshd offers no SFTP subsystem")
        assert "Subsystem sftp internal-sftp" in line and "sshd_config" in line
        assert not (root / "remote").exists()  # nothing was created on the target
        assert "internal error" not in line
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
