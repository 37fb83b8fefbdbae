"""`msched reorder` on the real local Slurm cluster, and the same code on the simulator.

The Slurm tests fill the GPUs with untagged blocker jobs, queue jobs the way msub submits them (untyped
`--gres=gpu:N`, the msched tag in the comment, the GPU type msub picked as a feature constraint), run one
round, release the blockers and read back from Slurm where and in which order the jobs started.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from msched.config import load_config
from msched.estimate.perf_table import PerfTable
from msched.rounds.reorder import LockBusy, Reorderer, open_site_store, round_lock
from msched.slurm.base import JobRequest
from msched.store.db import Store
from msched.store.schema import Decision, Job, Round
from msched.tag import JobTag, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import VENV_BIN, measured_rows, wait_for  # noqa: E402

TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
# Measured training iteration times (shared pytorch-gpu-benchmark table): VGG-16 runs best on a100,
# DenseNet-169 on titanv.
PERF_CSV = measured_rows(["vgg16", "densenet169"], TYPES)
GROUP = {"vgg16": "vgg", "densenet169": "densenet"}
MSCHED = str(VENV_BIN / "msched")


def site_config(tmp_path: Path, cluster_name: str = "test"):  # noqa: ANN201 - a Config
    """A site configuration of our own: state, database and performance table under tmp_path."""
    perf = tmp_path / "perf.csv"
    perf.write_text(PERF_CSV)
    state = tmp_path / "state"
    cfg = tmp_path / "msched.toml"
    cfg.write_text(f'state_dir = "{state}"\nperformance = "{perf}"\ncluster_name = "{cluster_name}"\n'
                   f'backend = "cli"\ndatabase_url = "sqlite:///{state}/msched.db"\n')
    return load_config(cfg)


@pytest.fixture
def site(tmp_path):
    return site_config(tmp_path)


def tag_for(model: str, iters: int, added: str = "", pinned: str = "") -> JobTag:
    return JobTag(model=model, ref=model, group=GROUP[model], sim=1.0, flops=1.0, iters=iters, bs=12,
                  added=added, pinned=pinned, ver="test")


def planned(store: Store, round_id: int) -> dict[str, Decision]:
    with store.read() as s:
        return {d.job_id: d for d in s.scalars(select(Decision).where(Decision.round_id == round_id))}


# ------------------------------------------------------------------------------------------ simulator
def test_same_round_drives_the_simulator(site):
    """The Reorderer that drives Slurm drives slurm_sim's SimClient unchanged: plan, apply, record,
    publish, and completion tracking from the simulated cluster's own clock."""
    from slurm_sim.client import SimClient

    perf = PerfTable.load(site.performance)
    client = SimClient.from_spec("a100:4x1,titanv:4x1,rtx2080ti:4x1,titanxp:4x1", truth=perf)
    jobs = {}
    for i, (model, iters) in enumerate([("vgg16", 40000), ("vgg16", 30000), ("vgg16", 20000),
                                        ("densenet169", 40000), ("densenet169", 30000), ("densenet169", 20000)]):
        jid = client.submit(JobRequest(
            name=f"{model}-{i}", num_gpus=4, constraint="titanxp", time_limit_s=4 * 3600,
            comment=with_tag(tag_for(model, iters, added="titanxp"), None),
            extra={"model": model, "iterations": iters, "batch_size": 12, "user": "alice"}))
        jobs[jid] = model
    store = open_site_store(site)
    reorderer = Reorderer(site, client, store)
    out = reorderer.round()
    assert out.result.update_calls > 0 and not out.result.skipped
    plan = planned(store, out.round_id)
    assert set(plan) == set(jobs)
    held = {j.job_id: j for j in client.jobs()}
    for jid, d in plan.items():          # Slurm (simulated) now holds exactly the plan
        assert held[jid].priority == d.priority
        assert held[jid].features == d.gpu_type
    assert any(plan[j].gpu_type == "a100" for j, m in jobs.items() if m == "vgg16")
    assert any(plan[j].gpu_type == "titanv" for j, m in jobs.items() if m == "densenet169")
    free = json.loads(Path(site.free_time_path).read_text())
    assert set(free["free_at"]) == set(TYPES) and free["time"] == out.result.time
    assert all(v >= free["time"] for v in free["free_at"].values())
    assert stat.S_IMODE(os.stat(site.free_time_path).st_mode) == 0o644           # every user's msub reads it
    assert stat.S_IMODE(os.stat(site.state_dir).st_mode) == 0o755
    assert stat.S_IMODE(Path(store.path).stat().st_mode) == 0o640

    client.run_until(10 * 3600)
    out2 = reorderer.round()
    assert out2.completions == len(jobs)
    with store.read() as s:
        rows = {r.job_id: r for r in s.scalars(select(Job))}
        rounds = s.scalars(select(Round)).all()
    assert len(rounds) == 2
    assert all(rows[j].end_time is not None and rows[j].actual_type == plan[j].gpu_type for j in jobs)
    _assert_order_per_type(plan, {j: (rows[j].start_time, rows[j].actual_type) for j in jobs})


def _assert_order_per_type(plan: dict[str, Decision], started: dict[str, tuple[float, str]]) -> None:
    """Per GPU type, jobs started on the planned type, in the planned (priority) order."""
    for t in {d.gpu_type for d in plan.values()}:
        on_t = [j for j, d in plan.items() if d.gpu_type == t]
        by_priority = sorted(on_t, key=lambda j: -plan[j].priority)
        by_start = sorted(on_t, key=lambda j: (started[j][0], -plan[j].priority))
        assert [started[j][1] for j in on_t] == [t] * len(on_t), (t, started)
        assert by_start == by_priority, (t, by_start, by_priority)


# ------------------------------------------------------------------------------------------ lock
def test_second_round_steps_aside(site):
    """A round that finds the lock held exits 0 with a message and does nothing."""
    with round_lock(site.lock_path):
        proc = subprocess.run([MSCHED, "reorder", "--config", site.source], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "SLURM_CONF": "/nonexistent/slurm.conf"})
        with pytest.raises(LockBusy):
            with round_lock(site.lock_path):
                pass
    assert proc.returncode == 0, proc.stderr
    assert "another msched reorder round holds" in proc.stderr
    assert not Path(site.database_url.removeprefix("sqlite:///")).exists()   # it did not even open the db
    assert stat.S_IMODE(os.stat(site.lock_path).st_mode) == 0o600


# ------------------------------------------------------------------------------------------ failures
def _dead_slurm_conf(tmp_path: Path) -> Path:
    """A slurm.conf whose controller port nothing listens on (MessageTimeout=1: fail fast)."""
    conf = tmp_path / "dead" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=dead\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nMessageTimeout=1\n"
                    "AuthType=auth/none\nCredType=cred/none\nNodeName=x CPUs=1 State=UNKNOWN\n"
                    "PartitionName=p Nodes=x Default=YES\n")
    return conf


def test_slurm_unreachable_is_one_line(site, tmp_path):
    conf = _dead_slurm_conf(tmp_path)
    t0 = time.monotonic()
    proc = subprocess.run([MSCHED, "reorder", "--config", site.source, "--backend", "cli"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "SLURM_CONF": str(conf)})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Slurm unreachable" in lines[0] and "nothing changed" in lines[0]
    assert time.monotonic() - t0 < 60


def test_unwritable_database_changes_nothing(site, tmp_path):
    """The database is checked before Slurm is read or written: a database that cannot be written
    stops the round with one line (Slurm not even asked)."""
    db = Path(site.database_url.removeprefix("sqlite:///"))
    Store(site.database_url).dispose()
    with open(db, "r+b") as fh:      # corrupt the header: not a database any more
        fh.write(b"garbage" * 20)
    conf = _dead_slurm_conf(tmp_path)
    proc = subprocess.run([MSCHED, "reorder", "--config", site.source], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SLURM_CONF": str(conf)})
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing changed in Slurm" in lines[0], proc.stderr
    assert "Slurm unreachable" not in lines[0]


def test_bad_option_lists_choices(site):
    proc = subprocess.run([MSCHED, "reorder", "--objective", "speed"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "makespan" in proc.stderr and "jct" in proc.stderr


# ------------------------------------------------------------------------------------------ real Slurm
def _submit(cluster, *, name: str, gpus: int, comment: str = "", constraint: str = "", gres_type: str = "",
            nodelist: str = "", seconds: int = 2, priority: int | None = None, hold: bool = False) -> str:
    gres = f"gpu:{gres_type}:{gpus}" if gres_type else f"gpu:{gpus}"
    argv = ["sbatch", "--parsable", f"--job-name={name}", f"--gres={gres}", "--time=60", "--output=/dev/null",
            f"--wrap=sleep {seconds}"]
    if comment:
        argv.append(f"--comment={comment}")
    if constraint:
        argv.append(f"--constraint={constraint}")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    if hold:
        argv.append("--hold")
    proc = cluster.run(argv)
    assert proc.returncode == 0, proc.stderr
    jid = proc.stdout.strip().split(";")[0]
    if priority is not None:
        cluster.run(["scontrol", "update", f"jobid={jid}", f"priority={priority}"], check=True)
    return jid


def _squeue(cluster, job_ids) -> dict[str, dict[str, str]]:
    """state, priority, features, gres, node of jobs (squeue -t all: finished ones within MinJobAge)."""
    proc = cluster.run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%Q|%f|%b|%N|%S"])
    out = {}
    for line in proc.stdout.splitlines():
        jid, state, prio, feats, gres, node, start = line.split("|")
        out[jid] = {"state": state, "priority": prio, "features": feats, "gres": gres, "node": node,
                    "start": start}
    return out


def _fill_gpus(cluster, janitor) -> list[str]:
    """Untagged blockers holding all 16 GPUs, running."""
    ids = [janitor.add(_submit(cluster, name=f"blocker-{n}", gpus=4, nodelist=n, seconds=600))
           for n in ("n1", "n2", "n3", "n4")]
    wait_for(lambda: all(v["state"] == "RUNNING" for v in _squeue(cluster, ids).values()), 30,
             message="blockers running")
    return ids


def _wait_idle(cluster, timeout: float = 30) -> None:
    def idle() -> bool:
        out = cluster.run(["squeue", "-h", "-t", "PD,R,CG", "-o", "%i"]).stdout.split()
        return not out
    wait_for(idle, timeout, message="an empty queue (other tests' jobs gone)")


@pytest.mark.slurm
@pytest.mark.slow
def test_jobs_start_in_planned_order_on_planned_types(slurm_cluster, janitor, site):
    from msched.slurm import get_client

    _wait_idle(slurm_cluster)
    blockers = _fill_gpus(slurm_cluster, janitor)
    specs = [("vgg16", 40000), ("densenet169", 40000), ("vgg16", 20000), ("densenet169", 30000),
             ("vgg16", 30000), ("densenet169", 20000)]
    jobs = {}
    for i, (model, iters) in enumerate(specs):     # msub's first pick for every one: titanxp
        jid = janitor.add(_submit(slurm_cluster, name=f"{model}-{i}", gpus=4, constraint="titanxp", seconds=2,
                                  comment=with_tag(tag_for(model, iters, added="titanxp"), "user note")))
        jobs[jid] = model
    store = open_site_store(site)
    reorderer = Reorderer(site, get_client("cli", config=site), store)
    out = reorderer.round()
    assert not out.result.skipped and out.result.update_calls > 0
    plan = planned(store, out.round_id)
    assert set(plan) == set(jobs)
    now = _squeue(slurm_cluster, list(jobs))
    for jid, d in plan.items():                   # what Slurm holds is the plan
        assert int(now[jid]["priority"]) == d.priority
        assert now[jid]["features"] == d.gpu_type
        assert now[jid]["gres"].endswith("gpu:4")   # the gres request untouched (untyped)
    assert {plan[j].gpu_type for j, m in jobs.items() if m == "vgg16"} & {"a100"}
    assert {plan[j].gpu_type for j, m in jobs.items() if m == "densenet169"} & {"titanv"}
    # the plan is not Slurm's own order: on some type a later submission goes first
    assert any(sorted(on_t, key=lambda j: -plan[j].priority) != sorted(on_t, key=int)
               for t in {d.gpu_type for d in plan.values()}
               for on_t in [[j for j in jobs if plan[j].gpu_type == t]])

    slurm_cluster.run(["scancel", *blockers], check=True)
    wait_for(lambda: all(v["state"] == "COMPLETED" for v in _squeue(slurm_cluster, list(jobs)).values()),
             90, interval=0.2, message="all planned jobs completed")
    out2 = reorderer.round()                      # completion tracking: start, end, type from Slurm
    assert out2.completions >= len(jobs)
    with store.read() as s:
        rows = {r.job_id: r for r in s.scalars(select(Job).where(Job.job_id.in_(list(jobs))))}
    assert all(rows[j].state == "COMPLETED" and rows[j].end_time and rows[j].start_time for j in jobs)
    _assert_order_per_type(plan, {j: (rows[j].start_time, rows[j].actual_type) for j in jobs})
    # same-second starts cannot be told apart by Slurm's clock: the order check above breaks ties by plan,
    # so also check that each type ran its jobs one after another (4 GPUs each, one node per type)
    for t in {d.gpu_type for d in plan.values()}:
        on_t = sorted((rows[j].start_time, rows[j].end_time) for j in jobs if plan[j].gpu_type == t)
        assert all(a[1] <= b[0] for a, b in zip(on_t, on_t[1:], strict=False)), (t, on_t)


@pytest.mark.slurm
def test_pinned_and_foreign_jobs_are_untouched(slurm_cluster, janitor, site):
    from msched.slurm import get_client

    _wait_idle(slurm_cluster)
    _fill_gpus(slurm_cluster, janitor)
    pinned = janitor.add(_submit(slurm_cluster, name="pinned", gpus=4, gres_type="titanxp", seconds=1,
                                 comment=with_tag(tag_for("vgg16", 40000, pinned="titanxp"), None)))
    user_feat = janitor.add(_submit(slurm_cluster, name="user-pin", gpus=4, constraint="titanxp", seconds=1,
                                    comment=with_tag(tag_for("vgg16", 30000, pinned="titanxp"), None)))
    foreign = janitor.add(_submit(slurm_cluster, name="foreign", gpus=4, constraint="titanxp", seconds=1,
                                  comment="no tag here", priority=5000))
    managed = janitor.add(_submit(slurm_cluster, name="managed", gpus=4, constraint="titanxp", seconds=1,
                                  comment=with_tag(tag_for("vgg16", 20000, added="titanxp"), None)))
    before = _squeue(slurm_cluster, [pinned, user_feat, foreign, managed])
    store = open_site_store(site)
    out = Reorderer(site, get_client("cli", config=site), store).round()
    after = _squeue(slurm_cluster, [pinned, user_feat, foreign, managed])
    touched = {u.job_id for u in out.result.updates}
    same = ("state", "priority", "features", "gres")      # (%S, the expected start, is backfill's to change)
    assert foreign not in touched and all(after[foreign][k] == before[foreign][k] for k in same)
    for jid in (pinned, user_feat):
        assert after[jid]["features"] == before[jid]["features"] and after[jid]["gres"] == before[jid]["gres"]
        assert not any(u.job_id == jid and u.field == "features" for u in out.result.updates)
    assert after[managed]["features"] == "a100"          # the managed vgg16 job moves to its best type
    with store.read() as s:
        ingested = set(s.scalars(select(Job.job_id)))
    assert {pinned, user_feat, managed} <= ingested and foreign not in ingested


@pytest.mark.slurm
def test_job_starting_mid_round_is_skipped(slurm_cluster, janitor, site):
    """Read the queue, let one job start (its blocker ends), then write: that job is skipped and logged,
    the others are written, and the round succeeds."""
    from msched.slurm import get_client

    _wait_idle(slurm_cluster)
    blockers = _fill_gpus(slurm_cluster, janitor)
    starter = janitor.add(_submit(slurm_cluster, name="starter", gpus=4, constraint="titanxp", seconds=30,
                                  comment=with_tag(tag_for("vgg16", 40000, added="titanxp"), None)))
    other = janitor.add(_submit(slurm_cluster, name="other", gpus=4, constraint="titanxp", seconds=1,
                                comment=with_tag(tag_for("densenet169", 40000, added="titanxp"), None)))
    client = get_client("cli", config=site)
    jobs, nodes = client.jobs(), client.nodes()          # the round's one read, taken now
    slurm_cluster.run(["scancel", blockers[3]], check=True)   # n4 (titanxp) frees: `starter` starts there
    wait_for(lambda: _squeue(slurm_cluster, [starter])[starter]["state"] == "RUNNING", 30,
             message="starter running")
    store = open_site_store(site)
    out = Reorderer(site, client, store).round(jobs=jobs, nodes=nodes)
    assert starter in out.result.skipped
    assert other not in out.result.skipped
    now = _squeue(slurm_cluster, [starter, other])
    assert now[starter]["features"] == "titanxp" and now[starter]["state"] == "RUNNING"
    assert now[other]["features"] == "titanv"            # the rest of the plan was written
    with store.read() as s:
        assert s.get(Round, out.round_id).skipped == 1


@pytest.mark.slurm
def test_cli_round_then_release(slurm_cluster, janitor, site):
    """`msched reorder` writes the plan; `msched reorder --release` hands the jobs back: msched's type
    constraint dropped, the priority recomputed by Slurm (all weights 0 here: back to what it was);
    the pinned job's constraint kept."""
    _wait_idle(slurm_cluster)
    _fill_gpus(slurm_cluster, janitor)
    managed = [janitor.add(_submit(slurm_cluster, name=f"m{i}", gpus=4, constraint="titanxp", seconds=1,
                                   comment=with_tag(tag_for(m, it, added="titanxp"), None)))
               for i, (m, it) in enumerate([("vgg16", 20000), ("densenet169", 30000)])]
    pinned = janitor.add(_submit(slurm_cluster, name="pinned", gpus=4, constraint="titanxp", seconds=1,
                                 comment=with_tag(tag_for("vgg16", 30000, pinned="titanxp"), None)))
    before = _squeue(slurm_cluster, [*managed, pinned])
    env = {**os.environ, "SLURM_CONF": str(slurm_cluster.conf)}
    run = subprocess.run([MSCHED, "reorder", "--config", site.source], capture_output=True, text=True,
                         timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert " INFO round pending=" in run.stderr and run.stderr.count("\n") == 1   # one line per round
    mid = _squeue(slurm_cluster, [*managed, pinned])
    assert {mid[j]["features"] for j in managed} == {"a100", "titanv"}
    rel = subprocess.run([MSCHED, "reorder", "--config", site.source, "--release"], capture_output=True,
                         text=True, timeout=120, env=env)
    assert rel.returncode == 0, rel.stderr
    assert "released 3 managed job(s)" in rel.stderr      # the pinned one gets its priority back too
    after = _squeue(slurm_cluster, [*managed, pinned])
    for j in managed:
        assert after[j]["features"] in ("", "(null)") and after[j]["priority"] == before[j]["priority"]
    assert after[pinned]["features"] == "titanxp" and after[pinned]["priority"] == before[pinned]["priority"]


def test_every_loop_survives_failures_and_stops_cleanly(site, tmp_path):
    """`--every`: a failed round (Slurm unreachable) is one log line and the loop goes on; Ctrl-C ends
    it with exit 0 and no traceback."""
    import signal

    conf = _dead_slurm_conf(tmp_path)
    proc = subprocess.Popen([MSCHED, "reorder", "--config", site.source, "--every", "1"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env={**os.environ, "SLURM_CONF": str(conf)})
    lines: list[str] = []
    try:
        while sum("Slurm unreachable" in line for line in lines) < 2:
            line = proc.stderr.readline()
            assert line, f"reorder --every ended early: {lines}"
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "stopped" in out
    assert "round failed (exit 1)" in out


@pytest.mark.slurm
def test_dry_run_prints_the_plan_and_changes_nothing(slurm_cluster, janitor, site):
    _wait_idle(slurm_cluster)
    _fill_gpus(slurm_cluster, janitor)
    jobs = [janitor.add(_submit(slurm_cluster, name=f"d{i}", gpus=4, constraint="titanxp", seconds=1,
                                comment=with_tag(tag_for(m, 30000, added="titanxp"), None)))
            for i, m in enumerate(("vgg16", "densenet169"))]
    before = _squeue(slurm_cluster, jobs)
    env = {**os.environ, "SLURM_CONF": str(slurm_cluster.conf), "COLUMNS": "200"}
    proc = subprocess.run([MSCHED, "reorder", "--config", site.source, "--dry-run", "-v"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert all(j in proc.stdout for j in jobs) and "titanxp -> a100" in proc.stdout
    assert "titanxp -> titanv" in proc.stdout and "vgg16" in proc.stdout
    assert "would set features" in proc.stderr and "dry-run round" in proc.stderr
    after = _squeue(slurm_cluster, jobs)
    assert all(after[j]["priority"] == before[j]["priority"] and after[j]["features"] == "titanxp" for j in jobs)
    assert not Path(site.database_url.removeprefix("sqlite:///")).exists()
    assert not os.path.exists(site.free_time_path)


def test_recording_failure_after_apply_says_the_queue_is_valid(site):
    """The database locks up between applying the plan and recording it (another writer holds it past
    the busy timeout): the round fails with one line saying the updates were applied and the queue is
    valid; Slurm (here the simulator) holds the whole plan."""
    import sqlite3

    from slurm_sim.client import SimClient

    perf = PerfTable.load(site.performance)

    class LockingSim(SimClient):
        """Takes the database's write lock when the round asks for finished jobs (just before recording)."""

        holder: sqlite3.Connection | None = None

        def finished_jobs(self, since=None):  # noqa: ANN001, ANN202
            LockingSim.holder = sqlite3.connect(site.database_url.removeprefix("sqlite:///"), isolation_level=None)
            LockingSim.holder.execute("BEGIN IMMEDIATE")
            return super().finished_jobs(since)

    base = SimClient.from_spec("a100:4x1,titanv:4x1", truth=perf)
    client = LockingSim(base.sim)
    for i, model in enumerate(("vgg16", "densenet169", "vgg16")):
        client.submit(JobRequest(name=f"j{i}", num_gpus=4, constraint="titanv" if model == "vgg16" else "a100",
                                 comment=with_tag(tag_for(model, 20000, added="x"), None), time_limit_s=7200,
                                 extra={"model": model, "iterations": 20000, "batch_size": 12}))
    from msched.rounds.reorder import ReorderError, ensure_state_dir

    ensure_state_dir(site.state_dir)
    store = Store(site.database_url, busy_timeout_s=0.5)
    with pytest.raises(ReorderError) as info:
        Reorderer(site, client, store).round()
    LockingSim.holder.close()          # ends the other writer's transaction
    msg = str(info.value)
    assert "\n" not in msg and "but recording it failed" in msg and "the queue is valid" in msg
    assert "database is locked" in msg
    held = {j.job_id: j.features for j in client.jobs()}
    assert held == {"1": "a100", "2": "titanv", "3": "a100"}      # the plan was applied in full


def test_job_slurm_forgot_is_marked_unknown(site):
    """A Slurm that keeps no record of finished jobs (MinJobAge passed, no jobcomp, no sacct): a job the
    database saw running and Slurm no longer reports is marked UNKNOWN, not left 'running' forever."""
    from slurm_sim.client import SimClient

    class Forgetful(SimClient):
        def finished_jobs(self, since=None):  # noqa: ANN001, ANN202
            return []

    perf = PerfTable.load(site.performance)
    client = Forgetful(SimClient.from_spec("a100:4x1", truth=perf).sim)
    jid = client.submit(JobRequest(name="j", num_gpus=4, comment=with_tag(tag_for("vgg16", 1000), None),
                                   time_limit_s=3600, extra={"model": "vgg16", "iterations": 1000, "batch_size": 12}))
    store = open_site_store(site)
    reorderer = Reorderer(site, client, store)
    client.advance(1)
    reorderer.round()
    with store.read() as s:
        assert s.scalar(select(Job.state).where(Job.job_id == jid)) == "RUNNING"
    client.run_until(7200)
    reorderer.round()
    with store.read() as s:
        row = s.scalars(select(Job).where(Job.job_id == jid)).one()
    assert row.state == "UNKNOWN" and row.start_time is not None and row.actual_type == "a100"


def test_objective_changes_the_order(site):
    """--objective reaches the policy: jct puts the shortest job first; makespan reaches the planner too
    (on one node every order has the same makespan, so its tie-break, the sum of ends, orders them the same)."""
    from slurm_sim.client import SimClient

    perf = PerfTable.load(site.performance)
    orders = {}
    for objective in ("makespan", "jct"):
        client = SimClient.from_spec("a100:4x1", truth=perf)
        client.submit(JobRequest(name="blocker", num_gpus=4, wrap="sleep 600"))
        client.advance(1)
        ids = {client.submit(JobRequest(name=f"j{it}", num_gpus=4, comment=with_tag(tag_for("vgg16", it), None),
                                        time_limit_s=7200, extra={"model": "vgg16", "iterations": it,
                                                                  "batch_size": 12})): it
               for it in (20000, 60000, 40000)}
        reorderer = Reorderer(site, client, None, objective=objective)
        assert reorderer.policy.objective == objective
        out = reorderer.round(dry_run=True)
        decided = sorted(out.result.plan.decisions, key=lambda d: -d.priority)
        orders[objective] = [ids[d.job_id] for d in decided]
    assert orders["makespan"] == orders["jct"] == [20000, 40000, 60000]


@pytest.mark.slurm
def test_cron_line_runs_as_written(slurm_cluster, site, tmp_path):
    """The command of scripts/msched.cron, run by sh as cron runs it (paths swapped for this machine's),
    appends one summary line per run to the log."""
    from helpers import REPO

    line = next(ln for ln in (REPO / "scripts" / "msched.cron").read_text().splitlines()
                if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0])
    fields = line.split(None, 6)
    assert fields[:5] == ["*"] * 5 and fields[5] == "root"
    log = tmp_path / "reorder.log"
    command = (fields[6].replace("/etc/slurm/slurm.conf", str(slurm_cluster.conf))
               .replace("/opt/msched/.venv/bin/msched", MSCHED).replace("/var/log/msched/reorder.log", str(log)))
    for _ in range(2):
        proc = subprocess.run(["sh", "-c", command], env={"PATH": "/usr/bin:/bin", "MSCHED_CONFIG": site.source},
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and not proc.stdout and not proc.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all(" msched-reorder[" in ln and " INFO round pending=" in ln for ln in lines)
