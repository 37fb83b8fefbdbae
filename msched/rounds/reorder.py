"""The reorderer: one round of re-planning the pending queue, around the shared round core.

`msched reorder` (cron, or `--every N`) and the simulator's rounds run the same `msched.rounds.core.run_round`;
this module adds what only the real cluster needs, in an order that keeps the queue valid whatever fails:

1. take the round lock (flock, non-blocking: a second run steps aside and exits 0);
2. check that the database can be written *before* anything changes in Slurm;
   the light round: read a digest of Slurm's queue and nodes (`SlurmClient.queue_digest`: one squeue in a
   tight format, one sinfo); when it is the last round's, that round wrote nothing and changed no held
   plan, the clock is before its plan's `stable_until`, no hold is open and the begin-time lever is off,
   the round has the last one's inputs: record a summary row, publish the free time again, and stop
   (no squeue --json, no snapshot, no plan: the planning core is not even imported); the round's own
   reads start beside the digest (config `digest_overlap`) and are ended when the round is light; when
   sdiag's job counters moved since the last light check (config `activity_hint`), a job arrived,
   started or ended: the round skips the digest and reads the queue at once;
3. read jobs and nodes once (batched), ingest tags not seen before;
4. run the round against the incumbent the store holds (plan, keep what is worth its writes, diff,
   apply only the changes within the write budget; jobs that started meanwhile are skipped);
5. record the round, the jobs whose plan changed and the jobs' actual starts/ends/types (completion
   tracking), then prune a small batch of rounds past the retention into daily aggregates;
6. publish the projected free time per GPU type for msub (an atomic rename, world-readable).

Failure handling: Slurm unreachable or the database unwritable before step 4 -> nothing is changed,
one line, non-zero exit. If recording fails after step 4, the changes already made are a valid queue
(each update is a whole priority or constraint on a pending job), and the log line says so.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from msched.config import Config
from msched.slurm.base import ACTIVE_STATES, SlurmClient, SlurmError, SlurmJob, SlurmNode, SlurmUnavailable
from msched.store.base import DAY_S, day_of
from msched.util.collector import without_cyclic_gc
from msched.util.files import write_atomically
from msched.util.text import one_line

log = logging.getLogger("msched.rounds.reorder")

STATE_DIR_MODE = 0o755      # the free-time file in it is for every user's msub
FREE_TIME_MODE = 0o644
LOCK_MODE = 0o600
ACTIVITY_FILE = "slurm-activity"   # in the state directory: the job counters the last light check read
COMPLETION_OVERLAP_S = 120.0   # re-read finished jobs this far before the last round: clocks and late writes


class ReorderError(RuntimeError):
    """A round that could not run; one line, and it says whether Slurm was changed."""


class LockBusy(RuntimeError):
    """Another reorder round holds the lock."""


@dataclass(frozen=True)
class RoundOutcome:
    """What one round did, for the log line, the dry-run table and the tests."""

    result: Any                           # msched.rounds.core.RoundResult
    round_id: int | None = None
    new_jobs: int = 0
    completions: int = 0
    free_time: dict[str, float] = field(default_factory=dict)
    dry_run: bool = False
    db_seconds: float = 0.0               # checking, ingesting and recording (the database's share)
    unchanged: bool = False               # Slurm as the last round left it: not planned (result is None)
    light: bool = False                   # ... found by the queue's digest alone: not even read
    pending: int = 0                      # the round's pending and running GPU jobs (an unchanged round)
    running: int = 0
    read_because: str = ""                # why a round of its own read Slurm's queue (`Reorderer.READ_REASONS`)

    def summary(self) -> str:
        r = self.result
        if r is None and self.light:
            return (f"round pending={self.pending} running={self.running} updates=0 unchanged=yes light=yes "
                    "(Slurm's queue digest as the last round left it: not read, not planned)")
        read = f" read={self.read_because}" if self.read_because else ""
        if r is None:
            return (f"round pending={self.pending} running={self.running} updates=0 unchanged=yes "
                    f"completions={self.completions}{read} (Slurm as the last round left it: not planned)")
        snap = r.snapshot
        managed = sum(1 for p in snap.pending if getattr(p, "managed", True))
        plan = r.plan
        est = getattr(plan, "est_makespan_end", None) if plan is not None else None
        makespan = f"{est - r.time:.0f}s" if est is not None else "-"
        free = snap.gpus_free
        total = snap.gpus_total
        gpus = ",".join(f"{t}:{free.get(t, 0)}/{total[t]}" for t in sorted(total))
        head = "dry-run round" if self.dry_run else "round"
        updates = f"would_update={len(r.updates)}" if self.dry_run else f"updates={r.update_calls}"
        st = getattr(r, "settle", None)
        buys = (f" moved={st.moved} kept={st.kept} held_back={st.held_back} buys=[{st.buys()}]"
                + (f" replanned_head={st.head}" if getattr(st, "head", None) is not None else "")
                if st is not None else "")
        return (f"{head} pending={len(snap.pending)} managed={managed} running={len(snap.running)} "
                f"{updates}{buys} skipped={len(r.skipped)} new={self.new_jobs} "
                f"completions={self.completions} plan={r.plan_seconds * 1000:.1f}ms est_makespan={makespan} "
                f"free_gpus={gpus}{read}")


# ---------------------------------------------------------------------------------------------- lock
@contextmanager
def round_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold the reorder lock for one round; raise LockBusy at once when another round holds it."""
    path = Path(path)
    ensure_state_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, LOCK_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockBusy(f"another msched reorder round holds {path}") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)      # closing drops the flock


def ensure_state_dir(path: str | os.PathLike) -> None:
    path = Path(path)
    if not path.exists():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, STATE_DIR_MODE)


def open_site_store(config: Config):  # noqa: ANN201
    """The site's store, with the state directory made first as msub needs it (0755: every user's msub
    reads the free-time file there; the database file itself is 0640 and the lock 0600)."""
    from msched.store.db import open_store

    ensure_state_dir(config.state_dir)
    return open_store(config)


# ------------------------------------------------------------------------------------------ free time
def publish_free_time(path: str | os.PathLike, now: float, free_at: dict[str, float],
                      plan_end: float | None = None, price: dict | None = None) -> None:
    """Write `{"time": now, "free_at": {type: epoch}, "plan_end": epoch}` for msub: temp file + rename,
    so a reader sees the old file or the new one, never half of one. `plan_end` (the plan's estimated
    last end; packing does not slow a job past it) is left out when unknown. `price` (config
    `submit_price`: `{"price": {type: value}, "price_measure": "saving"|"ratio"}`, msched.policy.price)
    is added when the round set prices."""
    path = Path(path)
    ensure_state_dir(path.parent)
    data = {"time": now, "free_at": {t: float(v) for t, v in sorted(free_at.items())}}
    if plan_end is not None:
        data["plan_end"] = float(plan_end)
    if price and price.get("price"):
        data["price"] = {t: float(v) for t, v in sorted(price["price"].items())}
        data["price_measure"] = str(price.get("price_measure", "saving"))
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n", mode=FREE_TIME_MODE)
    if not os.stat(path.parent).st_mode & 0o001:
        log.warning("%s is not reachable by other users (directory mode lacks o+x): msub cannot read it",
                    path)


# ------------------------------------------------------------------------------------------ reorderer
def _settles(last: Any, now: float, key: str, value: str) -> bool:
    """Whether a round now would decide as the last recorded round (`last`, its row) did: its `key`
    column (state_key or queue_digest) is `value`, and `_could_settle`."""
    return _could_settle(last, now) and getattr(last, key) == value


def _could_settle(last: Any, now: float) -> bool:
    """Whether the last recorded round (`last`, its row) left the incumbent as it found it, so that a
    round now that reads the same Slurm would decide as it did: it wrote nothing to Slurm, changed no
    job's held plan, and `now` is before its plan's `stable_until`."""
    return _unsettled_because(last, now) is None


def _unsettled_because(last: Any, now: float) -> str | None:
    """Which of `_could_settle`'s conditions fails first (a `Reorderer.READ_REASONS` word), or None."""
    if last is None:
        return "no-planned-round"
    if last.changes:
        return "last-round-wrote"
    if last.decision_rows:
        return "plan-changed"
    if last.stable_until is not None and now >= last.stable_until:
        return "plan-expired"
    return None


class _SqlaView:
    """What a round reads and writes in the store (msched.store.light.LightStore's methods), on a
    SQLAlchemy store: a database other than a SQLite file, a file the plain view cannot vouch for, or a
    store a caller opened itself (the simulator's `--db`, tests)."""

    def __init__(self, store) -> None:  # noqa: ANN001 - msched.store.db.Store
        self.store = store

    def run_id(self, kind: str, name: str) -> int | None:
        from sqlalchemy import select

        from msched.store.schema import Run
        with self.store.read() as session:
            return session.scalar(select(Run.id).where(Run.kind == kind, Run.name == name))

    def ensure_run(self, kind: str, name: str, policy: str = "msched", gpus: dict[str, int] | None = None) -> int:
        return self.store.run_id(kind, name, policy=policy, gpus=gpus)

    def last_planned_round(self, run_id: int):  # noqa: ANN201 - a Round row, or None
        from msched.store.queries import last_planned_round

        with self.store.read() as session:
            last = last_planned_round(session, run_id)
            if last is not None:
                session.expunge(last)
        return last

    def last_round_time(self, run_id: int) -> float | None:
        from msched.store.queries import last_round_time

        with self.store.read() as session:
            return last_round_time(session, run_id)

    def open_hold_kinds(self) -> list[str]:
        from msched.store.holds import HoldJournal

        return [e.kind for e in HoldJournal(self.store).open_entries()]

    def incumbent(self, run_id: int):  # noqa: ANN201 - msched.rounds.settle.Incumbent
        from msched.store.writes import load_incumbent

        with self.store.read() as session:
            return load_incumbent(session, run_id)

    def active_job_ids(self, run_id: int) -> set[str]:
        from msched.store.writes import active_job_ids

        with self.store.read() as session:
            return active_job_ids(session, run_id)

    def ingest(self, run_id: int, jobs: Sequence[SlurmJob], now: float) -> int:
        from msched.store.writes import ingest_jobs

        with self.store.write() as session:
            return ingest_jobs(session, run_id, jobs, now)

    def record_unchanged_round(self, run_id: int, last: Any, now: float, pending: int, running: int,
                               **kwargs: Any) -> int:
        from msched.store.writes import record_unchanged_round

        with self.store.write() as session:
            return record_unchanged_round(session, run_id, last, now, pending, running, **kwargs)

    def record(self, run_id: int, result: Any, tracked: Sequence[SlurmJob], now: float, vanished: Sequence[str], *,
               unchanged: tuple | None = None, state_key: str | None = None,
               queue_digest: str | None = None) -> tuple[int, int, int]:
        from msched.store.writes import (
            mark_vanished,
            record_completions,
            record_round,
            record_unchanged_round,
        )

        with self.store.write() as session:
            round_id = record_unchanged_round(session, run_id, unchanged[0], now, *unchanged[1:],
                                              queue_digest=queue_digest) if unchanged \
                else record_round(session, run_id, result, state_key=state_key, queue_digest=queue_digest)
            done = record_completions(session, run_id, tracked, now=now)
            lost = mark_vanished(session, run_id, vanished) if vanished else 0
        return round_id, done, lost

    def prune(self, run_id: int, now: float, retention_s: float) -> int:
        from msched.store.retention import prune

        with self.store.write() as session:
            return prune(session, run_id, now, retention_s)

    def prune_due(self, run_id: int, cutoff: float) -> bool:   # noqa: ARG002 - prune checks itself
        return True


def _fail(msg: str) -> ReorderError:
    return ReorderError(msg.replace("\n", " "))


class Reorderer:
    """One site's reorder rounds: a Slurm client (real or simulated), the store, a policy and an
    estimator. `run_round` of `msched.rounds.core` does the planning and the writing; this class wraps it
    with ingestion, recording, completion tracking and publishing."""

    # why a round read Slurm's queue instead of being light (RoundOutcome.read_because, the log line's read=):
    # the light check's conditions in the order `_light_round` tries them
    READ_REASONS = (
        "light-checks-off",         # skip_unchanged is off (every round reads)
        "begin-time-lever",         # the begin-time lever decides on the clock: never light
        "no-light-check",           # no store to compare with
        "no-planned-round",         # no earlier planned round of this run
        "last-round-wrote",         # the last planned round wrote to Slurm
        "plan-changed",             # ... or changed a job's held plan
        "plan-expired",             # its plan's stable_until has passed
        "open-hold",                # a hold or begin time in the journal to replay
        "job-counters-moved",       # sdiag's job counters moved (activity_hint)
        "digest-unreadable",        # the queue's digest could not be read
        "digest-differs",           # the digest is not the last round's
        "no-published-free-time",   # nothing published to carry on
    )

    def __init__(self, config: Config, client: SlurmClient, store, *, objective: str | None = None,  # noqa: ANN001
                 policy=None, estimator=None, run_kind: str = "slurm", run_name: str | None = None,  # noqa: ANN001
                 publish: bool = True):
        self.config = config
        self.client = client
        self.store = store
        self.objective = objective or config.objective
        self._policy = policy
        self._estimator = estimator
        self.run_kind = run_kind
        self.run_name = run_name or config.cluster_name
        self.publish = publish
        self._run_id: int | None = None
        self._last_completion_check: float | None = None
        self._activity_kept = False       # this process's light check read Slurm's job counters already
        self.skip_unchanged = True        # a round that finds the last round's Slurm state does not plan
        self._read_because = ""           # this round's READ_REASONS word (RoundOutcome.read_because)

    @property
    def _db(self):  # noqa: ANN202 - msched.store.light.LightStore, or a _SqlaView
        """The round's reads and writes of the store: plain sqlite3 on a light view, else SQLAlchemy's."""
        return self.store if getattr(self.store, "light", False) else _SqlaView(self.store)

    @property
    def journal(self):  # noqa: ANN201 - msched.store.holds.HoldJournal, or None without a store
        """The hold journal (SQLAlchemy's: a light view opens the SQLAlchemy store for it)."""
        if self.store is None:
            return None
        from msched.store.holds import HoldJournal

        self._full_store()
        return HoldJournal(self.store)

    def replay_journal(self, jobs: list[SlurmJob] | None = None) -> list[str]:
        """Undo what an interrupted round or `--release` left held (msched.rounds.holds.replay), against
        the round's own read of the queue when given. Costs one database read when the journal has no
        open entry; returns the job ids released."""
        from msched.rounds.holds import replay

        if self.store is None or not self._db.open_hold_kinds():
            return []
        try:
            released = replay(self.client, self.journal, jobs=jobs)
            if released:
                log.info("released %d job(s) an interrupted round left held", len(released))
            return released
        except SlurmUnavailable as exc:
            raise _fail(f"Slurm unreachable: {one_line(exc)}; nothing changed") from None
        except SlurmError as exc:
            raise _fail(f"cannot replay the hold journal: {one_line(exc)}; run --release") from None

    @property
    def policy(self):  # noqa: ANN201
        """The site's policy, planning for the scheduler Slurm runs (read once, on first use: backfill,
        Slurm's default, when `scontrol show config` cannot be read)."""
        if self._policy is None:
            try:
                backfill = self.client.scheduler().backfill
            except SlurmError as exc:
                log.warning("cannot read Slurm's scheduler (%s); planning for sched/backfill", one_line(exc))
                backfill = True
            self._policy = default_policy(self.objective, self.config.starvation_age_s, backfill=backfill,
                                          managed_first=self.config.managed_first,
                                          time_box_s=self.config.plan_time_s, planner=self.config.planner,
                                          **self.config.price_options)
        return self._policy

    @property
    def estimator(self):  # noqa: ANN201
        """Loaded on first use: `--release` must work without a readable performance table."""
        if self._estimator is None:
            self._estimator = default_estimator(self.config)
        return self._estimator

    # ---------------------------------------------------------------- reading
    def read(self, *, completions: bool = False) -> tuple[list[SlurmJob], list[SlurmNode]]:
        """One batched read of the queue and the nodes; Slurm unreachable -> ReorderError. The nodes
        first: the command-line backend then knows every node's GPU type when it reads the queue, and
        runs one sinfo instead of two in a new process (cron's). `completions`: between the two, what
        the round's completions can read before the queue is read ahead (`SlurmClient.prefetch_finished`,
        from the window `_record` will ask for), while the prefetched squeue runs."""
        try:
            nodes = list(self.client.nodes())
            if completions:
                self.client.prefetch_finished(self._completion_since())
            return list(self.client.jobs(ACTIVE_STATES)), nodes
        except SlurmUnavailable as exc:
            raise _fail(f"Slurm unreachable: {one_line(exc)}; nothing changed") from None
        except SlurmError as exc:
            raise _fail(f"cannot read the queue from Slurm: {one_line(exc)}; nothing changed") from None

    def run_id(self, nodes: Sequence[SlurmNode]) -> int:
        if self._run_id is None:
            gpus: dict[str, int] = {}
            for n in nodes:
                if n.gpu_type:
                    gpus[n.gpu_type] = gpus.get(n.gpu_type, 0) + n.gpus
            self._run_id = self._db.ensure_run(self.run_kind, self.run_name, policy=self.policy.name, gpus=gpus)
        return self._run_id

    # ---------------------------------------------------------------- a round
    def round(self, *, dry_run: bool = False, now: float | None = None,
              jobs: list[SlurmJob] | None = None, nodes: list[SlurmNode] | None = None) -> RoundOutcome:
        """One round. Raises ReorderError (one line, saying whether Slurm was changed).

        A dry run reads Slurm and plans, and writes nothing anywhere: not Slurm, not the database
        (so it needs no database access), not the free-time file. `jobs`/`nodes` given: use them as
        the round's one read (tests pass an older read to make jobs start between read and write).
        A round that ends without an error vouches for the store it checked (msched.store.light's
        `vouch`: the next round may take the file on trust while it is as this one left it)."""
        light = self.store
        self._read_because = "" if dry_run or jobs is not None or nodes is not None else \
            "light-checks-off" if not self.skip_unchanged else ""
        outcome = self._round(dry_run=dry_run, now=now, jobs=jobs, nodes=nodes)
        if self._read_because and not outcome.light:
            outcome = replace(outcome, read_because=self._read_because)
        if not dry_run:
            for store in {id(light): light, id(self.store): self.store}.values():
                vouch = getattr(store, "vouch", None)
                if vouch is not None:
                    vouch()
        return outcome

    @without_cyclic_gc
    def _round(self, *, dry_run: bool, now: float | None, jobs: list[SlurmJob] | None,
               nodes: list[SlurmNode] | None) -> RoundOutcome:
        from msched.store.base import StoreError

        self._activity_kept = False
        db_s = 0.0
        if not dry_run:
            t0 = time.perf_counter()
            try:
                self.store.check_integrity()      # never keep writing into a damaged file
                self.store.check_writable()
            except StoreError as exc:
                raise _fail(f"{exc}; nothing changed in Slurm") from None
            db_s += time.perf_counter() - t0
        digest = None
        own_read = not dry_run and jobs is None and nodes is None and self.skip_unchanged
        if own_read:
            try:
                light, digest = self._light_round(self.client.now() if now is None else now)
            except BaseException:
                self.client.close()         # the reads started beside the digest (`_light_round`)
                raise
            if light is not None:
                return light
            if digest is None and not self.client.digest_of_read:
                digest = self._queue_digest()   # for the next round's light check: read before the queue
            self.client.digest_wanted = digest is None      # else the reads need not keep it
        # the jobs that ended before the completions' window are wanted by id only: the read need not parse them
        self.client.finished_before = self._completion_since() if not dry_run else None
        counters = own_read and not self._activity_kept and self._hinted()
        try:
            if jobs is None and nodes is None:
                # the queue's squeue and the sinfo run while the round loads the planning core and the
                # estimator (`SlurmClient.prefetch`; started already beside the light check's digest, if any)
                self.client.prefetch()
                if counters:                # a round that had no light check: sdiag beside the squeue
                    self.client.prefetch_activity()
            # the planning core: not for a light round
            from msched.policy.reservations import BeginTimeOptions
            from msched.rounds.core import TypeLever, run_round

            estimator = self.estimator
            if jobs is None or nodes is None:
                given = jobs
                read_jobs, read_nodes = self.read(completions=not dry_run and jobs is None and nodes is None)
                jobs = read_jobs if jobs is None else jobs
                nodes = read_nodes if nodes is None else nodes
                if not dry_run and given is None and self.replay_journal(jobs):
                    jobs = self.read()[0]       # released jobs have their priority back: plan with it
            if counters:
                self._keep_activity(self.client.activity())
        finally:
            self.client.close()         # a read started and not collected (a failure before the read)
        read_digest = self._read_digest_later() if own_read else None

        def round_digest() -> str | None:
            # the digest of this round's own read where the backend can tell it (the tight read): the one
            # the next round's light check compares with, without a second squeue; else the digest read
            # before it (a change between the two only makes the next round read the queue). Worked out
            # only for a round that wrote nothing: after one that wrote, no round is light
            return (read_digest() if read_digest is not None else None) or digest
        if now is None:
            now = self.client.now()
        state_key = None
        if not dry_run:
            t0 = time.perf_counter()
            state_key = self._state_key(jobs, nodes)
            quiet = self._unchanged_round(state_key, jobs, nodes, now, round_digest)
            if quiet is not None:
                return quiet
            db_s += time.perf_counter() - t0
        new = 0
        if not dry_run:
            t0 = time.perf_counter()
            try:
                new = self._db.ingest(self.run_id(nodes), jobs, now)
            except Exception as exc:  # noqa: BLE001 - any database failure: stop before touching Slurm
                raise _fail(f"cannot record jobs in {self.store.display_url}: {one_line(exc)}; "
                            "nothing changed in Slurm") from None
            db_s += time.perf_counter() - t0
        incumbent = self._incumbent(dry_run)
        journal = self.journal if self.config.begin_time_lever or self.config.priority_lever == "nice" else None
        try:
            result = run_round(self.client, self.policy, estimator, now=now, dry_run=dry_run,
                               starvation_age_s=self.config.starvation_age_s,
                               gpu_type_of=self.config.canonical_gpu_type, jobs=jobs, nodes=nodes,
                               incumbent=incumbent, settle_options=self.settle_options,
                               lever=TypeLever.from_config(self.config),
                               # the lever needs the journal to tell msched's begin times from the owners':
                               # a dry run without a database leaves it out
                               begin_times=BeginTimeOptions.from_config(self.config) if journal is not None else None,
                               journal=journal, priority_lever=self.config.priority_lever,
                               pack_guard=self.config.pack_guard, pack_exclude=self.config.pack_exclude,
                               # opened only when the round pairs shard jobs (the light path stays light)
                               exclusion_journal=(lambda: self.journal) if self.store is not None else None)
        except SlurmError as exc:
            raise _fail(f"Slurm failed during the round: {one_line(exc)}; every update already written "
                        "leaves a valid queue; the next round re-plans") from None
        if log.isEnabledFor(logging.DEBUG):
            verb = "would set" if dry_run else "set"
            for u in result.updates:
                log.debug("job %s: %s %s %s (was %s)", u.job_id, verb, u.field, u.value, u.old)
        free = result.free_time
        if dry_run:
            return RoundOutcome(result, free_time=free, dry_run=True)
        if self.publish:      # before recording: the plan is in Slurm now, whatever the database does next
            self._publish(now, free, getattr(result.plan, "est_makespan_end", None),
                          {"price": result.submit_price,
                           "price_measure": getattr(self.policy, "price_measure", "saving")})
        try:
            round_id, done, record_s = self._record(result, jobs, now, state_key=state_key,
                                                    queue_digest=round_digest() if not result.update_calls else None)
        except Exception as exc:  # noqa: BLE001 - the queue is valid whatever the database did
            raise _fail(f"round applied {result.update_calls} Slurm update(s) but recording it failed: "
                        f"{one_line(exc)}; the queue is valid (the next round re-plans)") from None
        t0 = time.perf_counter()
        self._prune(now)
        db_s += time.perf_counter() - t0
        return RoundOutcome(result, round_id=round_id, new_jobs=new, completions=done, free_time=free,
                            db_seconds=db_s + record_s)

    # ---------------------------------------------------------------- an unchanged queue
    def _tables(self) -> list:
        """The tables the configuration names, each as (path, size, time of change): a new table is a
        new setup (the plan depends on it)."""
        files: list = []
        for path in (self.config.performance, self.config.cost_model, self.config.gpu_specs):
            try:
                st = os.stat(path) if path else None
                files.append((path, st.st_size, st.st_mtime_ns) if st else None)
            except OSError:
                files.append((path, None))
        return files

    def _state_key(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode]) -> str:
        """`msched.rounds.core.slurm_state_key` of the read, with what else the plan depends on: this
        msched, the configuration, the tables it names (size and time of change) and the scheduler."""
        from msched import __version__
        from msched.rounds.core import slurm_state_key

        policy = self.policy
        setup = repr((__version__, repr(self.config), self.objective, getattr(policy, "name", ""),
                      getattr(policy, "backfill", None), self._tables()))
        return slurm_state_key(jobs, nodes, setup)

    def _digest_setup(self) -> str | None:
        """What the queue digest is hashed with: this msched, the configuration, the objective, the
        policy's name, the tables and Slurm's scheduler settings, all read without the planning core
        (the policy itself is built only when a round plans). None: the scheduler cannot be read."""
        from msched import __version__

        try:
            scheduler = repr(self.client.scheduler())
        except SlurmUnavailable as exc:
            raise _fail(f"Slurm unreachable: {one_line(exc)}; nothing changed") from None
        except SlurmError:
            return None             # the round reads Slurm whole and says what failed
        name = getattr(self._policy, "name", "") if self._policy is not None else "msched"
        return repr((__version__, repr(self.config), self.objective, name, scheduler, self._tables()))

    def _queue_digest(self) -> str | None:
        """`SlurmClient.queue_digest` with the round's setup (`_digest_setup`). None: no cheap read here."""
        setup = self._digest_setup()
        if setup is None:
            return None
        try:
            return self.client.queue_digest(setup)
        except SlurmUnavailable as exc:
            raise _fail(f"Slurm unreachable: {one_line(exc)}; nothing changed") from None
        except SlurmError:
            return None

    def _read_digest(self) -> str | None:
        """`SlurmClient.read_digest` (the digest of the round's own read) with the round's setup."""
        return self._read_digest_later()()

    def _read_digest_later(self) -> Callable[[], str | None]:
        """`_read_digest` of the reads made so far, worked out when called (`SlurmClient.read_digest_later`)."""
        setup = self._digest_setup()
        return (lambda: None) if setup is None else self.client.read_digest_later(setup)

    def _light_round(self, now: float) -> tuple[RoundOutcome | None, str | None]:
        """The light round: Slurm's queue digest is the last round's, that round wrote nothing and changed
        no job's held plan (so the incumbent is the same), the clock is before its plan's `stable_until`,
        no hold or begin time is open in the journal and the begin-time lever is off. Then this round has
        the last one's inputs and would decide the same (as `_unchanged_round`), and it knows so without
        reading the queue: one summary row (light), the free time published again (clamped to now), a
        batch of pruning. Returns (that round's outcome, its digest), or (None, the digest read or None)
        when the round must read Slurm. The digest (`SlurmClient.queue_digest`, one squeue and one sinfo)
        is read only when the store says a light round is possible: otherwise the round reads the queue
        anyway and takes the digest from that read (`SlurmClient.read_digest`), one squeue instead of two.

        Completions are not read: the digest covers every job Slurm remembers (squeue -t all, finished
        ones for MinJobAge), so an unchanged digest means no job started or ended since the last round's
        read; the next round that reads looks back to this round's time less COMPLETION_OVERLAP_S.
        What the digest cannot see (README): a user moving text between two of their own text fields."""
        if not self.skip_unchanged or self.config.begin_time_lever or self.store is None:
            self._read_because = "begin-time-lever" if self.config.begin_time_lever else "no-light-check"
            return None, None
        t0 = time.perf_counter()
        store = self._db
        rid = self._run_id if self._run_id is not None else store.run_id(self.run_kind, self.run_name)
        last = store.last_planned_round(rid) if rid is not None else None
        self._read_because = _unsettled_because(last, now) or ""
        if self._read_because:
            return None, None
        if any(kind != "nice" for kind in store.open_hold_kinds()):
            self._read_because = "open-hold"
            return None, None               # a hold or begin time to undo: the full round replays it
        # (the nice lever's entries stay open while msched steers a job: the record of its owner's offset
        # for --release, which a round's replay leaves alone)
        if self._counters_moved():
            self._read_because = "job-counters-moved"
            return None, None               # a job arrived, started or ended: read the queue at once
        # the round's own reads start beside the digest's squeue (`SlurmClient.prefetch`): when the digest
        # differs, the round collects them, so an event round waits for one squeue instead of two in a row
        # (eleventh pass); a light round ends them as soon as it knows it is light
        if self.config.digest_overlap:
            self.client.prefetch()
        digest = self._queue_digest()
        if digest is None or last.queue_digest != digest:
            self._read_because = "digest-unreadable" if digest is None else "digest-differs"
            return None, digest
        self.client.close()
        free = self._carry_published(now)
        if free is None:
            self._read_because = "no-published-free-time"
            return None, digest
        pending, running = int(last.pending or 0), int(last.running or 0)
        try:
            round_id = store.record_unchanged_round(rid, last, now, pending, running, queue_digest=digest, light=True)
        except Exception as exc:  # noqa: BLE001 - nothing was written to Slurm
            raise _fail(f"cannot record the round in {self.store.display_url}: {one_line(exc)}; "
                        "nothing changed in Slurm") from None
        if store.prune_due(rid, day_of(now - float(self.config.retention_days) * DAY_S)):
            self._prune(now, rid)
        return RoundOutcome(None, round_id=round_id, free_time=free, unchanged=True, light=True,
                            pending=pending, running=running, db_seconds=time.perf_counter() - t0), digest

    def _counters_moved(self) -> bool:
        """Whether Slurm's job counters (`SlurmClient.activity`: sdiag, no job-table read) differ from those
        the last light check read (kept in ACTIVITY_FILE in the state directory): a job arrived, started or
        ended since, so the queue's digest almost surely differs too and the light check's squeue would
        only delay the round's read (config `activity_hint`; twelfth pass). False when the hint is off or
        sdiag cannot tell. Only a hint: a round it sends on reads the queue whole and, when Slurm is as the
        last round left it after all, plans nothing (`_unchanged_round`); what the counters miss (a user's
        scontrol update, a node's state) the digest still sees."""
        if not self._hinted():
            return False
        self._activity_kept = True
        return self._keep_activity(self.client.activity())

    def _hinted(self) -> bool:
        return bool(self.config.activity_hint) and self.client.digest_of_read and self.store is not None

    def _keep_activity(self, now: str | None) -> bool:
        """Keep Slurm's job counters `now` in ACTIVITY_FILE; whether they differ from those kept there. A
        round that reads the queue without a light check keeps them too (read beside its squeue), so the
        light check after it compares with the counters of the last read of Slurm, not of the last check."""
        if now is None:
            return False
        path = Path(self.config.state_dir) / ACTIVITY_FILE
        try:
            if path.read_text(encoding="utf-8", errors="replace") == now:
                return False
        except OSError:
            pass
        try:
            write_atomically(path, now)
        except OSError as exc:      # only a hint: the next light check is skipped again
            log.debug("cannot keep Slurm's job counters in %s: %s", path, exc.strerror)
        return True

    def _full_store(self) -> None:
        """The hold journal needs the SQLAlchemy store (a hold to replay, the begin-time or nice lever): a
        light view (msched.store.light) opens it on the same file (disposed with the view)."""
        if getattr(self.store, "light", False):
            self.store = self.store.full()

    def _unchanged_round(self, state_key: str, jobs: list[SlurmJob], nodes: list[SlurmNode],
                         now: float, digest: Callable[[], str | None] | None = None) -> RoundOutcome | None:
        """When Slurm's state (`state_key`) is the one the last round read, the clock is before that
        plan's `stable_until`, and that round changed nothing (no Slurm update, no job's held plan in
        the store: the incumbent is the same), this round has the same inputs and would decide the same
        (a round is a pure function of the snapshot and the incumbent: issue 21): record one small row,
        track completions, publish the free time again and return the outcome; None when the round must
        plan. Moves waiting for the rate limit do not oblige a plan: with nothing changed they wait on
        the same decision. At 10,000 pending this saves the snapshot, the plan and the evaluations
        (seconds of CPU every minute). The begin-time lever decides on the clock, so it always plans."""
        if not self.skip_unchanged or self.config.begin_time_lever or self.store is None:
            return None
        t0 = time.perf_counter()
        last = self._settled_round(self.run_id(nodes), now, "state_key", state_key)
        if last is None:
            return None
        free = self._carry_published(now)
        if free is None:
            return None                     # no free-time file to carry on: plan, and publish it
        gpu_jobs = [j for j in jobs if j.num_gpus > 0]
        pending = sum(1 for j in gpu_jobs if j.is_pending)
        running = sum(1 for j in gpu_jobs if j.is_running)
        try:
            round_id, done, record_s = self._record(None, jobs, now, unchanged=(last, pending, running),
                                                    queue_digest=digest() if digest is not None else None)
        except Exception as exc:  # noqa: BLE001 - nothing was written to Slurm
            raise _fail(f"cannot record the round in {self.store.display_url}: {one_line(exc)}; "
                        "nothing changed in Slurm") from None
        self._prune(now)
        return RoundOutcome(None, round_id=round_id, completions=done, free_time=free, unchanged=True,
                            pending=pending, running=running, db_seconds=time.perf_counter() - t0)

    def _settled_round(self, run_id: int, now: float, key: str, value: str):  # noqa: ANN202 - a Round row, or None
        """The run's last recorded round when a round now would decide as it did (`_settles`); else None."""
        last = self._db.last_planned_round(run_id)
        return last if _settles(last, now, key, value) else None

    def _publish(self, now: float, free: dict[str, float], plan_end: float | None, price: dict | None = None) -> None:
        try:
            publish_free_time(self.config.free_time_path, now, free, plan_end, price)
        except OSError as exc:
            log.warning("cannot publish %s: %s (msub treats all types as free)",
                        self.config.free_time_path, exc.strerror)

    def _carry_published(self, now: float) -> dict[str, float] | None:
        """A round that does not plan carries the last round's published free times, plan end and submit
        prices on to `now` (`_published_free_time`, then `_publish` when this reorderer publishes) and
        returns the free times; None when there is no readable file (the round must plan, and publish)."""
        if not self.publish:
            return {}
        published = self._published_free_time(now)
        if published is not None:
            self._publish(now, *published)
        return None if published is None else published[0]

    def _published_free_time(self, now: float) -> tuple[dict[str, float], float | None, dict] | None:
        """The free time the last round published, each type clamped to now, its plan end and its submit
        prices (carried on unchanged: packing and msub judge by them); None when there is no readable file."""
        try:
            data = json.loads(Path(self.config.free_time_path).read_text())
            free = {str(t): max(float(v), now) for t, v in dict(data["free_at"]).items()}
            end = data.get("plan_end")
            price = {"price": dict(data.get("price") or {}), "price_measure": data.get("price_measure", "saving")}
            return free, (float(end) if end is not None else None), price
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    @property
    def settle_options(self):  # noqa: ANN201 - msched.rounds.settle.SettleOptions
        from msched.rounds.settle import SettleOptions

        return SettleOptions(write_budget=int(self.config.write_budget),
                             plan_margin=float(self.config.settle_margin),
                             moves_per_change=int(self.config.moves_per_change),
                             head_gpus=float(self.config.write_head) or None,
                             replan_head=float(self.config.replan_head) or None,
                             trial_workers=int(self.config.trial_workers))

    def _incumbent(self, dry_run: bool):  # noqa: ANN202
        """The plan the store holds the pending jobs to (None: no store, or none readable; the round then
        places every job as new). A dry run reads it when the database exists and can be read."""
        store = self.store
        opened = None
        try:
            if store is None:
                if not dry_run:
                    return None
                from msched.store.light import open_light_store
                store = opened = open_light_store(self.config)
                if store is None:
                    from msched.store.db import open_store
                    store = opened = open_store(self.config, create=False)
            view = store if getattr(store, "light", False) else _SqlaView(store)
            rid = self.run_id([]) if self._run_id is not None or not dry_run else view.run_id(self.run_kind,
                                                                                              self.run_name)
            if rid is None:
                return None
            return view.incumbent(rid)
        except Exception as exc:  # noqa: BLE001 - without it the round still plans (every job as new)
            if not dry_run:
                raise _fail(f"cannot read the incumbent plan from {store.display_url}: {one_line(exc)}; "
                            "nothing changed in Slurm") from None
            return None
        finally:
            if opened is not None:
                opened.dispose()

    def _prune(self, now: float, run_id: int | None = None) -> None:
        """Fold a small batch of rounds past the retention into daily aggregates (its own transaction,
        after the round is recorded: a failure is logged and retried next round, never fails this one)."""
        try:
            rid = self.run_id([]) if run_id is None else run_id
            self._db.prune(rid, now, float(self.config.retention_days) * DAY_S)
        except Exception as exc:  # noqa: BLE001 - pruning is housekeeping
            log.warning("cannot prune old rounds in %s: %s (retried next round)", self.store.display_url,
                        one_line(exc))

    def _completion_since(self) -> float | None:
        """Where this round's completions look back from (`_record`): the last recorded round's time less
        COMPLETION_OVERLAP_S, read from the store by a new process (cron's); None for a run's first round
        or a store that cannot tell (then every finished job squeue remembers is read)."""
        if self._last_completion_check is None and self.store is not None:
            try:
                db = self._db
                rid = self._run_id if self._run_id is not None else db.run_id(self.run_kind, self.run_name)
                last = db.last_round_time(rid) if rid is not None else None
            except Exception:  # noqa: BLE001 - only a cheaper read is lost; the round reads the store again
                return None
            self._last_completion_check = None if last is None else last - COMPLETION_OVERLAP_S
        return self._last_completion_check

    def _record(self, result: Any, jobs: list[SlurmJob], now: float, *, state_key: str | None = None,
                unchanged: tuple | None = None, queue_digest: str | None = None) -> tuple[int, int, float]:
        """Record the round and track completions: started jobs from this read, ended ones from
        `client.finished_jobs` (squeue -t all within MinJobAge, the jobcomp file, sacct). `unchanged`:
        (the last round's row, pending, running) for a round that found Slurm unchanged (`result` None)."""
        finished: list[SlurmJob] = []
        rid = self.run_id([])
        db = self._db
        if self._last_completion_check is None:     # a new process (cron): since the last recorded round
            last = db.last_round_time(rid)
            self._last_completion_check = None if last is None else last - COMPLETION_OVERLAP_S
        finished_ok = True
        try:
            finished = list(self.client.finished_jobs(since=self._last_completion_check))
        except SlurmError as exc:
            finished_ok = False
            log.warning("cannot read finished jobs: %s (completions recorded next round)", one_line(exc))
        started = [j for j in jobs if j.start_time is not None and not j.is_pending]
        t0 = time.perf_counter()
        believed_active = db.active_job_ids(rid)
        seen = {j.job_id for j in jobs} | {j.job_id for j in finished}
        vanished = believed_active - seen if finished_ok else set()
        if vanished and self._last_completion_check is not None:
            # ended before the window we asked about (reorder was not running): ask for everything
            try:
                older = [j for j in self.client.finished_jobs(since=None) if j.job_id in vanished]
            except SlurmError as exc:
                log.warning("cannot read finished jobs: %s", one_line(exc))
                older, vanished = [], set()
            finished += older
            vanished -= {j.job_id for j in older}
        round_id, done, lost = db.record(rid, result, started + finished, now, sorted(vanished), unchanged=unchanged,
                                         state_key=state_key, queue_digest=queue_digest)
        if lost:
            log.info("%d job(s) no longer known to Slurm (end not recorded): state UNKNOWN", lost)
        self._last_completion_check = now - COMPLETION_OVERLAP_S
        return round_id, done, time.perf_counter() - t0

    # ---------------------------------------------------------------- release
    def release_all(self) -> list[str]:
        """Hand every managed pending job back to Slurm's own priorities and drop msched's type
        constraint (the round core's `release`), after replaying the hold journal (holds an interrupted
        round left, begin times). Returns the released job ids.

        The switch that turns msched off must work when the database does not: without a store it runs
        without the journal (the command warns that a kill during it could then leave a job held)."""
        from msched.rounds.core import release
        from msched.rounds.holds import replay

        journal = self.journal
        jobs, nodes = self.read()
        try:
            if journal is not None and replay(self.client, journal, jobs=jobs, everything=True):
                jobs, nodes = self.read()       # released jobs have their priority back: read them again
            return release(self.client, jobs=jobs, nodes=nodes, gpu_type_of=self.config.canonical_gpu_type,
                           journal=journal)
        except SlurmError as exc:
            raise _fail(f"Slurm failed during release: {exc}; jobs released so far are back to Slurm's "
                        "priorities; run --release again") from None


def default_policy(objective: str, starvation_age_s: float = 86400.0, backfill: bool = False, *,
                   managed_first: bool = False, time_box_s: float = 2.0, planner: str = "optimize",
                   **price):  # noqa: ANN003, ANN201 - price: config.price_options
    from msched.rounds.core import round_policy

    return round_policy("msched", objective=objective, starvation_age_s=starvation_age_s, backfill=backfill,
                        managed_first=managed_first, time_box_s=time_box_s, planner=planner, **price)


def default_estimator(config: Config):  # noqa: ANN201
    from msched.estimate.estimators import TagEstimator
    from msched.estimate.perf_table import PerfTable
    from msched.estimate.runtime import times_for

    return TagEstimator(times_for(config, PerfTable.load(config.performance)))


def wait_interval(seconds: float, started: float) -> None:
    """Sleep until `seconds` after `started` (monotonic), so rounds keep a steady cadence."""
    delay = seconds - (time.monotonic() - started)
    if delay > 0:
        time.sleep(delay)
