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

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from msched.store import rows
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
    t = RoundDay.__table__
    have = session.connection().execute(select(t).where(t.c.run_id == run_id, t.c.day == day)).first()
    agg = rows.fold(dict(have._mapping) if have is not None else rows.new_day(run_id, day, rounds[0]), rounds)
    if have is None:
        session.execute(insert(t), agg)
    else:
        session.execute(update(t).where(t.c.id == agg.pop("id")).values(agg))
