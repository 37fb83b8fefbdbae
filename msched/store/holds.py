"""The hold journal's SQL (table `holds`, msched.store.schema.Hold): what the reorderer held or delayed,
and why, recorded before the Slurm call that does it and closed after the call that undoes it.

Why a journal: `msched reorder --release` resets a job's priority by holding and releasing it, and the
planner may keep a job from starting with a begin time. A process killed between "hold" and "release"
used to leave the job held by root (JobHeldAdmin, which its owner cannot release), skipped by every later
round. With the journal, every open entry is replayed (msched.rounds.holds.replay) at the start of the
next round and by `--release`.

API for other parts of msched (the planner's begin-time holds):

    journal = HoldJournal(store)
    journal.record_hold(job_id, "begin_time", value=str(epoch), reason="kept for a100 by the plan")
    ... client.set_begin_time(job_id, epoch) ...
    replay(client, journal)          # msched.rounds.holds: undoes every open entry, closes them
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from sqlalchemy import select, update

from msched.store.schema import Hold

KINDS = ("hold", "begin_time", "nice", "exc_nodes")    # nice: the job's own offset, put back by --release;
                                                        # exc_nodes: packing's ExcNodeList, cleared by --release


class HoldJournal:
    """The journal in one Store. Every method is its own committed transaction: an entry is on disk
    before the caller goes on to touch Slurm."""

    def __init__(self, store) -> None:  # noqa: ANN001 - msched.store.db.Store
        self.store = store

    def record_hold(self, job_id: str, kind: str, value: str = "", reason: str = "", own: str | None = None) -> int:
        """Record one lever about to be pulled; returns the entry's id. `own` (exc_nodes): the job's own
        value beside msched's, which `--release` puts back."""
        return self.record_holds([(job_id, kind, value, reason)], own=own)[0]

    def record_holds(self, entries: Iterable[tuple[str, str, str, str]], own: str | None = None) -> list[int]:
        """Record (job_id, kind, value, reason) entries in one transaction (a batch of holds)."""
        now = time.time()
        rows = []
        for job_id, kind, value, reason in entries:
            if kind not in KINDS:
                raise ValueError(f"unknown hold kind {kind!r}; choose one of {', '.join(KINDS)}")
            rows.append(Hold(job_id=str(job_id), kind=kind, value=str(value), reason=reason[:500], created_at=now,
                             own=own))
        if not rows:
            return []
        with self.store.write() as session:
            session.add_all(rows)
            session.flush()
            return [r.id for r in rows]

    def close(self, entry_ids: Sequence[int], outcome: str) -> None:
        """Mark entries undone (released, gone...)."""
        if not entry_ids:
            return
        with self.store.write() as session:
            session.execute(update(Hold).where(Hold.id.in_(list(entry_ids)), Hold.closed_at.is_(None))
                            .values(closed_at=time.time(), outcome=outcome[:64]))

    def open_entries(self, kind: str | None = None) -> list[Hold]:
        """Entries not undone yet, oldest first."""
        with self.store.read() as session:
            stmt = select(Hold).where(Hold.closed_at.is_(None))
            if kind is not None:
                stmt = stmt.where(Hold.kind == kind)
            return list(session.scalars(stmt.order_by(Hold.id)))
