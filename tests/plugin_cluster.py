"""A second dev cluster with msched's Slurm plugins on (`scripts/slurm-dev-cluster.sh up --plugins`).

Its own directory (.slurm-dev-plugins, or MSCHED_SLURM_PLUGINS_DIR), so its own ports: the shared
plain cluster of tests/conftest.py keeps running without plugins for every other test. Started by the
first test module that needs it and stopped when that session ends, if the fixture started it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SCRIPT, SlurmCluster, _cannot_run, _locked
from helpers import REPO, user_env

from msched.plugin import resident


def _dir() -> Path:
    return Path(os.environ.get("MSCHED_SLURM_PLUGINS_DIR") or REPO / ".slurm-dev-plugins").resolve()


@pytest.fixture(scope="session")
def plugin_cluster(ordinary_user) -> Iterator[SlurmCluster]:
    """The dev cluster with cli_filter/lua and job_submit/lua, files from `msched plugin install`."""
    if os.geteuid() != 0:
        _cannot_run("starting slurmctld/slurmd needs root")
    sdir = _dir()
    env = {**os.environ, "MSCHED_PYTHON": sys.executable}
    with _locked(sdir / ".fixture-lock"):
        proc = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir), "--plugins"], capture_output=True,
                              text=True, timeout=600, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.fail(f"slurm-dev-cluster.sh up --plugins failed: {tail}", pytrace=False)
    started = "already running" not in proc.stderr
    conf = sdir / "slurm.conf"
    cluster_env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        yield SlurmCluster(dir=sdir, conf=conf, env=cluster_env, started_here=started)
    finally:
        # the test user's resident decider (msched.plugin.resident), started by its first tagged sbatch
        resident.stop(resident.socket_path(user_env(ordinary_user.name)))
        if started and os.environ.get("MSCHED_KEEP_SLURM") != "1":
            with _locked(sdir / ".fixture-lock"):
                subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(sdir)], capture_output=True,
                               text=True, timeout=120)


def show_job(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """A few fields of `scontrol show job` (multi-line form: one field per line for those read here)."""
    out = cluster.run(["scontrol", "show", "job", str(job_id)], check=True).stdout
    fields = {"AdminComment": "", "Comment": ""}          # scontrol leaves unset comments out
    for line in out.splitlines():
        line = line.strip()
        for key in ("AdminComment", "Comment", "Features", "Command", "JobState"):
            if line.startswith(key + "="):
                value = line[len(key) + 1:]
                if key in ("Features", "JobState"):
                    value = value.split(" ")[0]
                fields[key] = value.rstrip()
    return fields


def job_id_of(stdout: str) -> str:
    m = re.search(r"(?:Submitted batch job |^)(\d+)", stdout, re.M)
    assert m, f"no job id in {stdout!r}"
    return m.group(1)
