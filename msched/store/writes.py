"""Writing what the reorderer (or the simulator) saw and decided into the store.

Each function takes an open session (inside `Store.write()`) and works in a few batched statements,
so a round of 10,000 pending jobs costs a handful of SQL round trips, not one per job. Slurm is the
source of truth about jobs; these tables are the audit trail: what msched believed (tag, estimates,
planned type) next to what happened (start, end, GPU type), for `msched report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from msched.slurm.base import SlurmJob
from msched.store import rows
from msched.store.base import unchanged_round_values
from msched.store.schema import Decision, Job, PackedPair, ReferenceModel, Round
from msched.tag import JobTag

_CHUNK = 900   # under SQLite's old bound-parameter limit (999) so any SQLite build works


def _chunks(items: Sequence, n: int = _CHUNK) -> Iterator[Sequence]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def _existing(session: Session, run_id: int, job_ids: Sequence[str], *columns) -> dict[str, Any]:
    """Rows of this run's jobs by Slurm job id: only the columns asked for (plain rows, no ORM objects:
    a round of 10,000 jobs must not build 10,000 tracked objects)."""
    out: dict[str, Any] = {}
    t = Job.__table__
    cols = (t.c.job_id, t.c.id, *(t.c[c.key] for c in columns))     # Core columns: plain rows, fast
    for chunk in _chunks(list(job_ids)):
        for row in session.connection().execute(select(*cols).where(t.c.run_id == run_id, t.c.job_id.in_(chunk))):
            out[row.job_id] = row
    return out


def _update_by_id(session: Session, updates: list[dict[str, Any]]) -> None:
    """UPDATE jobs by primary key, one Core executemany per set of columns."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in updates:
        keys = tuple(sorted(k for k in row if k != "id"))
        groups.setdefault(keys, []).append({("_" + k): v for k, v in row.items()})
    table = Job.__table__
    for keys, params in groups.items():
        stmt = update(table).where(table.c.id == bindparam("_id")).values({k: bindparam("_" + k) for k in keys})
        session.execute(stmt, params)


def ingest_jobs(session: Session, run_id: int, jobs: Iterable[SlurmJob], now: float) -> int:
    """Add every tagged job not seen before (and the references their tags name); update the state of
    the ones already known. Untagged jobs (not submitted through msub) are ignored. Returns how many
    jobs were new."""
    return _ingest(session, run_id, rows.tagged(jobs), now)


def _ingest(session: Session, run_id: int, tagged: dict[str, tuple[SlurmJob, JobTag]], now: float) -> int:
    if not tagged:
        return 0
    known = _existing(session, run_id, list(tagged), Job.state)
    new_rows, changed = rows.ingest_rows(run_id, tagged, known, now)
    if new_rows:
        session.execute(insert(Job.__table__), new_rows)   # Core executemany: no ORM bookkeeping
    if changed:
        _update_by_id(session, changed)
    names = rows.referenced(tagged)
    if names:
        t = ReferenceModel.__table__
        have = dict(session.execute(select(t.c.name, t.c.group).where(t.c.name.in_(names))).all())
        inserts, updates = rows.reference_changes(tagged, have)
        if inserts:
            session.execute(insert(t), inserts)
        for u in updates:
            session.execute(update(t).where(t.c.name == u["name"]).values(group=u["group"]))
    session.flush()
    return len(new_rows)


def record_completions(session: Session, run_id: int, jobs: Iterable[SlurmJob], now: float | None = None) -> int:
    """Write the actual start, end, state and GPU type Slurm reports for msched jobs (running ones from
    squeue, finished ones from `squeue -t all`/jobcomp/sacct). A finished tagged job never seen in a
    round (it started and ended between two) is ingested first. Returns the rows changed."""
    tagged = rows.tagged(jobs)
    if not tagged:
        return 0
    known = _existing(session, run_id, list(tagged), Job.state, Job.start_time, Job.end_time, Job.actual_type)
    missing = {jid: jt for jid, jt in tagged.items() if jid not in known}
    changed = 0
    if missing:   # ingested with their start/end already filled in
        changed += _ingest(session, run_id, missing, rows.missing_first_seen(missing, now))
    updates = rows.completion_updates(tagged, known)
    if updates:
        _update_by_id(session, updates)
    session.flush()
    return changed + len(updates)


def active_job_ids(session: Session, run_id: int) -> set[str]:
    """Slurm ids of this run's jobs the database still believes pending or running."""
    return set(session.scalars(select(Job.job_id).where(Job.run_id == run_id,
                                                        Job.state.in_(("PENDING", "RUNNING")))))


def mark_vanished(session: Session, run_id: int, job_ids: Iterable[str]) -> int:
    """Jobs Slurm no longer reports at all (gone from squeue past MinJobAge, with no jobcomp file or
    sacct to say how they ended): state UNKNOWN, so the report does not count them as still queued."""
    ids = list(job_ids)
    gone = [{"id": r.id, "state": "UNKNOWN"} for r in _existing(session, run_id, ids).values()]
    if gone:
        _update_by_id(session, gone)
    return len(gone)


def record_round(
    session: Session, run_id: int, result: Any, dry_run: bool = False, error: str | None = None,
    *, time: float | None = None, state_key: str | None = None, queue_digest: str | None = None,
) -> int:
    """One row for the round (what it wrote and what that bought), and a decisions row only for each job
    whose held plan changed: its planned type, priority or estimate differs from the jobs table's (which
    holds every pending job's current plan, the incumbent the next round starts from). A round that
    changes nothing adds one small row, whatever the queue's length.

    `result` is the round core's `RoundResult` (or None for a round that failed before planning: then
    only the time and the error are recorded). A dry run records what would change but leaves the jobs'
    plans alone, since nothing was applied. Returns the round's id.
    """
    if result is None:
        values = rows.failed_round_values(run_id, time, error, dry_run)
    else:
        writes = rows.update_counts(result)
        values = rows.round_values(run_id, result, writes, dry_run=dry_run, error=error, state_key=state_key,
                                   queue_digest=queue_digest)
        decisions = rows.planned_decisions(result)
        known = _existing(session, run_id, [str(d.job_id) for d in decisions], Job.planned_type, Job.est_runtime,
                          Job.planned_priority, Job.writes) if decisions else {}
        changed, job_rows = rows.decision_changes(decisions, getattr(result, "incumbent", None), writes, known,
                                                  dry_run=dry_run)
        values["decision_rows"] = len(changed)
    round_id = session.execute(insert(Round.__table__), values).inserted_primary_key[0]
    if result is None:
        return round_id
    if changed:
        session.execute(insert(Decision.__table__), [{"round_id": round_id, **r} for r in changed])
    if job_rows:
        _update_by_id(session, job_rows)
    _record_pairs(session, run_id, getattr(result.snapshot, "shard_gpus", ()), result.time)
    session.flush()
    return round_id


def _record_pairs(session: Session, run_id: int, shard_gpus: Sequence, now: float) -> None:
    """A row for each pair of shard jobs first seen sharing a GPU (the snapshot's `shard_gpus`), with
    the speeds predicted for it. The table grows with the pairs formed, not with the rounds."""
    seen = rows.seen_pairs(shard_gpus)
    if not seen:
        return
    t = PackedPair.__table__
    firsts = sorted({str(g.jobs[0]) for g in seen})
    have = {(a, b) for a, b in session.execute(select(t.c.job_a, t.c.job_b).where(
        t.c.run_id == run_id, t.c.job_a.in_(firsts)))}
    new = rows.pair_rows(run_id, seen, have, now)
    if new:
        session.execute(insert(t), new)


def record_pair_speeds(session: Session, run_id: int, measured: Iterable[tuple[str, str, float, float]]) -> int:
    """The measured own/solo speeds of pairs that ran ((first job, second job, its speed, the second's
    speed): a simulated run's truth, slurm_sim.packing.ShardRuns.pairs). Pairs no round saw (formed and
    ended between two rounds) get a row here. Returns the rows written."""
    t = PackedPair.__table__
    n = 0
    for a, b, fa, fb in measured:
        done = session.execute(update(t).where(t.c.run_id == run_id, t.c.job_a == str(a), t.c.job_b == str(b))
                               .values(measured_a=float(fa), measured_b=float(fb))).rowcount
        if not done:
            session.execute(insert(t).values(run_id=run_id, job_a=str(a), job_b=str(b), seen_at=0.0,
                                             measured_a=float(fa), measured_b=float(fb)))
        n += 1
    return n


def record_unchanged_round(session: Session, run_id: int, last: Any, now: float, pending: int, running: int, *,
                           queue_digest: str | None = None, light: bool = False) -> int:
    """One row for a round that found Slurm as the last planned round (`last`, its row) left it
    (msched.store.base.unchanged_round_values: the row the light round's plain-sqlite3 writer writes
    too). Returns the round's id."""
    rnd = Round(**unchanged_round_values(run_id, last, now, pending, running, queue_digest=queue_digest,
                                         light=light))
    session.add(rnd)
    session.flush()
    return rnd.id


def load_incumbent(session: Session, run_id: int):  # noqa: ANN201 - msched.rounds.settle.Incumbent
    """The plan msched holds the run's pending jobs to (planned type and priority of each), as the last
    round recorded it: the incumbent the next round compares its plan with. Jobs recorded before the
    store kept priorities are left out (the next round places them anew)."""
    t = Job.__table__
    stmt = select(t.c.job_id, t.c.planned_type, t.c.planned_priority).where(
        t.c.run_id == run_id, t.c.state == "PENDING", t.c.planned_priority.is_not(None))
    return rows.incumbent_of(session.connection().execute(stmt))
