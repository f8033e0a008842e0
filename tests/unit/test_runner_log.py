"""runner.log keeps the run's INFO lines even when Mininet was imported first (its logger class
gives every logger created afterwards a level of its own)."""
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = """
import logging, sys
from pathlib import Path
import mininet.log  # installs MininetLogger as the logger class, as building a fabric does
from mrclab import runner
handler = runner._logger(Path(sys.argv[1]))
logging.getLogger("mrclab.runner").info("run abc: scenario x")
handler.close()
"""


def test_runner_log_survives_mininets_logger_class(tmp_path):
    log = tmp_path / "runner.log"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], cwd=REPO, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "run abc: scenario x" in log.read_text()


def test_a_warning_goes_to_runner_log_once_and_not_to_the_console(tmp_path):
    log = tmp_path / "runner.log"
    script = SCRIPT.replace('.info("run abc: scenario x")', '.warning("event 0 never fired")')
    result = subprocess.run([sys.executable, "-c", script, str(log)], cwd=REPO, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert log.read_text().count("event 0 never fired") == 1
    assert "never fired" not in result.stderr + result.stdout
