"""Retention: detailed rounds and decisions for `retention_days`, one aggregate row per day after that.

The store must not grow with the number of rounds: at one round a minute that is 1,440 rounds a day.
Rounds older than the retention (whole UTC days only, so a day's aggregate is made once, from all of its
rounds) are folded into `round_days` and deleted with their decisions, a small batch per call: the
reorderer calls `prune` after each round, in its own short transaction, so pruning never holds a round
up and a backlog (a store that was never pruned) drains over a few rounds. The jobs table is kept: it
grows with the jobs, not the rounds, and the report's waits and estimates come from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from msched.store.base import DAY_S, day_of
from msched.store.schema import Decision, Round, RoundDay

__all__ = ["DAY_S", "DEFAULT_BATCH", "day_of", "prune"]
DEFAULT_BATCH = 500          # rounds folded per call (a few ms; 500 a minute outruns 1 a minute)


def prune(session: Session, run_id: int, now: float, retention_s: float, *, batch: int = DEFAULT_BATCH) -> int:
    """Fold up to `batch` of the run's oldest rounds past the retention into their days' aggregates and
    delete them (decisions included). Returns the rounds pruned (0: nothing past the retention)."""
    cutoff = day_of(now - retention_s)            # whole days before it
    t = Round.__table__
    rows = list(session.connection().execute(
        select(t).where(t.c.run_id == run_id, t.c.time < cutoff).order_by(t.c.time).limit(batch)))
    if not rows:
        return 0
    by_day: dict[float, list[Any]] = {}
    for r in rows:
        by_day.setdefault(day_of(r.time), []).append(r)
    for day, rs in by_day.items():
        _fold(session, run_id, day, rs)
    ids = [r.id for r in rows]
    for k in range(0, len(ids), 900):
        chunk = ids[k:k + 900]
        session.execute(delete(Decision).where(Decision.round_id.in_(chunk)))
        session.execute(delete(Round).where(Round.id.in_(chunk)))
    session.flush()
    return len(ids)


def _fold(session: Session, run_id: int, day: float, rounds: Sequence[Any]) -> None:
    agg = session.scalars(select(RoundDay).where(RoundDay.run_id == run_id, RoundDay.day == day)).first()
    if agg is None:
        agg = RoundDay(run_id=run_id, day=day, first_time=rounds[0].time, last_time=rounds[0].time, rounds=0,
                       dry_runs=0, errors=0, changes=0, max_changes=0, skipped=0, decision_rows=0,
                       plan_seconds=0.0, max_plan_seconds=0.0, pending=0, running=0, busy_gpus={}, total_gpus={})
        session.add(agg)
    busy = dict(agg.busy_gpus or {})
    for r in rounds:
        agg.first_time = min(agg.first_time, r.time)
        if r.time >= agg.last_time:
            agg.last_time = r.time
            if r.total_gpus:
                agg.total_gpus = dict(r.total_gpus)
        agg.rounds += 1
        agg.dry_runs += int(bool(r.dry_run))
        agg.errors += int(bool(r.error))
        agg.changes += int(r.changes or 0)
        agg.max_changes = max(agg.max_changes, int(r.changes or 0))
        agg.skipped += int(r.skipped or 0)
        agg.decision_rows += int(r.decision_rows or 0)
        agg.plan_seconds += float(r.plan_seconds or 0.0)
        agg.max_plan_seconds = max(agg.max_plan_seconds, float(r.plan_seconds or 0.0))
        agg.pending += int(r.pending or 0)
        agg.running += int(r.running or 0)
        for gtype, n in (r.busy_gpus or {}).items():
            busy[gtype] = busy.get(gtype, 0) + int(n)
    agg.busy_gpus = busy
