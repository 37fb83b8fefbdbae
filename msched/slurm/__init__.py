"""Slurm backends behind one interface (`base.SlurmClient`); `get_client` picks one by name."""

from __future__ import annotations

from msched.slurm.base import (  # noqa: F401
    JobNotPending,
    JobRequest,
    JobUpdate,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
    UpdateResult,
)

BACKENDS = ("auto", "cli", "pyslurm")


def get_client(backend: str = "auto", **kwargs) -> SlurmClient:
    """`auto` takes pyslurm where it imports and falls back to the command-line backend."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown Slurm backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in ("auto", "pyslurm"):
        try:
            from msched.slurm.pyslurm_backend import PyslurmClient
            return PyslurmClient(**kwargs)
        except ImportError:
            if backend == "pyslurm":
                raise SlurmError("the pyslurm backend was asked for but pyslurm does not import here") from None
    from msched.slurm.cli_backend import CliClient
    return CliClient(**kwargs)
