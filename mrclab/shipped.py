"""Where the shipped topologies, scenarios and traces live: a checkout's own folders, or the copies that an
installed package carries (setup.py puts them in ``mrclab/shipped/``), so `mrclab run smoke` works
with no checkout at all."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def folder(name: str) -> Path:
    """``topologies``, ``scenarios`` or ``traces``: the checkout's folder when there is one, else the package's copy."""
    checkout = PACKAGE.parent / name
    return checkout if checkout.is_dir() else PACKAGE / "shipped" / name
