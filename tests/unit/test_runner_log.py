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
logging.getLogger("mrclab.runner").warning("event 0 never fired")
handler.close()
"""


def test_runner_log_survives_mininets_logger_class(tmp_path):
    log = tmp_path / "runner.log"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], cwd=REPO, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "run abc: scenario x" in log.read_text() and "event 0 never fired" in log.read_text()
    assert result.stderr == ""  # the CLI prints warnings itself, once: the log goes to the file only
