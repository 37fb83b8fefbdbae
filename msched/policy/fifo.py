"""`fifo`: Slurm's default. Submit order, untyped GPU requests take whatever type frees first."""

from __future__ import annotations

from msched.policy.base import Policy


class FifoPolicy(Policy):
    """No constraint at submit, no rounds: the plan leaves priorities and types as Slurm holds them."""

    name = "fifo"
    replans = False
