"""Slurm backends behind one interface (`base.SlurmClient`); `get_client` picks one by name.

The interface's names are loaded on first use (PEP 562): msub imports `msched.slurm.feature_expr` on
every submission and must not pay for the client interface.
"""

from __future__ import annotations

BACKENDS = ("auto", "cli", "pyslurm")
_INTERFACE = ("JobNotPending", "JobRequest", "JobUpdate", "SlurmClient", "SlurmError", "SlurmJob", "SlurmNode",
              "SlurmUnavailable", "UpdateResult")


def __getattr__(name: str):  # noqa: ANN202
    if name in _INTERFACE:
        from msched.slurm import base
        return getattr(base, name)
    raise AttributeError(f"module 'msched.slurm' has no attribute {name!r}")


def get_client(backend: str = "auto", **kwargs):  # noqa: ANN201 - a base.SlurmClient
    """`auto` takes pyslurm where it imports and falls back to the command-line backend."""
    from msched.slurm.base import SlurmError
    if backend not in BACKENDS:
        raise ValueError(f"unknown Slurm backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in ("auto", "pyslurm"):
        try:
            from msched.slurm.pyslurm_backend import PyslurmClient
            return PyslurmClient(**kwargs)
        except ImportError:
            if backend == "pyslurm":
                raise SlurmError("the pyslurm backend was asked for but pyslurm does not import here") from None
    from msched.slurm.cli import CliClient
    return CliClient(**kwargs)


__all__ = ["BACKENDS", "get_client", *_INTERFACE]
