"""`msched jobs`: tagged jobs of the real Slurm queue joined with a real SQLite database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from msched.commands.jobs_cmd import build_rows
from msched.slurm.base import SlurmJob
from msched.tag import JobTag, with_tag

MSCHED = str(Path(sys.executable).with_name("msched"))


def _tag(model: str, group: str, ref: str, **kw) -> str:
    return with_tag(JobTag(model=model, ref=ref, group=group, sim=0.9, ver="test", **kw), None)


def test_build_rows_joins_planned_types_and_skips_untagged():
    jobs = [
        SlurmJob("12", "PENDING", user="ann", comment=_tag("vgg16", "vgg", "vgg19"), features="a100|titanv"),
        SlurmJob("3", "RUNNING", user="bob", comment=_tag("resnet50", "resnet", "resnet50") + " bob's note",
                 gpu_type="titanv"),
        SlurmJob("7", "PENDING", user="cy", comment="just a comment"),
    ]
    rows = build_rows(jobs, {"12": "a100"}, include_untagged=False)
    assert [r.job_id for r in rows] == ["3", "12"]                  # numeric order, untagged left out
    by_id = {r.job_id: r for r in rows}
    assert (by_id["12"].planned_type, by_id["12"].in_db, by_id["12"].constraint) == ("a100", True, "a100|titanv")
    assert (by_id["3"].planned_type, by_id["3"].in_db, by_id["3"].gpu_type) == (None, False, "titanv")
    assert by_id["3"].group == "resnet" and by_id["12"].reference == "vgg19"
    everything = build_rows(jobs, {}, include_untagged=True)
    assert [r.tagged for r in everything] == [True, False, True]


# ----------------------------------------------------------------------------- against the real cluster
@pytest.fixture
def site():
    d = Path(tempfile.mkdtemp(prefix="msched-jobs-"))
    conf = d / "msched.toml"
    conf.write_text(f'sbatch = "/usr/bin/sbatch"\nstate_dir = "{d}"\ndatabase_url = "sqlite:///{d}/msched.db"\n'
                    'cluster_name = "jobs-test"\n')
    yield d, conf
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def _submit(cluster, janitor, comment: str, *extra: str) -> str:
    proc = cluster.run(["sbatch", "--hold", "--parsable", "--gres=gpu:1", f"--comment={comment}", "-o", "/dev/null",
                        *extra, "--wrap", "true"], check=True)
    return janitor.add(proc.stdout.strip())


def _jobs(conf: Path, cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MSCHED, "jobs", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **cluster.env, "MSCHED_CONFIG": str(conf)})


@pytest.mark.slurm
def test_jobs_without_database(slurm_cluster, janitor, site):
    d, conf = site
    tagged = _submit(slurm_cluster, janitor, _tag("densenet121", "densenet", "densenet169"))
    plain = _submit(slurm_cluster, janitor, "no tag here")
    proc = _jobs(conf, slurm_cluster, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "does not exist" in proc.stderr                      # a note, not a failure
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    assert tagged in rows and plain not in rows
    assert rows[tagged]["planned_type"] is None and rows[tagged]["group"] == "densenet"
    assert not (d / "msched.db").exists()                       # a reader never creates the database
    every = {r["job_id"]: r for r in json.loads(_jobs(conf, slurm_cluster, "--json", "--all").stdout)}
    assert plain in every and not every[plain]["tagged"]


@pytest.mark.slurm
def test_jobs_joins_planned_types_from_database(slurm_cluster, janitor, site):
    from msched.store.db import Store
    from msched.store.schema import Job

    d, conf = site
    a = _submit(slurm_cluster, janitor, _tag("vgg16", "vgg", "vgg19", added="a100|titanv"), "-C", "a100|titanv")
    b = _submit(slurm_cluster, janitor, _tag("mobilenet_v2", "mobilenet", "mobilenet_v2"))
    store = Store(f"sqlite:///{d}/msched.db")
    run = store.run_id("slurm", "jobs-test")
    other = store.run_id("slurm", "another-cluster")
    with store.write() as s:
        s.add(Job(run_id=run, job_id=a, model="vgg16", group="vgg", planned_type="a100", first_seen=time.time()))
        s.add(Job(run_id=other, job_id=b, model="x", planned_type="titanxp", first_seen=time.time()))
    store.dispose()
    proc = _jobs(conf, slurm_cluster, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["job_id"]: r for r in json.loads(proc.stdout)}
    assert rows[a]["planned_type"] == "a100" and rows[a]["in_db"] and rows[a]["constraint"] == "a100|titanv"
    assert rows[b]["planned_type"] is None and not rows[b]["in_db"]     # recorded for another cluster only
    table = _jobs(conf, slurm_cluster)
    assert table.returncode == 0 and a in table.stdout and "vgg16" in table.stdout and "a100" in table.stdout


@pytest.mark.slurm
def test_jobs_reports_unreachable_slurm_in_one_line(site, slurm_cluster):
    d, conf = site
    env = {**os.environ, "MSCHED_CONFIG": str(conf), "SLURM_CONF": str(d / "nope.conf")}
    (d / "nope.conf").write_text("ClusterName=nope\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n")
    proc = subprocess.run([MSCHED, "jobs"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: cannot read Slurm's queue") and proc.stderr.count("\n") == 1
