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
        rnd = Round(run_id=run_id, time=time or 0.0, error=error, dry_run=int(dry_run))
        session.add(rnd)
        session.flush()
        return rnd.id
    snap = result.snapshot
    plan = result.plan
    total = dict(snap.gpus_total)
    free = dict(snap.gpus_free)
    busy = {t: total[t] - free.get(t, 0) for t in total}
    writes: dict[str, int] = {}
    for u in result.updates or []:
        writes[str(u.job_id)] = writes.get(str(u.job_id), 0) + 1
    est_end = getattr(plan, "est_makespan_end", None) if plan is not None else None
    st = getattr(result, "settle", None)

    def gain(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else float(a - b)

    rnd = Round(
        run_id=run_id,
        time=result.time,
        pending=len(snap.pending),
        running=len(snap.running),
        changes=int(getattr(result, "update_calls", sum(writes.values()))),
        skipped=len(result.skipped or []),
        plan_seconds=float(result.plan_seconds or 0.0),
        est_makespan_s=(est_end - result.time) if est_end is not None else None,
        busy_gpus=busy,
        total_gpus=total,
        error=error,
        dry_run=int(dry_run),
        moved=st.moved if st is not None else None,
        held_back=st.held_back if st is not None else None,
        gain_makespan_s=gain(st.makespan_incumbent, st.makespan_held) if st is not None else None,
        gain_mean_end_s=gain(st.mean_end_incumbent, st.mean_end_held) if st is not None else None,
        state_key=state_key,
        stable_until=_finite(getattr(result, "stable_until", None)),
        unchanged=0,
        queue_digest=queue_digest,
        light=0,
    )
    session.add(rnd)
    session.flush()
    decisions = list(plan.decisions) if plan is not None else []
    held = getattr(result, "incumbent", None)
    known = _existing(session, run_id, [str(d.job_id) for d in decisions], Job.planned_type, Job.est_runtime,
                      Job.planned_priority, Job.writes) if decisions else {}
    rows = []
    job_rows = []
    for d in decisions:
        jid = str(d.job_id)
        if held is not None and jid not in held:
            continue                       # waiting for the budget: nothing of its plan is held yet
        types = tuple(held.types.get(jid, ())) if held is not None else tuple(d.gpu_types)
        priority = int(held.priority[jid]) if held is not None else int(d.priority)
        planned = "|".join(types) or None
        est = {k: round(float(v), 3) for k, v in dict(d.est_runtime_s).items()}
        row = known.get(jid)
        if row is not None and row.planned_type == planned and row.planned_priority == priority \
                and (row.est_runtime or {}) == est and not writes.get(jid):
            continue
        rows.append({"round_id": rnd.id, "job_id": jid, "priority": priority, "gpu_type": planned or "",
                     "est_start": d.est_start, "est_runtime": est, "changed": int(jid in writes)})
        if row is not None and not dry_run:
            job_rows.append({"id": row.id, "planned_type": planned, "planned_priority": priority,
                             "est_runtime": est, "writes": (row.writes or 0) + writes.get(jid, 0)})
    if rows:
        session.execute(insert(Decision.__table__), rows)
    if job_rows:
        _update_by_id(session, job_rows)
    rnd.decision_rows = len(rows)
    _record_pairs(session, run_id, getattr(snap, "shard_gpus", ()), result.time)
    session.flush()
    return rnd.id


def _record_pairs(session: Session, run_id: int, shard_gpus: Sequence, now: float) -> None:
    """A row for each pair of shard jobs first seen sharing a GPU (the snapshot's `shard_gpus`), with
    the speeds predicted for it. The table grows with the pairs formed, not with the rounds."""
    seen = [g for g in shard_gpus if len(g.jobs) == 2]
    if not seen:
        return
    t = PackedPair.__table__
    firsts = sorted({str(g.jobs[0]) for g in seen})
    have = {(a, b) for a, b in session.execute(select(t.c.job_a, t.c.job_b).where(
        t.c.run_id == run_id, t.c.job_a.in_(firsts)))}
    rows = []
    for g in seen:
        a, b = str(g.jobs[0]), str(g.jobs[1])
        if (a, b) in have:
            continue
        have.add((a, b))
        sa, sb = (tuple(g.speeds) + (None, None))[:2]
        rows.append({"run_id": run_id, "job_a": a, "job_b": b, "gpu_type": g.gpu_type, "seen_at": now,
                     "predicted_a": sa, "predicted_b": sb})
    if rows:
        session.execute(insert(t), rows)


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


def _finite(value: float | None) -> float | None:
    return value if value is not None and value != float("inf") else None


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
    from msched.rounds.settle import Incumbent

    t = Job.__table__
    types: dict[str, tuple[str, ...]] = {}
    prio: dict[str, int] = {}
    stmt = select(t.c.job_id, t.c.planned_type, t.c.planned_priority).where(
        t.c.run_id == run_id, t.c.state == "PENDING", t.c.planned_priority.is_not(None))
    for row in session.connection().execute(stmt):
        prio[row.job_id] = int(row.planned_priority)
        types[row.job_id] = tuple(x for x in (row.planned_type or "").split("|") if x)
    return Incumbent(types=types, priority=prio)
