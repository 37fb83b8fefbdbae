"""Packing's Slurm mechanics on a real cluster whose titanxp node shares its GPUs through gres/shard
(`scripts/slurm-dev-cluster.sh up --shards n4=2`: 2 shards per GPU, the node also in partition `shared`).

What msched's packing builds on, checked as an ordinary user: two 1-shard jobs land on one GPU (Slurm
fills a GPU's shards before the next GPU's, so jobs that start one after the other pair up), and a job
asking for a whole GPU never gets one that shard jobs hold. Then the Done-when of the Packing issue:
two 1-GPU jobs submitted through msub with `#MSCHED --pack` become shard jobs and share one GPU (Slurm's
allocation, `scontrol show job -d`, shows it), and a job that opted out (`--no-pack`, in a partition the
site packs by default) stays a `gpu` job on a GPU of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SCRIPT, SlurmCluster, _cannot_run
from helpers import wait_for

from msched.rounds.reorder import publish_free_time

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def shard_cluster(ordinary_user) -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        _cannot_run("starting slurmctld/slurmd needs root")
    base = Path(tempfile.mkdtemp(prefix="msched-shards-"))     # users' Slurm clients must read the config
    base.chmod(0o755)
    sdir = base / "cluster"
    up = subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(sdir), "--shards", "n4=2"], capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    conf = sdir / "slurm.conf"
    try:
        yield SlurmCluster(dir=sdir, conf=conf, env={**os.environ, "SLURM_CONF": str(conf)}, started_here=True)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(sdir)], capture_output=True, text=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def _submit(user, cluster: SlurmCluster, args: list[str]) -> str:
    proc = user.run(["sbatch", "--parsable", "-t", "5", "-o", "/dev/null", *args, "--wrap", "sleep 300"],
                    env={"SLURM_CONF": str(cluster.conf)}, cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def _gpu_indices(cluster: SlurmCluster, job_id: str) -> tuple[str, set[int]] | None:
    """(gres name, GPU indices) of a running job, from `scontrol show job -d`'s GRES=name:N(IDX:...)."""
    out = cluster.run(["scontrol", "show", "job", "-d", job_id]).stdout
    if "JobState=RUNNING" not in out:
        return None
    m = re.search(r"\bGRES=(\w+)(?::\w+)?:\d+\(IDX:([\d,-]+)\)", out)
    if not m:
        return None
    idx: set[int] = set()
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        idx.update(range(int(lo), int(hi or lo) + 1))
    return m.group(1), idx


def test_two_shard_jobs_share_one_gpu_and_a_whole_gpu_job_never_does(shard_cluster, ordinary_user):
    ids = []
    try:
        for _ in range(2):
            ids.append(_submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1"]))
        a, b = (wait_for(lambda j=j: _gpu_indices(shard_cluster, j), timeout=30, message=f"job {j} running")
                for j in ids)
        assert a[0] == b[0] == "shard" and len(a[1]) == len(b[1]) == 1
        assert a[1] == b[1]                                   # one GPU, two jobs: packed
        ids.append(_submit(ordinary_user, shard_cluster, ["-p", "gpu", "-w", "n4", "--gres=gpu:1"]))
        whole = wait_for(lambda: _gpu_indices(shard_cluster, ids[-1]), timeout=30, message="the gpu job running")
        assert whole[0] == "gpu" and not whole[1] & a[1]      # never a GPU that shard jobs hold
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])


def test_dev_cluster_config_is_what_a_site_writes(shard_cluster):
    conf = Path(shard_cluster.conf).read_text()
    gres = (Path(shard_cluster.dir) / "gres.conf").read_text()
    assert "GresTypes=gpu,shard" in conf and "SelectType=select/cons_tres" in conf
    assert re.search(r"NodeName=n4 .*Gres=gpu:titanxp:4,shard:8 Feature=titanxp,shard", conf)
    assert "PartitionName=shared Nodes=n4" in conf
    assert "NodeName=n4 Name=shard Count=8" in gres


def _site(base: Path, user, guard: str = "mean") -> Path:
    """msub's site config (packing on by default in partition gpu) in a directory the user can read, and
    a cache and state directory the user owns. The mean guard: these tests check Slurm's mechanics, and
    under the default quantile guard ResNet-18 on a titanxp is outside Gavel's data and never packed
    (tests/test_packing.py::test_by_default_msub_packs_no_job_outside_the_guards_data)."""
    d = Path(tempfile.mkdtemp(prefix="msched-pack-site-"))
    d.chmod(0o755)
    (d / "cache").mkdir()
    os.chown(d / "cache", user.uid, user.gid)
    (d / "msched.toml").write_text(f'sbatch = "{shutil.which("sbatch")}"\nstate_dir = "{d / "cache"}"\n'
                                   f'pack_partitions = ["gpu"]\npack_guard = "{guard}"\n')
    # a reorder round's published plan (msub packs only a job that would wait, by a fresh one): the
    # shard nodes' type busy for an hour, the plan ending in ten days
    now = time.time()
    publish_free_time(d / "cache" / "gpu_free_time.json", now, {"titanxp": now + 3600}, now + 10 * 86400)
    return d


def _msub(user, cluster: SlurmCluster, site: Path, args: list[str], script: str) -> tuple[str, str]:
    path = site / f"job{len(list(site.glob('job*.sh')))}.sh"
    path.write_text(script)
    path.chmod(0o644)
    env = {"SLURM_CONF": str(cluster.conf), "MSCHED_CONFIG": str(site / "msched.toml"),
           "MSCHED_CACHE_DIR": str(site / "cache"), "PYTHONPYCACHEPREFIX": str(site / "cache" / "pyc")}
    proc = user.run([str(Path(sys.executable).with_name("msub")), "--parsable", "-t", "5", "-o", "/dev/null",
                     *args, str(path)], env=env, cwd="/tmp")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0], proc.stderr


def test_msub_packs_two_opted_in_jobs_onto_one_gpu_and_never_an_opted_out_one(shard_cluster, ordinary_user):
    site = _site(Path(shard_cluster.dir), ordinary_user)
    ids = []
    try:
        packed = "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32 --pack\n#SBATCH --gres=gpu:1\nsleep 300\n"
        for _ in range(2):      # --constraint=shard: the owner wants a node that shares (n4, titanxp)
            job, err = _msub(ordinary_user, shard_cluster, site, ["--constraint=shard"], packed)
            ids.append(job)
            assert "warning" not in err, err
        a, b = (wait_for(lambda j=j: _gpu_indices(shard_cluster, j), timeout=60, message=f"job {j} running")
                for j in ids)
        assert a[0] == b[0] == "shard" and a[1] == b[1] and len(a[1]) == 1     # one GPU, two msub jobs
        shown = shard_cluster.run(["scontrol", "show", "job", ids[0]]).stdout
        assert "Partition=shared" in shown and "Comment=msched:v1;" in shown and ";pack=" in shown
        # the second was judged against the first, read from squeue as a shard job (`%b` names shards)
        second = shard_cluster.run(["scontrol", "show", "job", ids[1]]).stdout
        assert "with%201%20shard%20jobs%20in%20the%20queue" in second, second     # the tag escapes spaces
        opted_out = "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32 --no-pack\n#SBATCH --gres=gpu:1\nsleep 300\n"
        job, _ = _msub(ordinary_user, shard_cluster, site, ["-p", "gpu", "-w", "n4"], opted_out)
        ids.append(job)
        whole = wait_for(lambda: _gpu_indices(shard_cluster, job), timeout=60, message="the opted-out job running")
        assert whole[0] == "gpu" and not whole[1] & a[1]          # its own GPU, never the shard jobs'
        assert ";pack=" not in shard_cluster.run(["scontrol", "show", "job", job]).stdout
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])
        shutil.rmtree(site, ignore_errors=True)


def test_msub_never_packs_beside_a_shard_job_it_cannot_check(shard_cluster, ordinary_user):
    """A shard job msched knows nothing of (a plain `sbatch --gres=shard:1`) could become any packed
    job's partner, so while one is queued msub packs nothing: the job goes in as a whole-GPU job and
    its owner, who asked for packing, is told why."""
    site = _site(Path(shard_cluster.dir), ordinary_user)
    ids = []
    try:
        ids.append(_submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1"]))
        script = "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32 --pack\n#SBATCH --gres=gpu:1\nsleep 300\n"
        job, err = _msub(ordinary_user, shard_cluster, site, ["--constraint=shard"], script)
        ids.append(job)
        assert "not packed: 1 shard job(s) in the queue msched cannot check as partners" in err, err
        shown = shard_cluster.run(["scontrol", "show", "job", job]).stdout
        assert ";pack=" not in shown and "Partition=shared" not in shown and "gres:gpu:1" in shown
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])
        shutil.rmtree(site, ignore_errors=True)


def test_the_round_reads_which_gpu_each_shard_job_holds(shard_cluster, ordinary_user):
    """After a departure two shard jobs sit alone on two GPUs: start order would pair them. The round's
    read of the real queue (CliClient: squeue --json's gres_detail) knows each job's GPU, so its snapshot
    shows two GPUs each with an open shard, exactly as `scontrol show job -d` allocates them; a job
    that then joins one of them is paired with that one."""
    from msched.config import Config
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.perf_table import PerfTable
    from msched.estimate.runtime import TableTimes
    from msched.rounds.core import build_snapshot
    from msched.slurm.cli import CliClient
    from msched.tag import JobTag, with_tag

    tag = with_tag(JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000,
                          pack=1.2), None)
    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))
    client = CliClient(Config(), env={"SLURM_CONF": str(shard_cluster.conf)})

    def submit() -> str:
        job = _submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1", f"--comment={tag}"])
        wait_for(lambda: _gpu_indices(shard_cluster, job), timeout=30, message=f"job {job} running")
        return job

    def snapshot_groups() -> tuple[set, dict]:
        jobs = [j for j in client.jobs() if j.job_id in ids]
        snap, _ = build_snapshot(jobs, client.nodes(), est, time.time())
        running = [j for j in ids if _gpu_indices(shard_cluster, j)]
        by_gpu: dict[int, set] = {}
        for j in running:
            by_gpu.setdefault(min(_gpu_indices(shard_cluster, j)[1]), set()).add(j)
        return {frozenset(g.jobs) for g in snap.shard_gpus}, by_gpu

    ids: list[str] = []
    try:
        ids += [submit(), submit(), submit()]          # the first two share a GPU, the third is alone
        seen, allocated = snapshot_groups()
        assert seen == {frozenset(g) for g in allocated.values()} == {frozenset(ids[:2]), frozenset(ids[2:])}
        shard_cluster.run(["scancel", ids[0]])
        wait_for(lambda: not _gpu_indices(shard_cluster, ids[0]), timeout=30, message="the first job gone")
        seen, allocated = snapshot_groups()
        assert seen == {frozenset(g) for g in allocated.values()} == {frozenset(ids[1:2]), frozenset(ids[2:3])}
        ids.append(submit())                           # joins one of the two lone jobs: Slurm's choice
        seen, allocated = snapshot_groups()
        assert seen == {frozenset(g) for g in allocated.values()} and len(seen) == 2
        assert frozenset(ids[1:3]) not in seen                  # never the two that merely started in a row
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])


def test_the_round_keeps_a_shard_job_off_a_nodes_open_shard_and_release_clears_it(shard_cluster, ordinary_user,
                                                                                  tmp_path):
    """The packing round's node lever on real Slurm (pack12): a pending shard job's ExcNodeList, written
    as root through the hold journal (the entry on disk before the call), keeps it off the node where a
    shard job runs alone with an open shard (here the cluster's only shard node: it waits, BadConstraints),
    though Slurm would have put it there; what `msched reorder --release` runs first (the journal's replay,
    everything) clears it, and the job then joins the open shard."""
    from msched.config import Config
    from msched.rounds.holds import apply_exclusions, replay
    from msched.slurm.cli import CliClient
    from msched.store.db import Store
    from msched.store.holds import HoldJournal

    client = CliClient(Config(), env={"SLURM_CONF": str(shard_cluster.conf)})
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    ids: list[str] = []

    def reason(job: str) -> str:
        return shard_cluster.run(["squeue", "-h", "-j", job, "-o", "%T %r"]).stdout.strip()

    try:
        ids.append(_submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1"]))
        alone = wait_for(lambda: _gpu_indices(shard_cluster, ids[0]), timeout=30, message="the first job running")
        ids.append(_submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1", "--hold"]))
        written, skipped = apply_exclusions(client, {ids[1]: ("n4",)}, client.jobs(), journal)
        assert written == {ids[1]: "n4"} and skipped == []
        assert [(e.job_id, e.kind, e.value) for e in journal.open_entries()] == [(ids[1], "exc_nodes", "n4")]
        assert "ExcNodeList=n4" in shard_cluster.run(["scontrol", "show", "job", ids[1]]).stdout
        released = ordinary_user.run(["scontrol", "release", ids[1]], env={"SLURM_CONF": str(shard_cluster.conf)})
        assert released.returncode == 0, released.stderr
        wait_for(lambda: reason(ids[1]) == "PENDING BadConstraints", timeout=30, message="Slurm to keep it off n4")
        # the same list again: the journal says it is written, no call
        assert apply_exclusions(client, {ids[1]: ("n4",)}, client.jobs(), journal) == ({}, [])
        assert replay(client, journal, jobs=client.jobs(), everything=True) == [ids[1]]     # --release
        assert journal.open_entries() == []
        joined = wait_for(lambda: _gpu_indices(shard_cluster, ids[1]), timeout=30, message="the job to start")
        assert joined == alone                         # the open shard beside the first job
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])


def test_the_owners_own_excluded_nodes_are_kept_beside_mscheds_and_by_release(shard_cluster, ordinary_user,
                                                                               tmp_path):
    """pack13: the job's owner, an ordinary user, keeps a node of their own out of a pending shard job's
    ExcNodeList before and after msched's write. The round (as root, through the journal) writes the union;
    the owner's later `scontrol update ExcNodeList=` drops msched's node, and the next round puts it back
    beside the owner's new one; `--release` (the journal's replay, everything) leaves the owner's list."""
    from msched.config import Config
    from msched.rounds.holds import apply_exclusions, replay
    from msched.slurm.cli import CliClient
    from msched.store.db import Store
    from msched.store.holds import HoldJournal

    client = CliClient(Config(), env={"SLURM_CONF": str(shard_cluster.conf)})
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    env = {"SLURM_CONF": str(shard_cluster.conf)}
    ids: list[str] = []

    def excluded(job: str) -> str:
        out = shard_cluster.run(["scontrol", "show", "job", job]).stdout
        return re.search(r"ExcNodeList=(\S*)", out).group(1)

    def owner_sets(job: str, nodes: str) -> None:
        proc = ordinary_user.run(["scontrol", "update", f"jobid={job}", f"ExcNodeList={nodes}"], env=env)
        assert proc.returncode == 0, proc.stderr

    try:
        ids.append(_submit(ordinary_user, shard_cluster, ["-p", "shared", "--gres=shard:1", "--hold"]))
        job = ids[0]
        owner_sets(job, "n1")
        assert client.excluded_nodes([job, "999999"]) == {job: ("n1",)}
        written, _ = apply_exclusions(client, {job: ("n4",)}, client.jobs(), journal)
        assert written == {job: "n1,n4"} and excluded(job) == "n1,n4"
        (e,) = journal.open_entries()
        assert (e.value, e.own) == ("n1,n4", "n1")
        assert apply_exclusions(client, {job: ("n4",)}, client.jobs(), journal) == ({}, [])    # no call
        owner_sets(job, "n2")                       # the owner rewrites it, msched's n4 dropped
        assert apply_exclusions(client, {job: ("n4",)}, client.jobs(), journal) == ({job: "n2,n4"}, [])
        assert excluded(job) == "n2,n4"
        assert replay(client, journal, jobs=client.jobs(), everything=True) == [job]       # --release
        assert journal.open_entries() == [] and excluded(job) == "n2"
        # msched's write, then the owner's own rewrite: --release leaves theirs
        apply_exclusions(client, {job: ("n4",)}, client.jobs(), journal)
        owner_sets(job, "n3")
        assert replay(client, journal, jobs=client.jobs(), everything=True) == [] and excluded(job) == "n3"
    finally:
        if ids:
            shard_cluster.run(["scancel", *ids])
