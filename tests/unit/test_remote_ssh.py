"""What a target's sshd must offer, tried against a real one on 127.0.0.1 (tests/sshd.py); no lab needed."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
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


def test_paramiko_logs_nothing_on_stderr_even_after_mininet_is_imported():
    """A reset connection is an error paramiko logs: mrclab says what it means in its own one line, and Mininet's
    logger class (a console handler on every logger made after it) does not put paramiko's words in front of it."""
    root = Path(tempfile.mkdtemp(prefix="mrs"))
    server = Sshd(root)
    code = ("import sys, mininet.log; from mrclab.remote import ssh, target; "
            f"conn = ssh.Connection(target.parse({server.target!r}), identity={str(root / 'client')!r}, "
            f"known_hosts={str(server.known_hosts)!r}, say=print); "
            "conn.client.get_transport().logger.error('Socket exception: Connection reset by peer (104)'); "
            "conn.close(); print('mrclab: the line', file=sys.stderr)")
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0 and done.stderr == "mrclab: the line\n", done.stderr
