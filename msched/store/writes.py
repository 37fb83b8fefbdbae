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
from msched.store.schema import Decision, Job, ReferenceModel, Round
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


def _row_for(run_id: int, job: SlurmJob, tag: JobTag, now: float) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "job_id": str(job.job_id),
        "user": job.user,
        "name": job.name,
        "model": tag.model,
        "reference": tag.ref,
        "group": tag.group,
        "similarity": tag.sim,
        "flops_ratio": tag.flops,
        "iterations": tag.iters,
        "batch_size": tag.bs,
        "num_gpus": job.num_gpus,
        "time_limit_s": job.time_limit_s,
        "pinned_type": tag.pinned or job.gres_gpu_type or None,
        "added_constraint": tag.added,
        "submit_time": job.submit_time,
        "first_seen": now,
        "state": job.state,
        "planned_type": None,
        "est_runtime": {},
        "start_time": job.start_time,
        "end_time": job.end_time,
        "actual_type": job.gpu_type if job.start_time is not None else None,
    }


def _update_by_id(session: Session, rows: list[dict[str, Any]]) -> None:
    """UPDATE jobs by primary key, one Core executemany per set of columns."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        keys = tuple(sorted(k for k in row if k != "id"))
        groups.setdefault(keys, []).append({("_" + k): v for k, v in row.items()})
    table = Job.__table__
    for keys, params in groups.items():
        stmt = update(table).where(table.c.id == bindparam("_id")).values({k: bindparam("_" + k) for k in keys})
        session.execute(stmt, params)


def _tagged(jobs: Iterable[SlurmJob]) -> dict[str, tuple[SlurmJob, JobTag]]:
    """Jobs that carry an msched tag, by id, with the tag parsed once."""
    out: dict[str, tuple[SlurmJob, JobTag]] = {}
    for j in jobs:
        tag = j.tag
        if tag is not None:
            out[str(j.job_id)] = (j, tag)
    return out


def ingest_jobs(session: Session, run_id: int, jobs: Iterable[SlurmJob], now: float) -> int:
    """Add every tagged job not seen before (and the references their tags name); update the state of
    the ones already known. Untagged jobs (not submitted through msub) are ignored. Returns how many
    jobs were new."""
    return _ingest(session, run_id, _tagged(jobs), now)


def _ingest(session: Session, run_id: int, tagged: dict[str, tuple[SlurmJob, JobTag]], now: float) -> int:
    if not tagged:
        return 0
    known = _existing(session, run_id, list(tagged), Job.state)
    new_rows = [_row_for(run_id, j, tag, now) for jid, (j, tag) in tagged.items() if jid not in known]
    if new_rows:
        session.execute(insert(Job.__table__), new_rows)   # Core executemany: no ORM bookkeeping
    changed = [{"id": row.id, "state": tagged[jid][0].state} for jid, row in known.items()
               if row.state != tagged[jid][0].state]
    if changed:
        _update_by_id(session, changed)
    refs = {tag.ref: tag.group for _j, tag in tagged.values() if tag.ref}
    if refs:
        have = {r.name: r for r in session.scalars(select(ReferenceModel).where(ReferenceModel.name.in_(list(refs))))}
        for name, group in refs.items():
            if name not in have:
                session.add(ReferenceModel(name=name, group=group or ""))
            elif group and have[name].group != group:
                have[name].group = group
    session.flush()
    return len(new_rows)


def record_completions(session: Session, run_id: int, jobs: Iterable[SlurmJob], now: float | None = None) -> int:
    """Write the actual start, end, state and GPU type Slurm reports for msched jobs (running ones from
    squeue, finished ones from `squeue -t all`/jobcomp/sacct). A finished tagged job never seen in a
    round (it started and ended between two) is ingested first. Returns the rows changed."""
    tagged = _tagged(jobs)
    if not tagged:
        return 0
    known = _existing(session, run_id, list(tagged), Job.state, Job.start_time, Job.end_time, Job.actual_type)
    missing = {jid: jt for jid, jt in tagged.items() if jid not in known}
    changed = 0
    if missing:   # ingested with their start/end already filled in
        first_seen = now if now is not None else max(j.submit_time or 0.0 for j, _t in missing.values())
        changed += _ingest(session, run_id, missing, first_seen)
    updates = []
    for jid, row in known.items():
        job = tagged[jid][0]
        values: dict[str, Any] = {"state": job.state}
        if job.start_time is not None:
            values["start_time"] = job.start_time
            if job.gpu_type:
                values["actual_type"] = job.gpu_type
        if job.end_time is not None and job.state not in ("PENDING", "RUNNING"):
            values["end_time"] = job.end_time
        if any(getattr(row, k) != v for k, v in values.items()):
            updates.append({"id": row.id, **values})
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
    rows = [{"id": r.id, "state": "UNKNOWN"} for r in _existing(session, run_id, ids).values()]
    if rows:
        _update_by_id(session, rows)
    return len(rows)


def record_round(
    session: Session, run_id: int, result: Any, dry_run: bool = False, error: str | None = None,
    *, time: float | None = None,
) -> int:
    """One row for the round, one per decision, and each decided job's planned type and estimates.

    `result` is the round core's `RoundResult` (or None for a round that failed before planning: then
    only the time and the error are recorded). A dry run records its plan as decisions but leaves the
    jobs' planned types alone, since nothing was applied. Returns the round's id.
    """
    if result is None:
        rnd = Round(run_id=run_id, time=time or 0.0, error=error, dry_run=int(dry_run))
        session.add(rnd)
        session.flush()
        return rnd.id
    snap = result.snapshot
    plan = result.plan
    total = dict(snap.gpus_total)
    free = dict(snap.gpus_free)
    busy = {t: total[t] - free.get(t, 0) for t in total}
    changed_ids = {str(getattr(u, "job_id", "")) for u in (result.updates or [])}
    est_end = getattr(plan, "est_makespan_end", None) if plan is not None else None
    rnd = Round(
        run_id=run_id,
        time=result.time,
        pending=len(snap.pending),
        running=len(snap.running),
        changes=int(getattr(result, "update_calls", len(changed_ids))),
        skipped=len(result.skipped or []),
        plan_seconds=float(result.plan_seconds or 0.0),
        est_makespan_s=(est_end - result.time) if est_end is not None else None,
        busy_gpus=busy,
        total_gpus=total,
        error=error,
        dry_run=int(dry_run),
    )
    session.add(rnd)
    session.flush()
    decisions = list(plan.decisions) if plan is not None else []
    if decisions:
        session.execute(insert(Decision.__table__), [
            {
                "round_id": rnd.id,
                "job_id": str(d.job_id),
                "priority": int(d.priority),
                "gpu_type": "|".join(d.gpu_types),
                "est_start": d.est_start,
                "est_runtime": {k: float(v) for k, v in dict(d.est_runtime_s).items()},
                "changed": int(str(d.job_id) in changed_ids),
            }
            for d in decisions
        ])
        if not dry_run:
            # the jobs' latest plan; most jobs keep theirs from one round to the next, so only the
            # changed ones are written (reading is cheaper than writing, JSON included)
            known = _existing(session, run_id, [str(d.job_id) for d in decisions], Job.planned_type, Job.est_runtime)
            rows = []
            for d in decisions:
                row = known.get(str(d.job_id))
                if row is None:
                    continue
                planned = "|".join(d.gpu_types) or None
                est = {k: float(v) for k, v in dict(d.est_runtime_s).items()}
                if row.planned_type != planned or (row.est_runtime or {}) != est:
                    rows.append({"id": row.id, "planned_type": planned, "est_runtime": est})
            if rows:
                _update_by_id(session, rows)
    session.flush()
    return rnd.id
