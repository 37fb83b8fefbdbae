"""Helpers shared by the tests: bounded waiting, running commands as another user, job cleanup.

Why here and not in conftest.py: test modules import these directly (`from tests.helpers import ...`
or `from helpers import ...`), while fixtures stay in conftest.py.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent          # the venv running pytest (msub, msched live here)
# a small copy of ../shared/data (tests/data/shared_sample/README.md): tests read it, never ../shared
SHARED_SAMPLE = REPO / "tests" / "data" / "shared_sample"
T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited and the last value seen."""


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, interval: float = 0.05,
             message: str = "condition") -> T:
    """Poll `predicate` until it returns something truthy, at most `timeout` seconds.

    Returns that value. Tests never sleep a fixed time: a bounded poll is both faster and less flaky.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message} (last value: {last!r})")
        time.sleep(interval)


def user_env(user: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment for `user`: venv bin first on PATH, SLURM_CONF/MSCHED_* carried over."""
    pw = pwd.getpwnam(user)
    env = {
        "HOME": pw.pw_dir,
        "USER": user,
        "LOGNAME": user,
        "SHELL": pw.pw_shell or "/bin/sh",
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    for key, value in os.environ.items():
        if key in ("SLURM_CONF", "TZ") or key.startswith("MSCHED_"):
            env[key] = value
    env.pop("MSCHED_REQUIRE_SLURM", None)
    if extra:
        env.update(extra)
    return env


def run_as(user: str | None, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
           cwd: str | os.PathLike | None = None, input: str | None = None, timeout: float = 120.0,
           check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run argv (a list, never a shell string) as `user` through `runuser`, or as ourselves when None.

    The child gets exactly `user_env(user, env)` (nothing leaks from the test process but SLURM_CONF
    and MSCHED_*), and runs in the user's home unless `cwd` is given (sbatch writes slurm-N.out there).
    """
    if user is None or user == pwd.getpwuid(os.geteuid()).pw_name:
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        cmd = list(argv)
    else:
        full_env = user_env(user, env)
        cmd = ["runuser", "-u", user, "--", "env", "-i"] + [f"{k}={v}" for k, v in full_env.items()] + list(argv)
        full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        if cwd is None:
            cwd = pwd.getpwnam(user).pw_dir
    return subprocess.run(cmd, env=full_env, cwd=cwd, input=input, capture_output=True, text=True,
                          timeout=timeout, check=check)


class JobJanitor:
    """Remembers job ids a test submitted and cancels them all at the end (keeps the shared cluster clean)."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.ids: list[str] = []
        self.env = dict(env) if env is not None else dict(os.environ)

    def add(self, job_id: str) -> str:
        self.ids.append(str(job_id))
        return str(job_id)

    def extend(self, ids: Iterable[str]) -> None:
        self.ids.extend(str(i) for i in ids)

    def cancel_all(self) -> None:
        if self.ids:
            subprocess.run(["scancel", *self.ids], env=self.env, capture_output=True, timeout=30)
            self.ids.clear()


def measured_rows(models: Iterable[str], types: Iterable[str], *, num_gpus: int = 1, batch_size: int = 12,
                  precision: str = "float") -> str:
    """Performance-table CSV text with the rows of the shipped measured table (msched/data/measured_perf.csv,
    the shared pytorch-gpu-benchmark measurements) for these models on these types, one GPU, batch 12:
    the real figures tests plan with, instead of copies of them in each test module."""
    import csv

    wanted_models, wanted_types = set(models), set(types)
    keep = {"num_gpus": str(num_gpus), "batch_size": str(batch_size), "precision": precision}
    with open(REPO / "msched" / "data" / "measured_perf.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] in wanted_models and r["gpu_type"] in wanted_types
                and all(r[k] == v for k, v in keep.items())]
    header = "model,gpu_type,num_gpus,batch_size,precision,iter_ms,source"
    return "\n".join([header, *(",".join(r[c] for c in header.split(",")) for r in rows)]) + "\n"


def assert_only_victim_text_differs(got: Mapping, base: Mapping, victim: str, comment: bytes, name: bytes) -> None:
    """A queue read with one job's comment and name replaced by hostile bytes: that job holds exactly
    the bytes given (as both queue reads give user text: U+FFFD for what is not UTF-8, trailing spaces
    and `(null)` dropped) and nothing else of it moved; every other job is read as before."""
    from msched.slurm.cli.parsers import user_text

    for jid, job in got.items():
        if jid == victim:
            assert job.comment == user_text(comment.decode("utf-8", errors="replace"))
            assert job.name == user_text(name.decode("utf-8", errors="replace"))
            assert (job.state, job.priority, job.features, job.user) == (base[jid].state, base[jid].priority,
                                                                          base[jid].features, base[jid].user)
        else:
            assert job == base[jid]
