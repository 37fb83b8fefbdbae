"""The rows a round writes, computed without a database (issue 21, eighth pass).

Both writers of a round build their rows here, so that they leave the same rows by construction: the
SQLAlchemy store (msched.store.writes, msched.store.retention: any SQLAlchemy URL, the simulator's
`--db`) and the plain-sqlite3 view of a SQLite file (msched.store.light: the real round's own path,
which then never imports SQLAlchemy). Each function takes what its writer read (plain rows, or dicts
of column -> value) and returns column -> value dicts to insert or update; none reads or writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TERMINAL_SKIP = ("PENDING", "RUNNING")
# the columns (besides `id`) the plain-sqlite3 view reads or writes, per table: msched.store.light opens only
# a file that has them all (tests/test_store_light.py checks them against msched.store.schema)
COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": ("kind", "name", "policy", "created_at", "gpus"),
    "reference_models": ("name", "group"),
    "jobs": ("run_id", "job_id", "user", "name", "model", "reference", "group", "similarity", "flops_ratio",
             "iterations", "batch_size", "num_gpus", "time_limit_s", "pinned_type", "added_constraint",
             "submit_time", "first_seen", "state", "planned_type", "est_runtime", "start_time", "end_time",
             "actual_type", "planned_priority", "writes"),
    "rounds": ("run_id", "time", "pending", "running", "changes", "skipped", "plan_seconds", "est_makespan_s",
               "busy_gpus", "total_gpus", "error", "dry_run", "moved", "held_back", "gain_makespan_s",
               "gain_mean_end_s", "decision_rows", "state_key", "stable_until", "unchanged", "queue_digest",
               "light"),
    "decisions": ("round_id", "job_id", "priority", "gpu_type", "est_start", "est_runtime", "changed"),
    "round_days": ("run_id", "day", "first_time", "last_time", "rounds", "dry_runs", "errors", "changes",
                   "max_changes", "skipped", "decision_rows", "plan_seconds", "max_plan_seconds", "pending",
                   "running", "busy_gpus", "total_gpus"),
    "packed_pairs": ("run_id", "job_a", "job_b", "gpu_type", "seen_at", "predicted_a", "predicted_b",
                     "measured_a", "measured_b"),
    "holds": ("job_id", "kind", "closed_at"),
}


def tagged(jobs: Iterable[Any]) -> dict[str, tuple[Any, Any]]:
    """Jobs that carry an msched tag, by id, with the tag parsed once."""
    out: dict[str, tuple[Any, Any]] = {}
    for j in jobs:
        tag = j.tag
        if tag is not None:
            out[str(j.job_id)] = (j, tag)
    return out


def job_row(run_id: int, job: Any, tag: Any, now: float) -> dict[str, Any]:
    """The jobs row of a tagged job seen for the first time."""
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
        "planned_priority": None,
        "writes": None,
    }


def ingest_rows(run_id: int, tagged_jobs: Mapping[str, tuple[Any, Any]], known: Mapping[str, Any],
                now: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(new jobs rows, {id, state} updates) for the tagged jobs given `known` (job id -> a row with `id`
    and `state`)."""
    new_rows = [job_row(run_id, j, tag, now) for jid, (j, tag) in tagged_jobs.items() if jid not in known]
    changed = [{"id": row.id, "state": tagged_jobs[jid][0].state} for jid, row in known.items()
               if row.state != tagged_jobs[jid][0].state]
    return new_rows, changed


def reference_changes(tagged_jobs: Mapping[str, tuple[Any, Any]], have: Mapping[str, str]
                      ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(reference_models rows to insert, {name, group} to update) for the references the tags name, given
    the groups stored (`have`: name -> group)."""
    refs = {tag.ref: tag.group for _j, tag in tagged_jobs.values() if tag.ref}
    inserts = [{"name": name, "group": group or ""} for name, group in refs.items() if name not in have]
    updates = [{"name": name, "group": group} for name, group in refs.items()
               if name in have and group and have[name] != group]
    return inserts, updates


def referenced(tagged_jobs: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """The reference names the tags name (to read their stored groups)."""
    return list(dict.fromkeys(tag.ref for _j, tag in tagged_jobs.values() if tag.ref))


def completion_updates(tagged_jobs: Mapping[str, tuple[Any, Any]], known: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The jobs updates that record Slurm's start, end, state and GPU type (`known`: job id -> a row with
    id, state, start_time, end_time, actual_type)."""
    updates = []
    for jid, row in known.items():
        job = tagged_jobs[jid][0]
        values: dict[str, Any] = {"state": job.state}
        if job.start_time is not None:
            values["start_time"] = job.start_time
            if job.gpu_type:
                values["actual_type"] = job.gpu_type
        if job.end_time is not None and job.state not in TERMINAL_SKIP:
            values["end_time"] = job.end_time
        if any(getattr(row, k) != v for k, v in values.items()):
            updates.append({"id": row.id, **values})
    return updates


def missing_first_seen(missing: Mapping[str, tuple[Any, Any]], now: float | None) -> float:
    """When completion tracking first saw jobs no round ingested: `now`, else their latest submit."""
    return now if now is not None else max(j.submit_time or 0.0 for j, _t in missing.values())


def _finite(value: float | None) -> float | None:
    return value if value is not None and value != float("inf") else None


def failed_round_values(run_id: int, time: float | None, error: str | None, dry_run: bool) -> dict[str, Any]:
    """The rounds row of a round that failed before planning (only its time and error)."""
    return {"run_id": run_id, "time": time or 0.0, "pending": 0, "running": 0, "changes": 0, "skipped": 0,
            "plan_seconds": 0.0, "est_makespan_s": None, "busy_gpus": {}, "total_gpus": {}, "error": error,
            "dry_run": int(dry_run), "moved": None, "held_back": None, "gain_makespan_s": None,
            "gain_mean_end_s": None, "decision_rows": None, "state_key": None, "stable_until": None,
            "unchanged": None, "queue_digest": None, "light": None}


def update_counts(result: Any) -> dict[str, int]:
    """Slurm updates per job id in the round."""
    writes: dict[str, int] = {}
    for u in result.updates or []:
        writes[str(u.job_id)] = writes.get(str(u.job_id), 0) + 1
    return writes


def round_values(run_id: int, result: Any, writes: Mapping[str, int], *, dry_run: bool = False,
                 error: str | None = None, state_key: str | None = None,
                 queue_digest: str | None = None) -> dict[str, Any]:
    """The rounds row of a planned round (`result`: the round core's RoundResult), decision_rows left to
    `decision_changes`."""
    snap = result.snapshot
    plan = result.plan
    total = dict(snap.gpus_total)
    free = dict(snap.gpus_free)
    est_end = getattr(plan, "est_makespan_end", None) if plan is not None else None
    st = getattr(result, "settle", None)

    def gain(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else float(a - b)

    return {
        "run_id": run_id, "time": result.time, "pending": len(snap.pending), "running": len(snap.running),
        "changes": int(getattr(result, "update_calls", sum(writes.values()))),
        "skipped": len(result.skipped or []), "plan_seconds": float(result.plan_seconds or 0.0),
        "est_makespan_s": (est_end - result.time) if est_end is not None else None,
        "busy_gpus": {t: total[t] - free.get(t, 0) for t in total}, "total_gpus": total, "error": error,
        "dry_run": int(dry_run),
        "moved": st.moved if st is not None else None,
        "held_back": st.held_back if st is not None else None,
        "gain_makespan_s": gain(st.makespan_incumbent, st.makespan_held) if st is not None else None,
        "gain_mean_end_s": gain(st.mean_end_incumbent, st.mean_end_held) if st is not None else None,
        "decision_rows": None, "state_key": state_key,
        "stable_until": _finite(getattr(result, "stable_until", None)), "unchanged": 0,
        "queue_digest": queue_digest, "light": 0,
    }


def planned_decisions(result: Any) -> list[Any]:
    """The plan's decisions of a round (none without a plan)."""
    plan = result.plan
    return list(plan.decisions) if plan is not None else []


def decision_changes(decisions: Sequence[Any], held: Any, writes: Mapping[str, int], known: Mapping[str, Any],
                     *, dry_run: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(decisions rows without their round_id, jobs updates) of a round: a row for each job whose held plan (planned type,
    priority, estimates) differs from the jobs table's (`known`: job id -> a row with id, planned_type,
    est_runtime (decoded), planned_priority, writes) or that was written; `held` is the round's
    incumbent after it (None: the plan is held whole). A dry run leaves the jobs' plans alone."""
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
        rows.append({"job_id": jid, "priority": priority, "gpu_type": planned or "",
                     "est_start": d.est_start, "est_runtime": est, "changed": int(jid in writes)})
        if row is not None and not dry_run:
            job_rows.append({"id": row.id, "planned_type": planned, "planned_priority": priority,
                             "est_runtime": est, "writes": (row.writes or 0) + writes.get(jid, 0)})
    return rows, job_rows


def seen_pairs(shard_gpus: Sequence[Any]) -> list[Any]:
    """The snapshot's shard GPUs holding two jobs."""
    return [g for g in shard_gpus if len(g.jobs) == 2]


def pair_rows(run_id: int, seen: Sequence[Any], have: set[tuple[str, str]], now: float) -> list[dict[str, Any]]:
    """packed_pairs rows for the pairs not stored yet (`have`: (job_a, job_b) stored)."""
    have = set(have)
    rows = []
    for g in seen:
        a, b = str(g.jobs[0]), str(g.jobs[1])
        if (a, b) in have:
            continue
        have.add((a, b))
        sa, sb = (tuple(g.speeds) + (None, None))[:2]
        rows.append({"run_id": run_id, "job_a": a, "job_b": b, "gpu_type": g.gpu_type, "seen_at": now,
                     "predicted_a": sa, "predicted_b": sb, "measured_a": None, "measured_b": None})
    return rows


def incumbent_of(rows: Iterable[tuple[str, str | None, int]]):  # noqa: ANN201 - msched.rounds.settle.Incumbent
    """The incumbent from (job_id, planned_type, planned_priority) rows of the run's pending jobs."""
    from msched.rounds.settle import Incumbent

    types: dict[str, tuple[str, ...]] = {}
    prio: dict[str, int] = {}
    for job_id, planned_type, planned_priority in rows:
        prio[job_id] = int(planned_priority)
        types[job_id] = tuple(x for x in (planned_type or "").split("|") if x)
    return Incumbent(types=types, priority=prio)


def new_day(run_id: int, day: float, first: Any) -> dict[str, Any]:
    """An empty round_days row for `day`, starting at the round `first`."""
    return {"run_id": run_id, "day": day, "first_time": first.time, "last_time": first.time, "rounds": 0,
            "dry_runs": 0, "errors": 0, "changes": 0, "max_changes": 0, "skipped": 0, "decision_rows": 0,
            "plan_seconds": 0.0, "max_plan_seconds": 0.0, "pending": 0, "running": 0, "busy_gpus": {},
            "total_gpus": {}}


def fold(agg: dict[str, Any], rounds: Sequence[Any]) -> dict[str, Any]:
    """Fold rounds rows (attributes, JSON decoded) into a round_days row (a dict, changed in place and
    returned)."""
    busy = dict(agg.get("busy_gpus") or {})
    for r in rounds:
        agg["first_time"] = min(agg["first_time"], r.time)
        if r.time >= agg["last_time"]:
            agg["last_time"] = r.time
            if r.total_gpus:
                agg["total_gpus"] = dict(r.total_gpus)
        agg["rounds"] += 1
        agg["dry_runs"] += int(bool(r.dry_run))
        agg["errors"] += int(bool(r.error))
        agg["changes"] += int(r.changes or 0)
        agg["max_changes"] = max(agg["max_changes"], int(r.changes or 0))
        agg["skipped"] += int(r.skipped or 0)
        agg["decision_rows"] += int(r.decision_rows or 0)
        agg["plan_seconds"] += float(r.plan_seconds or 0.0)
        agg["max_plan_seconds"] = max(agg["max_plan_seconds"], float(r.plan_seconds or 0.0))
        agg["pending"] += int(r.pending or 0)
        agg["running"] += int(r.running or 0)
        for gtype, n in (r.busy_gpus or {}).items():
            busy[gtype] = busy.get(gtype, 0) + int(n)
    agg["busy_gpus"] = busy
    return agg
