"""Collectives as a training job runs them: steps separated by a barrier, each step a set of transfers."""
from .patterns import Transfer, ideal_step_seconds, step_transfers

__all__ = ["Transfer", "ideal_step_seconds", "step_transfers"]
