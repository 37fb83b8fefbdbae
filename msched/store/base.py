"""What both views of the store share without importing SQLAlchemy: the schema version the SQLAlchemy
store (msched.store.db, msched.store.schema: the one owner of the schema) stamps, the busy timeout, the
store's error, and the rows a light round writes (msched.store.light reads the same file through plain
sqlite3)."""

from __future__ import annotations

from typing import Any

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
DAY_S = 86400.0


def day_of(t: float) -> float:
    """The epoch of 00:00 UTC of the day holding `t` (retention folds whole days: msched.store.retention)."""
    return float(int(t // DAY_S) * DAY_S)


class StoreError(RuntimeError):
    """The database cannot be opened or used; the message is one line naming the database."""


def unchanged_round_values(run_id: int, last: Any, now: float, pending: int, running: int, *,
                           queue_digest: str | None = None, light: bool = False) -> dict[str, Any]:
    """The `rounds` row of a round that found Slurm as the last planned round (`last`, its row) left it,
    before that plan's `stable_until`: it planned nothing and wrote nothing. The row carries the last
    plan's key and time limit on, and its estimated makespan end (as seconds from now), with this round's
    `queue_digest` and whether it was light. Column -> value, for both writers of it
    (msched.store.writes.record_unchanged_round, msched.store.light.LightStore)."""
    est = None if last.est_makespan_s is None else max(0.0, last.time + last.est_makespan_s - now)
    return {"run_id": run_id, "time": now, "pending": pending, "running": running, "changes": 0, "skipped": 0,
            "plan_seconds": 0.0, "est_makespan_s": est, "busy_gpus": dict(last.busy_gpus or {}),
            "total_gpus": dict(last.total_gpus or {}), "dry_run": 0, "moved": 0, "held_back": 0,
            "gain_makespan_s": 0.0, "gain_mean_end_s": 0.0, "decision_rows": 0, "state_key": last.state_key,
            "stable_until": last.stable_until, "unchanged": 1, "queue_digest": queue_digest,
            "light": int(light)}
