"""Reads of the store that the commands and the simulator need (all of msched's SQL lives in msched.store).

`writes.py` holds what the reorderer and the simulator record; this module what they and the commands
look up. Report-wide reads stay with the report (msched.report.data), which owns its own views.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from msched.store.schema import Job, Round, Run

_CHUNK = 500        # job ids per IN (...) list, well under SQLite's bound-parameter limit


def last_round_time(session: Session, run_id: int) -> float | None:
    """When the run's last recorded round ran (epoch seconds), or None before its first."""
    return session.scalar(select(func.max(Round.time)).where(Round.run_id == run_id))


def last_planned_round(session: Session, run_id: int):  # noqa: ANN201 - a Round row, or None
    """The run's latest round that was recorded whole (not a dry run, no error), planned or found
    unchanged: what the next round compares Slurm's state with."""
    return session.scalars(select(Round).where(Round.run_id == run_id, Round.dry_run == 0, Round.error.is_(None))
                           .order_by(Round.time.desc(), Round.id.desc()).limit(1)).first()


def run_names_starting(session: Session, prefix: str) -> set[str]:
    """Names of the recorded runs that start with `prefix` (to give a new simulated run a free name)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return set(session.scalars(select(Run.name).where(Run.name.like(escaped + "%", escape="\\"))))


def planned_types(session: Session, cluster_name: str, job_ids: Sequence[str]) -> dict[str, str | None] | None:
    """{job_id: the GPU type the reorderer last planned} for the given jobs of the real cluster's runs;
    None when no round has been recorded for that cluster yet."""
    run_ids = list(session.scalars(select(Run.id).where(Run.kind == "slurm", Run.name == cluster_name)))
    if not run_ids:
        return None
    out: dict[str, str | None] = {}
    for start in range(0, len(job_ids), _CHUNK):
        chunk = list(job_ids[start:start + _CHUNK])
        for job_id, planned in session.execute(
                select(Job.job_id, Job.planned_type).where(Job.run_id.in_(run_ids), Job.job_id.in_(chunk))):
            out[job_id] = planned
    return out
