"""The begin-time lever (issue 17 point 3): keep backfill from starting a job on GPUs the plan keeps for
an earlier-planned job.

Why: Slurm's backfill starts a lower job now when, by the *time limits* it knows, the job ends before
the reservations of the jobs above it. msched plans with estimates, which are usually far shorter than
limits: a running job that the plan expects to end in an hour holds its GPUs for its 12-hour limit in
backfill's view, so backfill happily starts a 6-hour job on the GPUs the plan gave the next job in an
hour, and that job then waits five hours more. A future begin time (`scontrol update StartTime=`) keeps
such a job out of both of Slurm's passes until then (job_independent() leaves it out: reason BeginTime)
and expires by itself: a reorderer that dies leaves nothing held for longer than the plan wanted.

The decision is a pure function of the snapshot and the plan the round holds:
- candidates: managed pending jobs the plan starts later (planned start more than `min_hold_s` away)
  that could start *now* on a type their constraint allows (free GPUs now on one node or whole nodes);
- a candidate "would delay" the plan when, with it booked now on such a type for its estimated runtime,
  an earlier-planned job within `horizon_s` starts later than in the plan's replay without it (both
  replays: `msched.policy.base.simulate`, the planner's model of Slurm) by more than `tolerance_s` and
  by more than `min_gain` times what the hold costs the candidate (its planned start from now): by
  default a hold must gain more completion time than it costs;
- such a job's begin time becomes its planned start, never later, never beyond `now + horizon_s`;
- a begin time msched set earlier (`ours`, from the hold journal) is moved only when the plan moved the
  job's start by more than the tolerance, and cleared when the plan now starts the job within
  `min_hold_s` (unless it expires within the tolerance anyway); one another hand set (the user's own, not in `ours`) is never touched;
- plain (unmanaged) jobs are never written; at most `max_jobs` writes per round (clears first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msched.policy.base import as_is_runtime, default_types, queue_key, simulate
from msched.policy.choice import DEFAULT_UNKNOWN_RUNTIME_S
from msched.policy.snapshot import ClusterSnapshot, JobDecision, PendingJob, Plan
from msched.policy.timeline import Timeline


@dataclass(frozen=True)
class BeginTimeOptions:
    """Config `begin_time_lever` (off by default), `begin_time_max_jobs`, `begin_time_horizon_s`."""

    enabled: bool = False
    max_jobs: int = 20               # begin-time writes per round at most (each is one controller RPC)
    horizon_s: float = 4 * 3600.0    # protect planned starts this far ahead; never hold a job longer
    min_hold_s: float = 120.0        # a planned start closer than this is "now": no hold, clear ours
    tolerance_s: float = 300.0       # delays and moves smaller than this are not worth a write
    min_gain: float = 1.0            # hold only where the delay avoided exceeds this times the hold
    backfill: bool = True            # the replays follow the planner's model of the scheduler (the round sets it)

    @classmethod
    def from_config(cls, config) -> BeginTimeOptions:  # noqa: ANN001
        return cls(bool(config.begin_time_lever), int(config.begin_time_max_jobs), float(config.begin_time_horizon_s),
                   min_gain=float(config.begin_time_min_gain))


@dataclass(frozen=True)
class BeginTimeChange:
    """One write: `when` is the new begin time (epoch), or None to clear msched's (start now)."""

    job_id: str
    when: float | None
    old: float | None = None
    reason: str = ""


def begin_time_changes(snapshot: ClusterSnapshot, plan: Plan, *, ours: Mapping[str, float],
                       foreign: frozenset[str] | set[str] = frozenset(),
                       options: BeginTimeOptions = BeginTimeOptions(),
                       unknown_runtime_s: float = DEFAULT_UNKNOWN_RUNTIME_S) -> list[BeginTimeChange]:
    """The begin-time writes that keep backfill off the plan's reserved GPUs (module docstring).

    `ours`: {job id: begin time msched set and Slurm still holds} (future ones); `foreign`: pending jobs
    with a future begin time someone else set (left alone, and not startable now either)."""
    if not options.enabled or options.max_jobs <= 0 or not plan.decisions:
        return []
    now = snapshot.now
    pending = {j.job_id: j for j in snapshot.pending}
    decisions = {d.job_id: d for d in plan.decisions if d.job_id in pending}
    horizon = now + options.horizon_s
    base = Timeline(now, snapshot.nodes, snapshot.running, unknown_runtime_s)

    def choose_for(d: JobDecision, job: PendingJob, tl: Timeline) -> tuple[tuple[str, ...], dict[str, float]]:
        types = tuple(t for t in d.gpu_types if t in tl.by_type) or default_types(job, tl)
        if job.est_runtime_s and all(t in job.est_runtime_s for t in types):
            return types, {t: job.est_runtime_s[t] for t in types}
        return types, as_is_runtime(job, types, unknown_runtime_s)

    # Slurm's order under the plan's priorities: backfill tries candidates in it, and the jobs above a
    # candidate in it are the ones it must not delay (the plan's priorities follow its planned starts)
    queue = sorted(decisions.values(), key=lambda d: queue_key(pending[d.job_id], d.priority))
    protected = [d for d in queue if d.est_start is not None and d.est_start <= horizon and d.job_id not in foreign]
    rank = {d.job_id: k for k, d in enumerate(queue)}

    def replay(tl: Timeline, before: int) -> dict[str, float]:
        """Starts of the protected jobs above queue position `before`, placed by the planner's model of
        Slurm on `tl` (a prefix of the queue: its placements do not depend on the jobs below it)."""
        order = [pending[d.job_id] for d in protected if rank[d.job_id] < before]
        placed, _ = simulate(snapshot, order, lambda job, tl_, _nb: choose_for(decisions[job.job_id], job, tl_),
                             backfill=options.backfill, timeline=tl)
        return {j: p.start for j, p in placed.items()}

    starts: dict[str, float] = {}

    def baseline() -> dict[str, float]:
        if not starts:
            starts.update(replay(base.copy(), len(queue)))
        return starts

    clears: list[BeginTimeChange] = []
    sets: list[BeginTimeChange] = []
    checks = 0
    for d in queue:
        job = pending[d.job_id]
        if not job.managed or d.job_id in foreign or d.est_start is None:
            continue
        held = ours.get(d.job_id)
        start = d.est_start
        if start <= now + options.min_hold_s:
            if held is not None and held > now + options.tolerance_s:   # a nearer one expires by itself
                clears.append(BeginTimeChange(d.job_id, None, held, "the plan starts it now"))
            continue
        want = min(start, horizon)
        if held is None and checks >= 4 * options.max_jobs:
            continue                                  # enough candidates checked for this round's writes
        if held is not None and not (want > held + options.tolerance_s and held - now < options.min_hold_s):
            if want < held - options.tolerance_s:     # the plan moved it earlier: follow, never hold longer
                sets.append(BeginTimeChange(d.job_id, want, held, "the plan starts it earlier"))
            continue
        blocker = _would_delay(d, job, base, choose_for, lambda tl, k=rank[d.job_id]: replay(tl, k), baseline, options)
        checks += blocker is not None
        if blocker:
            sets.append(BeginTimeChange(d.job_id, want, held, blocker if held is None else f"still {blocker}"))
    return (clears + sets)[:options.max_jobs]


def _would_delay(d: JobDecision, job: PendingJob, base: Timeline, choose_for, replay_above, baseline,  # noqa: ANN001
                 options: BeginTimeOptions) -> str | None:
    """Why backfill starting this job now would delay a job above it: "" when it would not, None when it
    could not start now on any type it may use (nothing to check). For each such type with room for it
    now, book it there and replay the jobs above it (`replay_above`); compare their starts with the
    replay of the protected queue without it (`baseline()`)."""
    now = base.now
    types, runtime = choose_for(d, job, base)
    checked = None
    for t in types:
        if t not in runtime or not base.fits(t, job.num_gpus):
            continue
        p = base.earliest(t, job.num_gpus)
        if p is None or p.start > now:
            continue                                  # no room now: backfill cannot start it there
        checked = ""
        before = baseline()
        tl = base.copy()
        tl.commit(tl.earliest(t, job.num_gpus), now + runtime[t])
        after = replay_above(tl)
        hold = d.est_start - now                      # what waiting for its planned start costs this job
        for jid, s in after.items():            # the jobs above it (a prefix of the baseline's queue)
            late = s - before.get(jid, s)
            if late > max(options.tolerance_s, options.min_gain * hold):    # a hold must gain more than it costs
                return (f"kept off {t} for job {jid} (planned {before[jid] - now:.0f}s from now; "
                        f"{late:.0f}s later if this one started now)")
    return checked
