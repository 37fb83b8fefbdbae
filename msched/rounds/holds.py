"""Undoing what the hold journal (msched.store.holds) says the reorderer held or delayed.

`replay` runs at the start of every round that finds open entries, and in `msched reorder --release`:
- a `hold` entry: the job is released if Slurm still shows it held by an administrator (JobHeldAdmin:
  msched's hold, which its owner cannot undo); a job its owner held (JobHeldUser), one no longer
  pending, or one not held (the process died before its hold, or after its release) is left as it is;
  the entry is closed either way;
- a `begin_time` entry: past its time it has expired by itself and is closed; one Slurm does not hold
  (the process died before its call, or the job's owner changed the begin time since) is closed without
  a call; a future one Slurm holds is cleared (`StartTime=now`) by `--release` (everything=True) and left
  for the round's plan otherwise (the begin-time lever: `apply_begin_times` below);
- an `exc_nodes` entry (the packing round's ExcNodeList, `apply_exclusions` below): kept by a round;
  `--release` sets the job's list back to its owner's part (recorded with the entry) where Slurm still
  holds what msched wrote, and leaves a list the owner rewrote since as it is.
A release that Slurm refuses for a job that is gone closes the entry; Slurm unreachable raises, and the
entries stay open for the next try.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from msched.slurm.base import (
    ACTIVE_STATES,
    JobNotPending,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmUnavailable,
)

log = logging.getLogger("msched.rounds.holds")
MATCH_S = 2.0           # Slurm keeps begin times in whole seconds: a journal value within this is the one held


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
    exc_lists: dict[str, tuple[str, ...]] | None = None     # read once, for --release's exc_nodes entries

    def undone(e, action: Callable[..., None], *args: object) -> bool:  # noqa: ANN001 - a journal entry
        """Run the Slurm call that undoes entry `e`; False, with the entry closed as gone, when the job
        started or ended meanwhile. Slurm unreachable raises: the entries stay open for the next try."""
        try:
            action(e.job_id, *args)
        except JobNotPending:
            outcome.setdefault("gone", []).append(e.id)
            return False
        return True

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
            if not undone(e, client.release):
                continue
            log.info("job %s: released (held by an interrupted round: %s)", e.job_id, e.reason)
            released.append(e.job_id)
            outcome.setdefault("released", []).append(e.id)
        elif e.kind == "nice":
            if not everything:
                continue                      # the record of the job's own offset, kept while msched steers it
            try:
                own = int(e.value)
            except ValueError:
                own = 0
            if job.nice != own:
                if not undone(e, client.set_nice, own):
                    continue
                released.append(e.job_id)
            outcome.setdefault("restored", []).append(e.id)
        elif e.kind == "exc_nodes":
            # the nodes the packing round keeps a pending shard job off (apply_exclusions); kept while
            # msched steers the job; --release puts the owner's own list back
            if not everything:
                continue
            if exc_lists is None:
                exc_lists = client.excluded_nodes([x.job_id for x in entries if x.kind == "exc_nodes"])
            have = exc_lists.get(e.job_id)
            if have is not None and _journal_value(",".join(have)) != e.value:
                outcome.setdefault("changed by its owner", []).append(e.id)   # theirs now: left as it is
                continue
            own = e.own or ""       # the owner's part when msched wrote (an entry from before it: none)
            if not undone(e, client.set_exc_nodes, own):
                continue
            log.info("job %s: excluded nodes set back to the owner's %r (set by msched: %s)", e.job_id, own, e.reason)
            released.append(e.job_id)
            outcome.setdefault("cleared", []).append(e.id)
        elif e.kind == "begin_time":
            try:
                when = float(e.value)
            except ValueError:
                when = now
            held = job.held_until(now)
            if when <= now:
                outcome.setdefault("expired", []).append(e.id)
            elif held is None or abs(held - when) > MATCH_S:
                # never written (killed before its call), already cleared, or changed by the job's owner
                # since: not msched's to clear
                outcome.setdefault("not in effect" if held is None else "changed by its owner", []).append(e.id)
            elif everything:
                if not undone(e, client.set_begin_time, None):
                    continue
                log.info("job %s: begin time cleared (set by msched: %s)", e.job_id, e.reason)
                released.append(e.job_id)
                outcome.setdefault("cleared", []).append(e.id)
    for what, ids in outcome.items():
        journal.close(ids, what)
    return released


# ------------------------------------------------------------------------------ the packing round's exclusions


def apply_exclusions(client: SlurmClient, excluded: dict[str, tuple[str, ...]], jobs: Sequence[SlurmJob],
                     journal, *, dry_run: bool = False) -> tuple[dict[str, str], list[str]]:  # noqa: ANN001
    """Write the packing round's excluded nodes (`PackingPlan.excluded`: job -> node names) beside the
    job owner's own: the list written is the union of the two, read and written per job.

    The job's list now is read from Slurm (`client.excluded_nodes`, one squeue); a job whose list cannot
    be read is left alone (nothing is written over names msched cannot see). The owner's part
    (`owners_part`): the whole list when msched has no open `exc_nodes` entry for the job, or when the
    list is no longer what msched last wrote (the owner rewrote it since: `scontrol update ExcNodeList=`
    replaces the list, so what they wrote is theirs, msched's nodes among it included); else the
    owner's part that entry recorded. Without a journal (the simulator, where no owner writes a list)
    the list is msched's alone.

    Each write that adds nodes of msched's is recorded in the journal (the union written, and the
    owner's part, which `--release` puts back) *before* its Slurm call, and the job's older entries
    closed after it; a job whose own nodes are all msched wants gets its owner's list back and its
    entries closed. Returns ({job id: list written}, job ids skipped: no longer pending, or refused with
    a warning). Slurm unreachable raises (the entries stay open)."""
    open_by_job: dict[str, list] = {}
    if journal is not None:
        for e in journal.open_entries("exc_nodes"):
            open_by_job.setdefault(e.job_id, []).append(e)
    pending = {j.job_id for j in jobs if j.is_pending}
    todo = {job_id: names for job_id, names in excluded.items()
            if job_id in pending and (names or job_id in open_by_job or journal is None)}
    now_lists = client.excluded_nodes(list(todo)) if todo else {}
    written: dict[str, str] = {}
    skipped: list[str] = []
    for job_id, names in todo.items():
        have = now_lists.get(job_id)
        if have is None:
            log.debug("job %s: its excluded nodes could not be read; left as they are", job_id)
            continue
        entries = open_by_job.get(job_id, [])
        own = owners_part(have, entries) if journal is not None else ()
        mine = set(names) - set(own)              # the nodes msched adds to the owner's
        value = ",".join(sorted(set(own) | mine))
        if value == ",".join(have):
            if entries and not mine and not dry_run:
                journal.close([e.id for e in entries], "cleared")     # the owner's list is all it needs
            continue
        if dry_run:
            written[job_id] = value
            continue
        new_id = journal.record_hold(job_id, "exc_nodes", _journal_value(value), "packing: kept off a bad partner's node",
                                     own=",".join(own)) if journal is not None and mine else None
        try:
            client.set_exc_nodes(job_id, value)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            gone = isinstance(exc, JobNotPending)
            if not gone:
                log.warning("job %s: Slurm refused the excluded nodes, skipped this round: %s", job_id, exc)
            skipped.append(job_id)
            if new_id is not None:
                journal.close([new_id], "gone" if gone else "refused")
            continue
        written[job_id] = value
        if entries:
            journal.close([e.id for e in entries], "moved" if mine else "cleared")
    return written, skipped


def owners_part(have: Sequence[str], entries: Sequence) -> tuple[str, ...]:
    """The job owner's names in its excluded list `have` (sorted names, as Slurm holds it now), given the
    job's open `exc_nodes` entries: the owner's part the newest entry whose write Slurm holds recorded
    (an older one when a round died between recording a write and making it); all of `have` when Slurm
    holds none of them (no entry, or the owner rewrote the list since)."""
    now = _journal_value(",".join(have))
    entry = next((e for e in reversed(entries) if e.value == now), None)
    if entry is None:
        return tuple(have)
    return tuple(n for n in (entry.own or "").split(",") if n)


def _journal_value(nodes: str) -> str:
    """A node list as the journal keeps it (its value column holds 64 characters): itself, or a digest."""
    if len(nodes) <= 64:
        return nodes
    import hashlib

    return "sha256:" + hashlib.sha256(nodes.encode()).hexdigest()[:56]


# ------------------------------------------------------------------------------ the begin-time lever


def record_nice_originals(journal, updates) -> None:  # noqa: ANN001
    """Before msched's first nice write on a job (config `priority_lever = "nice"`), the job's own nice
    offset (its owner's `--nice`, usually 0) into the journal, so `--release` can put it back: nice
    offsets, unlike explicit priorities, survive the hold and release that resets a priority."""
    have = {e.job_id for e in journal.open_entries("nice")}
    new = [(u.job_id, "nice", str(int(u.old or 0)), "the job's own nice offset before msched's")
           for u in updates if u.job_id not in have]
    if new:
        journal.record_holds(new)


def begin_time_owners(jobs: Sequence[SlurmJob], journal, now: float) -> tuple[dict[str, float], set[str]]:  # noqa: ANN001
    """Which future begin times are msched's: ({job id: begin time} that the journal's open entry for the
    job names, as Slurm still holds it; the other pending jobs with a future begin time, which someone
    else set (the user's own `--begin`/`scontrol update StartTime=`, or msched's overwritten by the user):
    never touched). Without a journal (the simulator, whose users set none) every begin time is msched's."""
    current = {j.job_id: t for j in jobs if (t := j.held_until(now)) is not None}
    if journal is None:
        return current, set()
    recorded: dict[str, list[float]] = {}
    for e in journal.open_entries("begin_time"):
        try:
            recorded.setdefault(e.job_id, []).append(float(e.value))
        except ValueError:
            continue
    ours = {j: t for j, t in current.items() if any(abs(v - t) <= MATCH_S for v in recorded.get(j, ()))}
    return ours, set(current) - set(ours)


def apply_begin_times(client: SlurmClient, changes, journal) -> tuple[list, list[str]]:  # noqa: ANN001
    """Write begin-time changes (msched.policy.reservations.BeginTimeChange), each recorded in the journal
    *before* its Slurm call (so `--release` and the next round see it whatever happens next) and the
    job's older entries closed after it. Returns (written changes, job ids skipped: no longer pending, or
    refused with a warning). Slurm unreachable raises: the entries stay open, each begin time expires by
    itself and `--release` clears it."""
    open_by_job: dict[str, list[int]] = {}
    if journal is not None:
        for e in journal.open_entries("begin_time"):
            open_by_job.setdefault(e.job_id, []).append(e.id)
    written: list = []
    skipped: list[str] = []
    for c in changes:
        new_id = None
        if journal is not None and c.when is not None:
            new_id = journal.record_hold(c.job_id, "begin_time", str(int(c.when)), c.reason)
        try:
            client.set_begin_time(c.job_id, None if c.when is None else int(c.when))
        except SlurmUnavailable:
            raise
        except JobNotPending:
            log.info("job %s is no longer pending: begin time not written", c.job_id)
            skipped.append(c.job_id)
            if new_id is not None:
                journal.close([new_id], "gone")
            continue
        except SlurmError as exc:
            log.warning("job %s: Slurm refused the begin time, skipped this round: %s", c.job_id, exc)
            skipped.append(c.job_id)
            if new_id is not None:
                journal.close([new_id], "refused")
            continue
        written.append(c)
        if journal is not None and open_by_job.get(c.job_id):
            journal.close(open_by_job[c.job_id], "cleared" if c.when is None else "moved")
        log.info("job %s: begin time %s (%s)", c.job_id, "cleared" if c.when is None else f"{c.when:.0f}", c.reason)
    return written, skipped
