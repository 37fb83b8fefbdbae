"""Undoing what the hold journal (msched.store.holds) says the reorderer held or delayed.

`replay` runs at the start of every round that finds open entries, and in `msched reorder --release`:
- a `hold` entry: the job is released if Slurm still shows it held by an administrator (JobHeldAdmin:
  msched's hold, which its owner cannot undo); a job its owner held (JobHeldUser), one no longer
  pending, or one not held (the process died before its hold, or after its release) is left as it is;
  the entry is closed either way;
- a `begin_time` entry: past its time it has expired by itself and is closed; a future one is cleared
  (`StartTime=now`) by `--release` (everything=True) and left for the round's plan otherwise.
A release that Slurm refuses for a job that is gone closes the entry; Slurm unreachable raises, and the
entries stay open for the next try.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from msched.slurm.base import ACTIVE_STATES, JobNotPending, SlurmClient, SlurmJob, SlurmUnavailable

log = logging.getLogger("msched.rounds.holds")


def replay(client: SlurmClient, journal, *, jobs: Sequence[SlurmJob] | None = None,  # noqa: ANN001
           everything: bool = False, now: float | None = None) -> list[str]:
    """Undo every open entry of the journal that Slurm still shows; returns the job ids released."""
    entries = journal.open_entries()
    if not entries:
        return []
    by_id = {j.job_id: j for j in (jobs if jobs is not None else client.jobs(ACTIVE_STATES))}
    now = client.now() if now is None else now
    released: list[str] = []
    outcome: dict[str, list[int]] = {}
    for e in entries:
        job = by_id.get(e.job_id)
        if job is None or not job.is_pending:
            outcome.setdefault("gone", []).append(e.id)
            continue
        if e.kind == "hold":
            if job.reason != "JobHeldAdmin":
                outcome.setdefault("not held by msched" if job.reason != "JobHeldUser" else "held by its owner",
                                   []).append(e.id)
                continue
            try:
                client.release(e.job_id)
            except SlurmUnavailable:
                raise
            except JobNotPending:
                outcome.setdefault("gone", []).append(e.id)
                continue
            log.info("job %s: released (held by an interrupted round: %s)", e.job_id, e.reason)
            released.append(e.job_id)
            outcome.setdefault("released", []).append(e.id)
        elif e.kind == "begin_time":
            try:
                expired = float(e.value) <= now
            except ValueError:
                expired = False
            if expired:
                outcome.setdefault("expired", []).append(e.id)
            elif everything:
                try:
                    client.set_begin_time(e.job_id, None)
                except SlurmUnavailable:
                    raise
                except JobNotPending:
                    outcome.setdefault("gone", []).append(e.id)
                    continue
                released.append(e.job_id)
                outcome.setdefault("cleared", []).append(e.id)
    for what, ids in outcome.items():
        journal.close(ids, what)
    return released
