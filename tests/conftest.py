"""What every test may name: REPO, the checkout under test (tests/ is a package, so its modules import as
``tests.…`` with the checkout on pytest's path)."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
