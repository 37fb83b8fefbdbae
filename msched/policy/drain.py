"""Keeping a GPU type draining for the whole-node jobs that wait on it (policy option `drain_wide`).

Why (BENCHMARKS.md, wide18): Slurm's backfill reserves a whole node for a waiting wide job only when, by the
running jobs' *time limits*, one frees within `bf_window` (a day by default). Users' limits are a large
multiple of their runtimes, so on a busy type no node ever qualifies: the wide job gets no reservation, and
every GPU that frees is filled again by the next 1-GPU job. The planner's model books the wide job at the
time its node's running jobs are *estimated* to end and backfills narrow jobs around it, as if Slurm held
the node; on Gavel's load-6 workload it expected such a start within 1-15 h in every round of a wait that
lasted ~220 h, while the K80s and P100s stood idle.

So the plan itself keeps the type free: while a managed whole-node job is planned on a type and cannot start
now, the managed, unpinned jobs that take part of a node are planned without that type wherever another
feasible type runs them within `DRAIN_SLACK` of their runtime there, so the type's nodes drain as their jobs end (by their runtimes, not their limits) and
the first node that stands whole takes the wide job. Pure function of the snapshot and the plan made for it:
the drained types come from that plan, and the policy plans again on the snapshot with those jobs' allowed
types narrowed (`drained_snapshot`). The retyped jobs are moves settle must make (`Plan.obliged`), since by
the evaluation model (which reserves as the planner does) each of them only loses; and the type's published
free time is no earlier than the wide jobs' planned starts, so msub sends narrow arrivals elsewhere too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from msched.policy.snapshot import ClusterSnapshot, PendingJob, Plan

START_SLACK_S = 60.0      # a planned start within this of now is a start now: nothing to drain for
DRAIN_SLACK = 2.0         # a narrow job leaves a drained type only for one that runs it within this factor of it
                          # (unbounded, seed 4 of the load-6 workload: a 2-GPU lm sent to a K80 ran 663 h, makespan
                          # 446 -> 809 h)
NARROW_MAX_GPUS: int | None = None   # only jobs of at most this many GPUs are kept off a drained type (None: every
                          # job narrower than a node)


@dataclasses.dataclass(frozen=True)
class Drain:
    """What a drained plan was made from: per drained type, the whole-node jobs it drains for, and the
    narrow jobs planned without it (job id -> the allowed types they were planned with)."""

    waiting: Mapping[str, tuple[str, ...]]
    narrowed: Mapping[str, tuple[str, ...]]


def node_widths(snapshot: ClusterSnapshot) -> dict[str, int]:
    """Per GPU type, the GPUs of its widest node: a job of at least that many takes whole nodes."""
    out: dict[str, int] = {}
    for n in snapshot.nodes:
        if n.gpus > out.get(n.gpu_type, 0):
            out[n.gpu_type] = n.gpus
    return out


def waiting_wide(snapshot: ClusterSnapshot, plan: Plan) -> dict[str, tuple[str, ...]]:
    """{GPU type: the managed whole-node jobs the plan holds to it that it does not start now}, for the
    type(s) of the first such job in the plan's priority order only (starving jobs first, oldest first): one
    type drains at a time. Draining every type a wide job waits on left no type for the narrow jobs (seed 4:
    at 38.4 h the K80s, P100s and V100s each had one waiting, and nothing was narrowed at all)."""
    width = node_widths(snapshot)
    pending = {j.job_id: j for j in snapshot.pending if j.managed}
    late = snapshot.now + START_SLACK_S
    first: tuple[str, ...] = ()
    out: dict[str, list[str]] = {}
    for d in sorted(plan.decisions, key=lambda d: -d.priority):
        job = pending.get(d.job_id)
        if job is None or d.est_start is None or d.est_start <= late:
            continue
        on = tuple(t for t in d.gpu_types or job.allowed_types if t in width and job.num_gpus >= width[t])
        if not on:
            continue
        first = first or on
        for t in on:
            if t in first:
                out.setdefault(t, []).append(job.job_id)
    return {t: tuple(ids) for t, ids in sorted(out.items())}


def drained_snapshot(snapshot: ClusterSnapshot, plan: Plan,
                     slack: float = DRAIN_SLACK) -> tuple[ClusterSnapshot | None, Drain] | None:
    """What drains after `plan`: None when no whole-node job waits; else the snapshot to plan again on, with
    every managed, unpinned narrow job that may run elsewhere kept off the drained types (None when no
    pending job changes: the plan stands, only its published free times change), and the drain."""
    waiting = waiting_wide(snapshot, plan)
    if not waiting:
        return None
    width = node_widths(snapshot)
    drained = set(waiting)
    narrowed: dict[str, tuple[str, ...]] = {}
    pending: list[PendingJob] = []
    for job in snapshot.pending:
        keep = _kept_types(job, drained, width, slack)
        if keep is None:
            pending.append(job)
            continue
        narrowed[job.job_id] = keep
        pending.append(dataclasses.replace(job, allowed_types=keep))
    again = dataclasses.replace(snapshot, pending=tuple(pending)) if narrowed else None
    return again, Drain(waiting, narrowed)


def _kept_types(job: PendingJob, drained: set[str], width: Mapping[str, int],
                slack: float) -> tuple[str, ...] | None:
    """The types a narrow job is planned with while `drained` drain: those that run it within `slack` of its
    runtime on the drained type (None, so left as it is, where it has none)."""
    if not job.managed or job.pinned_type or not job.est_runtime_s or \
            (NARROW_MAX_GPUS is not None and job.num_gpus > NARROW_MAX_GPUS):
        return None
    feasible = [t for t in job.est_runtime_s if t in width and (not job.allowed_types or t in job.allowed_types)]
    hit = [t for t in feasible if t in drained and job.num_gpus < width[t]]
    if not hit:
        return None
    best = min(job.est_runtime_s[t] for t in hit)
    keep = tuple(sorted(t for t in feasible if t not in hit and job.est_runtime_s[t] <= slack * best))
    return keep or None


def drained_plan(plan: Plan, drain: Drain, original: ClusterSnapshot) -> Plan:
    """The plan made on the drained snapshot (or the plan itself where no pending job was narrowed), as the
    round holds it: the narrowed jobs are obliged moves (settle makes those whose types changed), and a
    drained type is published as free no earlier than the last planned start of the jobs it drains for, so
    that msub types an arrival there only where it would still complete there first (an arrival typed to
    the drained type is started by backfill on its freed GPUs before any round could retype it: seed 4,
    half of the 151 narrow jobs started on a V100 during the wait had waited 0 s)."""
    starts = {d.job_id: d.est_start for d in plan.decisions}
    floor = dict(plan.free_floor)
    for t, ids in drain.waiting.items():
        last = max((starts[j] for j in ids if starts.get(j) is not None), default=None)
        if last is not None:
            floor[t] = max(floor.get(t, original.now), last)
    out = dataclasses.replace(plan, obliged=frozenset(j for j in drain.narrowed if j in starts), free_floor=floor)
    out.free_time = out.floored(plan.free_time)
    return out
