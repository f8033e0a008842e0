"""The congestion controls a sender can run, one row each (as aioquic's congestion registry).

Adding one is a module with a :class:`CongestionControl` subclass, built from the
:class:`~mrclab.transport.config.TransportConfig`, plus its row here; ``cc_algorithm`` names it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .base import CongestionControl
from .dcqcn import Dcqcn
from .nscc import Nscc

if TYPE_CHECKING:  # a type only: config imports this package to check cc_algorithm
    from ..config import TransportConfig

CONGESTION_CONTROLS: dict[str, type[CongestionControl]] = {
    "nscc": Nscc,
    "dcqcn": Dcqcn,
}


def create(config: TransportConfig) -> CongestionControl:
    """The control ``config.cc_algorithm`` names, for one connection."""
    return CONGESTION_CONTROLS[config.cc_algorithm](config)


__all__ = ["CONGESTION_CONTROLS", "CongestionControl", "create"]
