"""The store on a real SQLite file: concurrent writers, schema version, permissions, default config."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from msched.config import load_config
from msched.slurm.base import SlurmJob
from msched.store.db import Store, StoreError, open_store
from msched.store.schema import SCHEMA_VERSION, Decision, Job, Meta, ReferenceModel, Round, Run
from msched.store.writes import ingest_jobs, record_completions, record_round
from msched.tag import JobTag, with_tag

WRITERS = 20
ROWS_EACH = 15


def _writer(url: str, worker: int, barrier, errors) -> None:  # noqa: ANN001
    """Open the store at the same moment as the others (schema creation races too), then do
    read-modify-write transactions: the pattern that fails with "database is locked" under plain BEGIN."""
    try:
        barrier.wait(timeout=60)
        store = Store(url)
        run = store.run_id("slurm", "concurrency")
        for i in range(ROWS_EACH):
            with store.write() as s:
                counter = s.get(Meta, "counter")
                value = int(counter.value) if counter else 0
                s.add(Job(run_id=run, job_id=f"{worker}-{i}", first_seen=time.time()))
                s.merge(Meta(key="counter", value=str(value + 1)))
        store.dispose()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        errors.put(f"worker {worker}: {type(exc).__name__}: {exc}")


def test_concurrent_writers_lose_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'db' / 'msched.db'}"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(WRITERS)
    errors = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, w, barrier, errors)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert not problems, problems
    assert all(p.exitcode == 0 for p in procs)
    store = Store(url)
    with store.read() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == WRITERS * ROWS_EACH
        assert s.get(Meta, "counter").value == str(WRITERS * ROWS_EACH)   # no lost update
        assert s.scalar(select(func.count()).select_from(Run)) == 1       # one run row, created once
        assert s.get(Meta, "schema_version").value == str(SCHEMA_VERSION)


def test_wal_and_busy_timeout(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 30000


def test_write_waits_for_another_writer(tmp_path):
    """A writer holding the lock briefly delays ours; it does not fail it."""
    path = tmp_path / "m.db"
    store = Store(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO meta(key, value) VALUES ('other', '1')")
    t0 = time.monotonic()
    threading.Timer(1.0, lambda: other.execute("COMMIT")).start()
    with store.write() as s:
        s.merge(Meta(key="mine", value="1"))
    waited = time.monotonic() - t0
    assert waited >= 0.9
    with store.read() as s:
        assert s.get(Meta, "other").value == "1" and s.get(Meta, "mine").value == "1"


def test_failed_write_rolls_back(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    with pytest.raises(ZeroDivisionError):
        with store.write() as s:
            s.add(Meta(key="half", value="x"))
            s.flush()
            1 / 0  # noqa: B018
    with store.read() as s:
        assert s.get(Meta, "half") is None


def test_newer_schema_version_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    store = Store(url)
    with store.write() as s:
        s.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION + 1)))
    store.dispose()
    with pytest.raises(StoreError, match=r"schema version \d+, newer than this msched supports"):
        Store(url)


def test_added_column_appears_in_older_database(tmp_path):
    """Schema changes are additive: a column missing from an existing database is added on open."""
    path = tmp_path / "m.db"
    Store(f"sqlite:///{path}").dispose()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE rounds DROP COLUMN busy_gpus")
    con.commit()
    con.close()
    store = Store(f"sqlite:///{path}")
    with store.engine.connect() as conn:
        cols = {r[1] for r in conn.exec_driver_sql("PRAGMA table_info(rounds)")}
    assert "busy_gpus" in cols


def test_permissions(tmp_path):
    path = tmp_path / "state" / "sub" / "msched.db"
    old = os.umask(0o022)
    try:
        store = Store(f"sqlite:///{path}")
        with store.write() as s:
            s.merge(Meta(key="x", value="1"))
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(path.parent) == 0o750
    assert mode(path) == 0o640
    assert mode(path.with_name("msched.db.lock")) == 0o600
    wal = path.with_name("msched.db-wal")
    if wal.exists():
        assert mode(wal) & 0o007 == 0      # SQLite copies the database file's mode
    assert path.stat().st_uid == os.geteuid()


def test_reader_does_not_create(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store(f"sqlite:///{tmp_path / 'nope.db'}", create=False)
    assert not (tmp_path / "nope.db").exists()


def test_bad_url_is_one_line():
    with pytest.raises(StoreError) as info:
        Store("nosuchdialect://x/y")
    assert "\n" not in str(info.value)


def test_unwritable_directory_is_clear(tmp_path):
    if os.geteuid() == 0:
        target = "/proc/msched-test/m.db"     # root can write anywhere else
    else:
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        target = str(locked / "sub" / "m.db")
    with pytest.raises(StoreError, match="cannot create database"):
        Store(f"sqlite:///{target}")


def test_default_config_works_without_a_file(tmp_path, monkeypatch):
    monkeypatch.delenv("MSCHED_CONFIG", raising=False)
    monkeypatch.setattr("msched.config.DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)       # an ordinary user's defaults
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    cfg = load_config()
    assert cfg.source == "defaults"
    store = open_store(cfg)
    assert store.path == tmp_path / "xdg" / "msched" / "msched.db"
    assert store.run_id("slurm", cfg.cluster_name) == store.run_id("slurm", cfg.cluster_name)


def test_in_memory_url_works():
    store = Store("sqlite://")
    rid = store.run_id("sim", "sim:msched:t")
    with store.read() as s:
        assert s.get(Run, rid).kind == "sim"


def _tagged(job_id: str, state: str = "PENDING", **kw) -> SlurmJob:
    tag = JobTag(model="resnet18", ref="resnet18", group="resnet", sim=1.0, flops=1.0, iters=100, bs=64)
    return SlurmJob(job_id=job_id, state=state, num_gpus=1, submit_time=1000.0,
                    comment=with_tag(tag, "mine"), user="alice", **kw)


def test_ingest_and_completions(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    run = store.run_id("slurm", "c", gpus={"a100": 4})
    jobs = [_tagged("1"), _tagged("2"), SlurmJob(job_id="3", state="PENDING", comment="not ours")]
    with store.write() as s:
        assert ingest_jobs(s, run, jobs, now=2000.0) == 2
        assert ingest_jobs(s, run, jobs, now=2001.0) == 0
    done = [_tagged("1", state="COMPLETED", start_time=2100.0, end_time=2500.0, gpu_type="a100"),
            _tagged("9", state="COMPLETED", start_time=2200.0, end_time=2300.0, gpu_type="titanv")]
    with store.write() as s:
        assert record_completions(s, run, done, now=2600.0) == 2
    with store.read() as s:
        rows = {j.job_id: j for j in s.scalars(select(Job))}
        assert set(rows) == {"1", "2", "9"}
        assert (rows["1"].start_time, rows["1"].end_time, rows["1"].actual_type) == (2100.0, 2500.0, "a100")
        assert rows["1"].state == "COMPLETED" and rows["2"].state == "PENDING"
        assert rows["9"].actual_type == "titanv"
        assert rows["1"].model == "resnet18" and rows["1"].iterations == 100 and rows["1"].user == "alice"
        assert s.get(ReferenceModel, "resnet18").group == "resnet"


def test_record_round(tmp_path):
    from dataclasses import dataclass, field

    from msched.policy.snapshot import ClusterSnapshot, JobDecision, NodeState, PendingJob, Plan

    @dataclass
    class _Update:          # the fields record_round reads from the round core's Update
        job_id: str

    @dataclass
    class _Result:          # the fields record_round reads from the round core's RoundResult
        time: float
        snapshot: ClusterSnapshot
        plan: Plan
        updates: list = field(default_factory=list)
        skipped: list = field(default_factory=list)
        plan_seconds: float = 0.01
        update_calls: int = 0

    store = Store(f"sqlite:///{tmp_path / 'm.db'}")
    run = store.run_id("slurm", "c")
    with store.write() as s:
        ingest_jobs(s, run, [_tagged("1"), _tagged("2")], now=100.0)
    snap = ClusterSnapshot(now=100.0, nodes=(NodeState("n1", "a100", 4, 1), NodeState("n2", "titanv", 4, 4)),
                           pending=(PendingJob("1", 0.0, 1), PendingJob("2", 0.0, 1)))
    plan = Plan("msched", [JobDecision("1", 20, ("a100",), 100.0, 200.0, {"a100": 100.0, "titanv": 150.0}),
                           JobDecision("2", 10, ("titanv",), 100.0, 250.0, {"titanv": 150.0})],
                est_makespan_end=250.0)
    res = _Result(100.0, snap, plan, updates=[_Update("1"), _Update("1")], skipped=["2"], update_calls=2)
    with store.write() as s:
        rid = record_round(s, run, res)
        dry = record_round(s, run, res, dry_run=True)
        failed = record_round(s, run, None, error="slurm down", time=160.0)
    with store.read() as s:
        r = s.get(Round, rid)
        assert (r.pending, r.running, r.changes, r.skipped, r.est_makespan_s) == (2, 0, 2, 1, 150.0)
        assert r.busy_gpus == {"a100": 3, "titanv": 0} and r.total_gpus == {"a100": 4, "titanv": 4}
        ds = {d.job_id: d for d in s.scalars(select(Decision).where(Decision.round_id == rid))}
        assert ds["1"].changed and not ds["2"].changed and ds["2"].gpu_type == "titanv"
        assert ds["1"].est_runtime == {"a100": 100.0, "titanv": 150.0}
        assert s.get(Round, dry).dry_run and s.get(Round, failed).error == "slurm down"
        jobs = {j.job_id: j for j in s.scalars(select(Job))}
        assert jobs["1"].planned_type == "a100" and jobs["2"].est_runtime == {"titanv": 150.0}


def test_nested_write_is_refused_at_once(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'm.db'}", busy_timeout_s=30)
    t0 = time.monotonic()
    with store.write() as s:
        s.merge(Meta(key="outer", value="1"))
        with pytest.raises(StoreError, match="nested"):
            with store.write():
                pass
    assert time.monotonic() - t0 < 5
    with store.read() as s:
        assert s.get(Meta, "outer").value == "1"       # the outer transaction still commits


# ------------------------------------------------------------- what rounds leave in the store (issue 21)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_reorder as br  # noqa: E402
import bench_store as bs  # noqa: E402


def _sim_reorderer(tmp_path, pending: int, seed: int = 0):  # noqa: ANN001, ANN202
    from msched.config import Config
    from msched.rounds.reorder import Reorderer, open_site_store

    c, blockers, _perf = br.busy_sim(pending, seed)
    cfg = Config(state_dir=tmp_path / "state", performance=str(br.PERF), cluster_name="t", backend="cli")
    store = open_site_store(cfg)
    return c, blockers, cfg, store, Reorderer(cfg, c, store, run_kind="sim", run_name="t", publish=False)


def _decision_rows(store, round_id: int) -> int:  # noqa: ANN001
    with store.read() as s:
        return s.scalar(select(func.count()).select_from(Decision).where(Decision.round_id == round_id))


def test_only_changed_plans_get_rows_and_a_new_process_keeps_the_incumbent(tmp_path):
    from msched.rounds.reorder import Reorderer
    from msched.store.writes import load_incumbent

    c, _b, cfg, store, reorderer = _sim_reorderer(tmp_path, 120, seed=3)
    first = reorderer.round()
    placed = len(first.result.incumbent)
    assert placed > 50 and _decision_rows(store, first.round_id) == placed
    c.advance(1)
    # a new process (cron): the incumbent comes from the store, equal to what the last round held
    again = Reorderer(cfg, c, store, run_kind="sim", run_name="t", publish=False)
    with store.read() as s:
        loaded = load_incumbent(s, again.run_id([]))
    assert dict(loaded.priority) == dict(first.result.incumbent.priority)
    assert dict(loaded.types) == dict(first.result.incumbent.types)
    second = again.round()
    assert second.result.update_calls == 0 and _decision_rows(store, second.round_id) == 0
    with store.read() as s:
        r = s.get(Round, second.round_id)
        assert (r.changes, r.moved, r.decision_rows, r.gain_makespan_s) == (0, 0, 0, 0.0)
        writes = s.scalars(select(Job.writes).where(Job.planned_priority.is_not(None))).all()
    assert sum(writes) == first.result.update_calls
    store.dispose()


def test_a_round_that_changes_nothing_adds_under_16_kb_at_1000_pending(tmp_path):
    per = bs.bytes_per_round(1000, 20, tmp_path)
    # the first round moves the arrivals worth it; a few left for later (not worth it against what Slurm
    # held, worth it against the plan the first round wrote) move under the rate limit, then none
    each = per["unchanged_round_writes_each"]
    assert max(each) <= 0.01 * 1000 and each[-10:] == [0] * 10
    assert per["unchanged_round_bytes"] < 16 * 1024
    assert per["first_round_bytes"] > 16 * 1024 * 10       # the first round did record the whole plan


def _round_figures(path):  # noqa: ANN001, ANN202
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from msched.report.data import build_report

    engine = create_engine(f"sqlite:///{path}")
    with Session(engine) as s:
        rep = build_report(s, database=str(path))
    engine.dispose()
    (run,) = rep.runs
    return run.rounds, run.gpu_types


def test_retention_folds_old_rounds_into_days_and_the_report_spans_the_boundary(tmp_path):
    from msched.store.retention import DAY_S, day_of, prune
    from msched.store.schema import RoundDay

    path = tmp_path / "m.db"
    month = bs.generate_month(path, days=3, pending=40, churn=0.05, retention_days=1, jobs_per_day=20,
                              prune_as_rounds=False)
    before, usage_before = _round_figures(path)
    store = Store(f"sqlite:///{path}")
    run = store.run_id("slurm", "month")
    calls = []
    while True:
        with store.write() as s:
            n = prune(s, run, month["end"], 1 * DAY_S, batch=500)
        calls.append(n)
        if n == 0:
            break
    assert max(calls) <= 500 and len(calls) > 2             # small batches
    cutoff = day_of(month["end"] - DAY_S)
    with store.read() as s:
        assert s.scalar(select(func.min(Round.time))) >= cutoff
        assert s.scalar(select(func.count()).select_from(Decision)) == \
            s.scalar(select(func.sum(Round.decision_rows)))     # decisions of pruned rounds went with them
        days = s.scalars(select(RoundDay)).all()
        assert sum(d.rounds for d in days) == sum(calls)
    store.dispose()
    after, usage_after = _round_figures(path)
    assert after.aggregated_days == len(days) >= 2
    assert (after.count, after.total_changes, after.max_changes, after.dry_runs, after.skipped) == \
        (before.count, before.total_changes, before.max_changes, before.dry_runs, before.skipped)
    assert after.mean_plan_s == pytest.approx(before.mean_plan_s, rel=1e-6)
    for a, b in zip(usage_after, usage_before, strict=True):      # daily means instead of every sample
        assert a.busy_share == pytest.approx(b.busy_share, abs=0.02)


@pytest.mark.slow
def test_a_generated_month_at_1000_pending_stays_under_300_mb(tmp_path):
    month = bs.generate_month(tmp_path / "month.db", days=30, pending=1000, churn=0.01, retention_days=14)
    assert month["rounds"] == 30 * 1440
    assert month["bytes"] < 300 * 2**20
    assert month["bytes_unpruned"] < 300 * 2**20            # even before any pruning
