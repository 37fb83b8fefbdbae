"""Rounds that settle: the incumbent plan, hysteresis and the write budget, for every policy's rounds.

A policy's plan is a pure function of the snapshot (`msched.policy`), never of what msched wrote, so an
unchanged queue plans the same and writes nothing. What the plan cannot know is what a change costs:
every written priority or constraint is one REQUEST_UPDATE_JOB under slurmctld's job write lock
(~0.4 ms each on an idle controller) and a flap in what users see. So a round compares the new plan
with the incumbent (what msched holds each job to: the types and priority it last wrote) and writes
only the changes worth their writes:

1. Both are evaluated on the snapshot with one model of Slurm (`msched.policy.base.simulate`: jobs in
   priority order, each on the allowed type that starts it first): estimated start and end per job, the
   makespan and the mean end of the managed jobs.
2. A job moves (takes its new type and its new place in the order) only when its own planned finish
   improves by `job_margin` (the policy's `hysteresis`, 5%) of its runtime or of its horizon (planned
   end minus now), the longer. That holds for arrivals too (jobs the incumbent does not know): one
   not worth its writes stays where Slurm put it (msub's type, Slurm's priority) and enters the
   incumbent as found. Obliging every arrival to move made each arrival cost writes whatever it
   gained (measured: an overloaded online trace 5.3 -> 5.1 writes per job; a 10,000-job burst into an
   empty incumbent on the dev cluster 5,551 writes instead of ~6,000).
   Starving jobs not yet widened must move whatever they gain, as must the jobs the plan names in
   `Plan.obliged` once their types change (a drain the evaluation's model cannot see: msched.policy.drain),
   and so must every job when msched
   holds no job to anything yet (`incumbent=None` or an empty one: the first round on a new store,
   the simulator's first round): that round writes the plan as it stands, within the budget.
3. Moves are taken by gain relative to the job's runtime or horizon (the measure of 2), largest first,
   until the write budget is spent (a move costs a write for its constraint when retyped and one for
   its priority when that changes): a job about to start that gains a tenth of its runtime goes before
   one planned weeks out that gains a day. The rest waits for the next
   round. Optional moves are also rate-limited by what changed: at most `moves_per_change` per job that
   arrived or left the queue since the incumbent, and at least `drift_share` of the managed queue. A few
   jobs ending re-plans the whole queue, and a search-based planner can find a different plan from a
   slightly different snapshot (measured on the dev cluster: 4 ends moved 102 of 998 jobs in one
   round); those moves still happen, largest gain first, spread over the next rounds, so one ordinary
   event never rewrites a tenth of the queue at once and users do not see their job's place flap.
4. The hybrid (incumbent order with the moved jobs inserted at their new planned starts, moved jobs on
   their new types) is evaluated; it replaces the incumbent only when it beats it by `plan_margin` of the
   horizon on the plan's measure, and never when it is worse on it. The measure is the plan's own when
   it carries one and `allowance_share` is set (`Plan.measure`: "allowance" for balanced's short-first
   plan of a batch: the mean end while the makespan is within the plan's allowance, a share of
   `Plan.makespan_slack_s` past the plan's own makespan, the makespan first past it, as the planner
   ranked it), else the objective's (makespan first, the mean end for `jct`, `balanced_measure` for an
   online balanced plan). Off by default: weighed by its allowance round after round, a batch's held
   plan drifts to a longer makespan for no better mean JCT (measured, jct14). When it is worse, fewer
   moves are tried (the better half); when it is merely not better by the margin, none (fewer moves of
   the same kind buy less). At worst only the obliged moves are made.
5. After the diff, a round never writes more than the budget: updates beyond it are dropped, lowest
   relative gain first (each write is a whole value on a pending job, so any subset leaves a valid queue).

6. Only the head of the queue is written (`deferred`): Slurm's order matters only where Slurm starts
   jobs before the next round, so the round writes the first `head_gpus` places per GPU of the held
   order (default one per GPU: what can start if every GPU frees at once) and any job Slurm ranks ahead
   of them that the plan does not; the rest keep what Slurm holds, and the incumbent holds them to the
   plan, written as each nears the head. Each job is then written about once, near its start, instead
   of at every re-plan while it waits (measured on an overloaded online trace, 400 jobs on 16 GPUs,
   8 seeds: 7.98 -> 1.59 writes per job, makespan and mean JCT equal or better: BENCHMARKS.md).

7. An event round may re-plan only the head (`replan_head`, places per GPU; off by default): when msched
   already holds the queue to an incumbent, the jobs past the first `replan_head` places per GPU of the
   incumbent's order cannot start for a long while, so the round keeps their ranks and types (the
   incumbent's) and plans anew, and settles, only the head (`replan_head_jobs`: those places, every
   arrival, every starving job). The held plan is then the head's settled plan with the incumbent's tail,
   evaluated once on the whole queue, and once more for the incumbent: when it is worse than the
   incumbent on the objective's measure, the round keeps the incumbent (or, when a starving job is in
   the head, plans the whole queue instead: `settle_head`). Settle weighs the head's moves against the
   head's horizon, shorter than the whole queue's, so more of them pass its margin there; the whole
   queue's evaluation is the check that they pay. At
   10,000 pending the planner and settle cost ~1.1 s of CPU per event round over the whole queue
   (BENCHMARKS "Rounds that settle, seventh pass").

`incumbent=None` means none is known (a first round, a test): every job is new, so the round writes the
plan as it stands (within the budget). The round core keeps the incumbent of what it wrote
(`RoundResult.incumbent`); the reorderer stores it, the simulator's replay keeps it in memory.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import os
import select
import signal
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from msched.policy.base import Placed, as_is_runtime, default_types, queue_key, simulate
from msched.policy.planner import BATCH_SHARE
from msched.policy.priorities import keeping_plain
from msched.policy.snapshot import ClusterSnapshot, JobDecision, PendingJob, Plan, decision_at
from msched.policy.timeline import Timeline

DEFAULT_WRITE_BUDGET = 3000        # ~0.33-0.4 ms per REQUEST_UPDATE_JOB idle: ~1 s of controller time per round;
                                   # a 10,000-job burst (~5,400 worthwhile writes) settles in 2 rounds
DEFAULT_PLAN_MARGIN = 0.01         # of the horizon (measure minus now)
DEFAULT_JOB_MARGIN = 0.05          # of the job's runtime
DEFAULT_MOVES_PER_CHANGE = 8       # optional moves per job that arrived or left the queue
DEFAULT_DRIFT_SHARE = 0.005        # optional moves per round whatever changed, as a share of the queue
DEFAULT_HEAD_GPUS = 1.0            # places at the head of the queue written, per GPU of the cluster
DEFAULT_REPLAN_HEAD = None         # places re-planned per GPU in a head-only round (7.); None: the whole queue
UNKNOWN_RUNTIME_S = 3600.0
# 4.'s measure for an online queue planned "balanced" (JCT first, the makespan within the planner's allowance):
# "makespan" weighs it as a makespan plan (makespan first, then the mean end); "jct" by the mean end alone;
# "capped" by the mean end, with the makespan no later than the later of the incumbent's and the new plan's
# (the planner already kept the new plan's makespan within its tolerance of the best it found)
BALANCED_MEASURES = ("makespan", "capped", "jct")
_TRIES = 4                         # hybrids tried per round: all moves, then the better half, quarter...


@dataclass(frozen=True)
class SettleOptions:
    write_budget: int = DEFAULT_WRITE_BUDGET
    plan_margin: float = DEFAULT_PLAN_MARGIN
    job_margin: float | None = None           # None: the policy's `hysteresis`, else DEFAULT_JOB_MARGIN
    moves_per_change: int | None = DEFAULT_MOVES_PER_CHANGE   # None: no rate limit (only the budget)
    drift_share: float = DEFAULT_DRIFT_SHARE
    head_gpus: float | None = DEFAULT_HEAD_GPUS   # places written per GPU (6. above); None: the whole queue
    balanced_measure: str = "makespan"        # how 4. weighs an online balanced plan (BALANCED_MEASURES)
    # 2.'s own-finish rule: a known job moves only when its own planned finish improves by the job margin
    # (True); False: every job the new plan changes is a candidate and 4.'s plan-level test alone decides
    # (a job moved to a slower type that starts now, later for itself, freeing a fast GPU for others).
    # Measured on the bench's online workloads (BENCHMARKS.md, jct11)
    own_finish: bool = True
    replan_head: float | None = DEFAULT_REPLAN_HEAD   # places re-planned per GPU (7. above); None: all
    # 4.'s "allowance" measure (a plan's own, `Plan.measure`): the share of the plan's makespan slack
    # (`Plan.makespan_slack_s`) a held plan may use, 0: no later than the new plan's own makespan; None (the
    # default): the plan's own measure ignored, the objective's weighs it (makespan first for a batch).
    # Measured (jct14, BENCHMARKS.md "Short jobs first as the default"): round after round the allowance
    # drifts the batch's makespan (static bench batch, tuning seeds: 0.616x fifo with None, 0.661 with 0,
    # 0.683 with 1; the oracle 1.11 / 1.20 / 1.23x the LP bound) for no mean JCT beyond the seed noise
    allowance_share: float | None = None
    # processes that weigh 4.'s hybrids at once (`TrialsAside`): 2 evaluates every other trial of the
    # halving sequence in a forked child while this process evaluates the rest, so a round whose moves are
    # all refused (the usual event round) waits for half its trials; the same trials, decided in the same
    # order, so the same plan. 1 (the default, and the simulator's): this process alone. Measured on the
    # dev cluster at 10,000 pending (BENCHMARKS "fourteenth pass"): event rounds' settle phase 0.34 s with 2
    # against 0.27 s with 1 (medians of 8 each, one tree, alternating): the fork and the copy-on-write
    # faults cost more than the trials it takes aside on the 2-core machine, so it stays off
    trial_workers: int = 1

    def __post_init__(self) -> None:
        if self.write_budget < 0:
            raise ValueError(f"write budget must be >= 0 (got {self.write_budget})")
        if (self.moves_per_change is not None and self.moves_per_change < 0) or not 0 <= self.drift_share <= 1:
            raise ValueError("moves_per_change must be >= 0 and drift_share in [0, 1]")
        if self.plan_margin < 0 or (self.job_margin is not None and self.job_margin < 0):
            raise ValueError("margins must be >= 0")
        if self.head_gpus is not None and self.head_gpus <= 0:
            raise ValueError(f"head_gpus must be > 0 (got {self.head_gpus})")
        if self.replan_head is not None and self.replan_head <= 0:
            raise ValueError(f"replan_head must be > 0 (got {self.replan_head})")
        if self.allowance_share is not None and not 0 <= self.allowance_share <= 1:
            raise ValueError(f"allowance_share must be in [0, 1] or None (got {self.allowance_share})")
        if self.trial_workers not in (1, 2):
            raise ValueError(f"trial_workers must be 1 or 2 (got {self.trial_workers})")
        if self.balanced_measure not in BALANCED_MEASURES:
            raise ValueError(f"unknown balanced_measure {self.balanced_measure!r}; "
                             f"choose one of {', '.join(BALANCED_MEASURES)}")

    def move_cap(self, changes: int, managed: int) -> int | None:
        """Optional moves one round may make after `changes` arrivals and departures (None: no cap)."""
        if self.moves_per_change is None:
            return None
        return max(self.moves_per_change * changes, math.ceil(self.drift_share * managed))


@dataclass(frozen=True)
class Incumbent:
    """What msched holds each managed pending job to: the GPU types and the priority it last wrote (or
    found and kept). Jobs absent from it are new to msched."""

    types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    priority: Mapping[str, int] = field(default_factory=dict)

    def __contains__(self, job_id: str) -> bool:
        return job_id in self.priority

    def __len__(self) -> int:
        return len(self.priority)


@dataclass(frozen=True)
class Evaluation:
    """A queue state as the Slurm model runs it: per job start and end, and the two measures."""

    placed: Mapping[str, Placed]
    makespan_end: float
    mean_end: float                 # mean over managed jobs placed (absolute time); inf when none
    timeline: Timeline
    order: Sequence[PendingJob] = ()    # the queue in the order the model ran it (Slurm's, `queue_key`)

    def end(self, job_id: str) -> float:
        p = self.placed.get(job_id)
        return p.end if p is not None else math.inf


@dataclass
class SettleReport:
    """What the round chose and what its writes buy, for the log line and the store's round row."""

    new_jobs: int = 0                 # jobs new to the incumbent (arrivals, or not yet placed)
    candidates: int = 0               # known jobs whose own finish the new plan improves past the margin
    moved: int = 0                    # moves written into the held plan
    held_back: int = 0                # moves and updates left for a later round (budget, rate limit)
    changes: int = 0                  # jobs that arrived or left the queue since the incumbent
    kept: int = 0                     # candidate moves not worth their writes (the incumbent kept)
    accepted: bool = True             # the optional moves beat the incumbent by the margin
    makespan_incumbent: float | None = None   # seconds from now
    makespan_new: float | None = None         # the policy's plan, as the model runs it
    makespan_held: float | None = None        # what is written
    mean_end_incumbent: float | None = None
    mean_end_held: float | None = None
    gain: dict[str, float] = field(default_factory=dict)    # job id -> planned finish improvement (s)
    relative: dict[str, float] = field(default_factory=dict)  # job id -> gain / max(runtime, horizon)
    placed: set[str] = field(default_factory=set)           # jobs whose held entry is this round's plan
    head: int | None = None           # jobs planned anew in a head-only round (7.); None: the whole queue

    def buys(self) -> str:
        """`makespan -120s mean_end -35s` (held minus incumbent; negative is sooner)."""
        def delta(a: float | None, b: float | None) -> str:
            return "-" if a is None or b is None else f"{b - a:+.0f}s"
        return (f"makespan {delta(self.makespan_incumbent, self.makespan_held)} "
                f"mean_end {delta(self.mean_end_incumbent, self.mean_end_held)}")


def evaluate(snapshot: ClusterSnapshot, priority: Mapping[str, int], types: Mapping[str, tuple[str, ...]], *,
             backfill: bool = False, unknown_runtime_s: float = UNKNOWN_RUNTIME_S,
             memo: dict | None = None) -> Evaluation:
    """The queue with these managed priorities and types (others as Slurm holds them), run by the model.
    `memo`: a dict shared by the evaluations of one snapshot (a round evaluates it several times with
    mostly the same types per job), keeping each job's (types, runtimes) for the types it was held to."""
    memo = {} if memo is None else memo
    order = slurm_order(snapshot, priority, memo)

    tl = Timeline(snapshot.now, snapshot.nodes, snapshot.running)
    by_type = tl.by_type

    def choose(job: PendingJob, tl: Timeline, _not_before: float):
        held = types.get(job.job_id) if job.managed and not job.pinned_type else None
        key = (job.job_id, held)
        hit = memo.get(key)
        if hit is not None:
            return hit
        ts = tuple([t for t in held if t in by_type]) if held else ()
        if not ts:
            ts = default_types(job, tl)
        # the job's own estimates where they hold every type it may take (simulate reads only those):
        # `as_is_runtime`'s values, without a dict of them
        est = job.est_runtime_s
        memo[key] = hit = (ts, est if est and all([t in est for t in ts]) else as_is_runtime(job, ts, unknown_runtime_s))
        return hit

    # a job's choice depends on the job and the types it is held to only (and the cluster's types, the same
    # on every timeline of the snapshot): all made before the pass, the kept ones read without a call
    get = memo.get
    choices = [get((j.job_id, types.get(j.job_id) if j.managed and not j.pinned_type else None))
               or choose(j, tl, 0.0) for j in order]
    placed, tl = simulate(snapshot, order, choose, backfill=backfill, timeline=tl, choices=choices)
    # the running jobs' part of the makespan is the snapshot's (cached) running_end
    last = max((p.end for p in placed.values()), default=snapshot.now)
    managed = [placed[j.job_id].end for j in snapshot.pending if j.managed and j.job_id in placed]
    return Evaluation(placed, max(last, snapshot.running_end),
                      sum(managed) / len(managed) if managed else math.inf, tl, order)


_RANKS = object()       # `slurm_order`'s entry in an evaluation memo


def slurm_order(snapshot: ClusterSnapshot, priority: Mapping[str, int], memo: dict | None = None) -> list[PendingJob]:
    """The pending jobs in Slurm's order (`queue_key`) with these priorities (a job absent keeps its own):
    `sorted(pending, key=lambda j: queue_key(j, priority.get(j.job_id)))`, exactly. The part of the key
    that no priority changes (submit time, then job id) is ranked once per snapshot and kept in `memo`,
    so each evaluation sorts pairs of integers (twelfth pass: ~3x less CPU for the sort at 10,000 pending)."""
    pending = snapshot.pending
    kept = memo.get(_RANKS) if memo is not None else None
    if kept is None or kept[0] is not pending:
        if any(j.submit_time != j.submit_time for j in pending):     # a NaN: only the whole key's sort
            return sorted(pending, key=lambda j: queue_key(j, priority.get(j.job_id)))
        by_static = sorted(range(len(pending)), key=lambda i: queue_key(pending[i], 0))
        ranks = [0] * len(pending)
        for rank, i in enumerate(by_static):
            ranks[i] = rank
        kept = (pending, ranks)
        if memo is not None:
            memo[_RANKS] = kept
    get = priority.get
    keys = [(-(p if (p := get(j.job_id)) is not None else j.priority), r) for j, r in zip(pending, kept[1], strict=True)]
    return [pending[i] for i in sorted(range(len(pending)), key=keys.__getitem__)]


def _incumbent_state(snapshot: ClusterSnapshot, incumbent: Incumbent | None):
    """Per managed job: priority and types under the incumbent; jobs it does not know keep what Slurm
    holds (that is what not writing them means)."""
    prio: dict[str, int] = {}
    types: dict[str, tuple[str, ...]] = {}
    for j in snapshot.pending:
        if not j.managed:
            continue
        if incumbent is not None and j.job_id in incumbent:
            prio[j.job_id] = int(incumbent.priority[j.job_id])
            types[j.job_id] = tuple(incumbent.types.get(j.job_id, ()))
        else:
            prio[j.job_id] = j.priority
            types[j.job_id] = tuple(j.current_types)
    return prio, types


def _measure(plan: Plan, objective: str, opts: SettleOptions) -> str:
    """4.'s measure: the plan's own (`Plan.measure`: what the planner made it for, e.g. "allowance" for a
    batch planned for its makespan and then for its sum of ends within an allowance, `short_first`), else
    the objective's (an online balanced plan: `balanced_measure`)."""
    if plan.measure is not None and opts.allowance_share is not None:
        return plan.measure
    return opts.balanced_measure if objective == "balanced" else objective


def _allowed(ev: Evaluation, cap: float) -> Evaluation:
    """`ev` as the "allowance" measure weighs it: its makespan end no earlier than `cap` (a plan within
    the allowance ranks by its mean end, one past it by its makespan first)."""
    return dataclasses.replace(ev, makespan_end=max(ev.makespan_end, cap))


def _better(held: Evaluation, base: Evaluation, now: float, objective: str, margin: float,
            cap: float = math.inf) -> bool:
    """`held` beats `base` by the margin on the objective's measure, and is no worse on it ("capped":
    the mean end's measure with the makespan end at most `cap`; "allowance": makespan first with every
    makespan end below `cap` counted as `cap`, so that within it the mean end decides)."""
    tol = 1e-6
    if objective == "allowance":
        held, base = _allowed(held, cap), _allowed(base, cap)
    elif objective in ("jct", "capped"):
        span = max(base.mean_end - now, 1.0)
        return held.mean_end <= base.mean_end + tol and base.mean_end - held.mean_end > margin * span \
            and held.makespan_end <= cap + tol
    span_mk = max(base.makespan_end - now, 1.0)
    if held.makespan_end > base.makespan_end + tol:
        return False
    if base.makespan_end - held.makespan_end > margin * span_mk:
        return True
    span = max(base.mean_end - now, 1.0)
    return held.mean_end <= base.mean_end + tol and base.mean_end - held.mean_end > margin * span


def _worse(held: Evaluation, base: Evaluation, objective: str, cap: float = math.inf) -> bool:
    """`held` is worse than `base` on the objective's measure (makespan first, then the mean end; "jct":
    the mean end; "capped": the mean end, or a makespan end past `cap`; "allowance": makespan first with
    every makespan end below `cap` counted as `cap`)."""
    tol = 1e-6
    if objective == "allowance":
        held, base = _allowed(held, cap), _allowed(base, cap)
    elif objective in ("jct", "capped"):
        return held.mean_end > base.mean_end + tol or held.makespan_end > cap + tol
    return held.makespan_end > base.makespan_end + tol or (
        held.makespan_end >= base.makespan_end - tol and held.mean_end > base.mean_end + tol)


def _hybrid_order(inc_order: Sequence[str], inc_eval: Evaluation, moves: Sequence[str], new_eval: Evaluation,
                  new_rank: Mapping[str, int]) -> list[str]:
    """The incumbent order with each moved job taken out and put back before the first unmoved job that
    the incumbent starts after the moved job's new planned start (moved jobs among themselves in the new
    plan's order). Unmoved jobs keep their order, so their priorities stay as they are."""
    moved = set(moves)
    stay = [j for j in inc_order if j not in moved]
    placed = inc_eval.placed
    starts = [p.start if (p := placed.get(j)) is not None else math.inf for j in stay]
    # running max of the unmoved jobs' starts (sorted, for bisect), folded at C speed: max(m, start) in turn
    latest = list(itertools.accumulate(starts, max, initial=-math.inf))[1:]
    slots: dict[int, list[tuple[float, int, str]]] = {}
    for j in moves:
        p = new_eval.placed.get(j)
        s = p.start if p is not None else math.inf
        slots.setdefault(bisect.bisect_left(latest, s), []).append((s, new_rank.get(j, 0), j))
    out: list[str] = []
    done = 0
    for k in sorted(slots):             # the moves of slot k go just before stay[k]
        out += stay[done:k]
        out += [j for _s, _r, j in sorted(slots[k])]
        done = k
    out += stay[done:]
    return out


ASIDE_MIN_PENDING = 2000    # below it a trial costs about what forking does (~10 ms at ~90 MB)
ASIDE_WAIT_S = 5.0          # the longest the round waits for one of the child's trials (one takes ~0.1 s)


class TrialsAside:
    """Trials of 4.'s halving sequence evaluated in a forked child (`SettleOptions.trial_workers`): the
    child evaluates its trials in order and sends each one's two measures (makespan end, mean end:
    all that `_better` and `_worse` read) down a pipe while this process evaluates the others, so the
    round waits for about half of them. The child is the same code on a copy of this process (the
    same memo and hybrids), so its measures are the ones this process would compute. It only
    computes: it touches no store, no Slurm and no file, and leaves by `os._exit` whatever happens, so
    nothing of the round runs twice. A trial it could not send (it failed, or fork did) is evaluated
    here instead; a trial that is taken is evaluated here again for its whole plan. The round never waits
    on the child for longer than `wait_s` a trial: a child that is stuck (a lock another thread held at
    the fork) or starved is stopped and its trials are evaluated here, so the option cannot hang a round."""

    def __init__(self, pid: int, fd: int, wait_s: float = ASIDE_WAIT_S):
        self.pid, self.fd, self.wait_s = pid, fd, wait_s
        self.closed = False

    @classmethod
    def start(cls, sizes: Sequence[int], evaluation_of: Callable[[int], Evaluation],
              wait_s: float = ASIDE_WAIT_S) -> TrialsAside | None:
        if not sizes or not hasattr(os, "fork"):
            return None
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:                        # the child: measures only, then gone
            try:
                os.close(r)
                for k in sizes:
                    ev = evaluation_of(k)
                    os.write(w, struct.pack("=dd", ev.makespan_end, ev.mean_end))
            finally:
                os._exit(0)
        os.close(w)
        return cls(pid, r, wait_s)

    def next(self) -> Evaluation | None:
        """The child's next trial as `_better` and `_worse` weigh it (its measures only: no placements,
        no timeline), or None when it sent none: it failed, it is done, or it did not answer within
        `wait_s` (then it is stopped, and every later trial is this process's)."""
        if self.closed:
            return None
        data = b""
        while len(data) < 16:
            try:
                ready, _, _ = select.select([self.fd], [], [], self.wait_s)
                chunk = os.read(self.fd, 16 - len(data)) if ready else None
            except OSError:
                chunk = b""
            if chunk is None:               # too slow: its measures would come out of step with the trials
                self.close()
                return None
            if not chunk:
                return None
            data += chunk
        makespan_end, mean_end = struct.unpack("=dd", data)
        return Evaluation(placed={}, makespan_end=makespan_end, mean_end=mean_end, timeline=None)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the child (its trials are no longer needed) and reap it; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        os.close(self.fd)


def settle(snapshot: ClusterSnapshot, plan: Plan, incumbent: Incumbent | None, *, objective: str = "makespan",
           backfill: bool = False, starvation_age_s: float | None = None, job_margin: float = DEFAULT_JOB_MARGIN,
           options: SettleOptions | None = None, managed_first: bool = False,
           unknown_runtime_s: float = UNKNOWN_RUNTIME_S) -> tuple[Plan, SettleReport]:
    """The plan to hold this round: the new plan's worthwhile changes applied to the incumbent. Orders
    are written as the policy writes them (`assign_keeping_plain`: plain jobs keep their rank unless
    `managed_first`)."""
    opts = options or SettleOptions()
    now = snapshot.now
    report = SettleReport()
    pending = {j.job_id: j for j in snapshot.pending}
    new = {d.job_id: d for d in plan.decisions if d.job_id in pending and pending[d.job_id].managed}
    if not new:
        return plan, report
    inc_prio, inc_types = _incumbent_state(snapshot, incumbent)
    new_order = [d.job_id for d in sorted(plan.decisions, key=lambda d: -d.priority) if d.job_id in new]
    new_rank = {j: k for k, j in enumerate(new_order)}
    new_prio = {j: int(d.priority) for j, d in new.items()}
    new_types = {j: (tuple(d.gpu_types) or inc_types.get(j, ())) for j, d in new.items()}
    memo: dict = {}
    inc_eval = evaluate(snapshot, inc_prio, inc_types, backfill=backfill, unknown_runtime_s=unknown_runtime_s,
                        memo=memo)
    if all(new_types[j] == inc_types.get(j, ()) and new_prio[j] == inc_prio[j] for j in new):
        new_eval = inc_eval                  # the plan is the incumbent (an unchanged queue): nothing to weigh
    else:
        new_eval = evaluate(snapshot, {**inc_prio, **new_prio}, {**inc_types, **new_types}, backfill=backfill,
                            unknown_runtime_s=unknown_runtime_s, memo=memo)
    report.makespan_incumbent = inc_eval.makespan_end - now
    report.makespan_new = new_eval.makespan_end - now
    report.mean_end_incumbent = inc_eval.mean_end - now if math.isfinite(inc_eval.mean_end) else None

    def differs(j: str) -> bool:
        return new_types[j] != inc_types.get(j, ()) or new_prio[j] != inc_prio[j]

    # each job's planned end under both (`Evaluation.end`: inf when not placed), read once for every job
    inf, isfinite = math.inf, math.isfinite
    inc_placed, new_placed = inc_eval.placed, new_eval.placed
    inc_end = {j: p.end if (p := inc_placed.get(j)) is not None else inf for j in new}
    gain = {j: inc_end[j] - (p.end if (p := new_placed.get(j)) is not None else inf) for j in new}
    gain = {j: (g if isfinite(g) else (inf if g > 0 else 0.0)) for j, g in gain.items()}
    report.gain = gain
    age = starvation_age_s if starvation_age_s is not None else snapshot.starvation_age_s

    known = incumbent.priority if incumbent is not None else {}
    arrived = [j for j in new if j not in known]
    first = incumbent is None or not len(incumbent)      # msched holds nothing yet: write the plan as it stands
    # obliged besides: a starving job not yet widened (the new plan gives it types the incumbent did not),
    # and a job the plan itself retypes on purpose (`Plan.obliged`: drain's narrowed jobs) whose type changed
    plan_obliged = plan.obliged
    obliged = arrived if first else [] if age is None and not plan_obliged else [
        j for j in new
        if (age is not None and now - pending[j].submit_time > age and set(new_types[j]) - set(inc_types.get(j, ())))
        or (j in plan_obliged and new_types[j] != inc_types.get(j, ()))]
    report.new_jobs = len(arrived)
    obliged_set = set(obliged)
    # 2.'s measure: the gain relative to the job's runtime (in the new plan; unknown_runtime_s when not
    # placed) or to its horizon (its planned end minus now) when that is longer. A job is worth its move
    # when its own finish improves by the margin of that: a job planned days out is re-planned many times
    # before it starts, and moving it now buys little a later round could not (an estimate's error grows
    # with the horizon too)
    share = report.relative = {}
    for j in new:
        p = new_placed.get(j)
        horizon = inc_end[j] - now
        share[j] = gain[j] / max((p.end - p.start) if p is not None else unknown_runtime_s,
                                 horizon if isfinite(horizon) else 0.0, 1.0)
    rank = {j: (-share[j], -gain[j], new_rank[j]) for j in new}     # the order moves are taken in
    waiting: set[str] = set()
    optional = [j for j in new if j not in obliged_set
                and differs(j)
                and (not opts.own_finish or share[j] > job_margin)]
    report.candidates = len(optional)
    if incumbent is not None:
        report.changes = len(arrived) + sum(1 for j in incumbent.priority if j not in pending)
        cap = opts.move_cap(report.changes, len(new))
        if cap is not None and len(optional) > cap:
            # the moves a change buys start with the arrivals themselves: an arrival left waiting behind
            # larger gains elsewhere stays new, and could stay so for ever once the capped moves stop
            # paying their margin (seen with 2 of a 200-job batch planned makespan-first)
            arrived_set = set(arrived)
            optional.sort(key=lambda j: (j not in arrived_set, rank[j]))
            report.held_back += len(optional) - cap
            waiting.update(optional[cap:])
            optional = optional[:cap]

    def cost(j: str) -> int:
        """Writes the move takes: its constraint when retyped, its priority when the new plan changes it
        (where plain jobs keep their rank, many moves can change only the type)."""
        return int(new_types[j] != inc_types.get(j, ())) + int(new_prio[j] != inc_prio[j])

    by_gain = sorted(obliged, key=rank.__getitem__) + sorted(optional, key=rank.__getitem__)
    # where only the head is written (6.), most moves write nothing this round: the budget is spent on
    # what is written (`within_budget`, after `deferred`), else a burst's first round held back 3,036 of
    # 10,000 moves that would have written nothing (measured on the dev cluster) and re-planned for them
    budget = opts.write_budget if opts.head_gpus is None else math.inf
    chosen: list[str] = []
    spent = 0
    for j in by_gain:
        c = cost(j) if differs(j) else 0
        if spent + c > budget:
            report.held_back += 1
            waiting.add(j)
            continue
        chosen.append(j)
        spent += c
    forced = [j for j in chosen if j in obliged_set]
    extra = [j for j in chosen if j not in obliged_set]
    inc_order = [j.job_id for j in inc_eval.order if j.job_id in new]   # the incumbent's order (`queue_key`)
    plain = {j.job_id: j.priority for j in snapshot.pending if not j.managed}
    assign = keeping_plain(inc_order, inc_prio, plain, managed_first)     # each hybrid permutes inc_order

    def hybrid(moves: Sequence[str]) -> tuple[dict[str, int], dict[str, tuple[str, ...]], Evaluation]:
        order = _hybrid_order(inc_order, inc_eval, moves, new_eval, new_rank)
        prio = {**inc_prio, **assign(order)}
        types = dict(inc_types)
        for j in moves:
            types[j] = new_types[j]
        return prio, types, evaluate(snapshot, prio, types, backfill=backfill, unknown_runtime_s=unknown_runtime_s,
                                     memo=memo)

    base = hybrid(forced) if forced else (dict(inc_prio), dict(inc_types), inc_eval)
    measure, cap = _measure(plan, objective, opts), math.inf
    if measure == "capped":
        cap = max(base[2].makespan_end, new_eval.makespan_end)
    elif measure == "allowance":
        cap = new_eval.makespan_end + (opts.allowance_share or 0.0) * plan.makespan_slack_s
    held = base
    taken = list(forced)
    report.accepted = not extra
    sizes: list[int] = []           # the moves each trial takes: all, then the better half, quarter...
    k = len(extra)
    while k > 0 and len(sizes) < _TRIES:
        sizes.append(k)
        k //= 2
    aside = TrialsAside.start(sizes[1::2], lambda k: hybrid(forced + extra[:k])[2]) \
        if opts.trial_workers > 1 and len(sizes) > 1 and len(snapshot.pending) >= ASIDE_MIN_PENDING else None
    try:
        for i, k in enumerate(sizes):
            trial = None
            ev = aside.next() if aside is not None and i % 2 else None     # the child's measures of it
            if ev is None:
                trial = hybrid(forced + extra[:k])
                ev = trial[2]
            if _better(ev, base[2], now, measure, opts.plan_margin, cap):
                held, taken, report.accepted = trial or hybrid(forced + extra[:k]), forced + extra[:k], True
                break
            if not _worse(ev, base[2], measure, cap):
                break       # harmless but not worth the margin: fewer such moves buy less (each try costs a
                #             whole evaluation: ~0.4 s of CPU at 10,000 pending, every round of a steady queue)
    finally:
        if aside is not None:
            aside.close()
    report.kept = len(chosen) - len(taken)
    report.moved = len(taken)
    prio, types, ev = held
    report.makespan_held = ev.makespan_end - now
    report.mean_end_held = ev.mean_end - now if math.isfinite(ev.mean_end) else None
    report.placed = set(new) - waiting     # a job whose move waits (budget, rate limit) keeps its old entry
    placed = ev.placed
    decisions = [decision_at(j, prio[j], tuple(types.get(j, ())), p.start if (p := placed.get(j)) else None,
                             p.end if p else None, new[j].est_runtime_s)
                 for _, _, j in sorted([(-prio[j], k, j) for k, j in enumerate(new)])]   # by priority, stable
    out = Plan(policy=plan.policy, decisions=decisions, est_makespan_end=ev.makespan_end,
               free_time=plan.floored(ev.timeline.free_at()), free_floor=plan.free_floor)
    return out, report


def head_places(snapshot: ClusterSnapshot, head_gpus: float | None) -> int | None:
    """How many places at the head of the queue a round writes (None: all): `head_gpus` per GPU of the
    cluster, at least one."""
    if head_gpus is None:
        return None
    return max(1, math.ceil(head_gpus * sum(snapshot.gpus_total.values())))


def deferred(snapshot: ClusterSnapshot, held: Plan, places: int | None) -> tuple[set[str], set[str]]:
    """Jobs whose writes can wait, and jobs of which only the priority must be written now.

    Slurm's order matters only where Slurm starts jobs before the next round: at the head. A job planned
    past the first `places` places of the held order (plain jobs counted, in their Slurm rank) cannot start
    before the next round unless more GPUs free up than the head fills, so writing its planned place
    and type now buys nothing a later round could not, and each re-plan until it nears the head would
    rewrite it again (measured: most of an overloaded online trace's writes were on such jobs). Its writes
    wait (the first set) as long as Slurm already ranks it after the last head place; one Slurm ranks
    ahead of that (an arrival at priority/basic's high values, a job the plan pushed back) must have
    its priority written (the second set), its type can still wait. The held plan stays the incumbent
    for both, so the order msched intends is kept and written as each job nears the head.

    Not for a batch submitted together (`BATCH_SHARE`, as the planner decides it plans for the
    makespan): there the whole plan is written. Measured on `make demo`'s static batch (600 jobs at t=0,
    48 GPUs): writing only the head cost 5% of makespan and 4% of mean JCT, as backfill started jobs
    behind the head on msub's type before the plan's was written."""
    if places is None or len(snapshot.pending) <= places or snapshot.submitted_together(BATCH_SHARE):
        return set(), set()
    prio = {d.job_id: int(d.priority) for d in held.decisions}
    by_id = {j.job_id: j for j in snapshot.pending}
    order = sorted(snapshot.pending, key=lambda j: queue_key(j, prio.get(j.job_id)))
    last = order[places - 1]
    fence = queue_key(last, prio.get(last.job_id))
    wait: set[str] = set()
    priority_only: set[str] = set()
    for j in order[places:]:
        if not j.managed or j.job_id not in prio:
            continue
        (priority_only if queue_key(by_id[j.job_id]) < fence else wait).add(j.job_id)
    return wait, priority_only


def within_budget(updates: Sequence, budget: int, gain: Mapping[str, float]) -> tuple[list, int]:
    """The updates to write (at most `budget`, whole jobs, largest gain first, in their original order)
    and how many jobs' updates wait for a later round."""
    if len(updates) <= budget:
        return list(updates), 0
    per_job: dict[str, int] = {}
    for u in updates:
        per_job[u.job_id] = per_job.get(u.job_id, 0) + 1
    keep: set[str] = set()
    spent = 0
    for j in sorted(per_job, key=lambda j: -gain.get(j, 0.0)):
        if spent + per_job[j] <= budget:
            keep.add(j)
            spent += per_job[j]
    return [u for u in updates if u.job_id in keep], len(per_job) - len(keep)


def incumbent_after(snapshot: ClusterSnapshot, previous: Incumbent | None, held: Plan, report: SettleReport,
                    not_written: set[str]) -> Incumbent:
    """What msched holds each managed pending job to once this round's writes are in: the held plan's
    types and priority for the jobs it placed; for a job whose updates waited (budget) or failed, what
    the previous incumbent said, or nothing for a new job (it stays new and is placed next round)."""
    decided = held.by_job()
    types: dict[str, tuple[str, ...]] = {}
    prio: dict[str, int] = {}
    for j in snapshot.pending:
        jid = j.job_id
        if not j.managed:
            continue
        if jid in not_written or jid not in report.placed or jid not in decided:
            if previous is not None and jid in previous:
                types[jid] = tuple(previous.types.get(jid, ()))
                prio[jid] = int(previous.priority[jid])
            continue
        d = decided[jid]
        types[jid] = tuple(d.gpu_types)
        prio[jid] = int(d.priority)
    return Incumbent(types=types, priority=prio)


def replan_head_jobs(snapshot: ClusterSnapshot, incumbent: Incumbent | None, places_per_gpu: float | None,
                     starvation_age_s: float | None = None) -> set[str] | None:
    """The jobs a head-only round (7. above) plans anew: the first `places_per_gpu` places per GPU of the
    incumbent's order (plain jobs counted, in their Slurm rank), every managed job the incumbent does not
    know (arrivals) and every starving one. None: the round plans the whole queue (off, no incumbent yet,
    a batch submitted together, or a head that is half the queue or more, as after a burst)."""
    if places_per_gpu is None or incumbent is None or not len(incumbent) \
            or snapshot.submitted_together(BATCH_SHARE):
        return None
    places = max(1, math.ceil(places_per_gpu * sum(snapshot.gpus_total.values())))
    inc_prio, _types = _incumbent_state(snapshot, incumbent)
    order = sorted(snapshot.pending, key=lambda j: queue_key(j, inc_prio.get(j.job_id)))
    head = {j.job_id for j in order[:places]}
    age = starvation_age_s if starvation_age_s is not None else snapshot.starvation_age_s
    now = snapshot.now
    for j in snapshot.pending:
        if j.managed and (j.job_id not in incumbent or (age is not None and now - j.submit_time > age)):
            head.add(j.job_id)
    return head if 2 * len(head) < len(snapshot.pending) else None


def settle_head(snapshot: ClusterSnapshot, plan_of: Callable[[ClusterSnapshot], Plan], incumbent: Incumbent,
                head: set[str], *, objective: str = "makespan", backfill: bool = False,
                options: SettleOptions | None = None, unknown_runtime_s: float = UNKNOWN_RUNTIME_S,
                **settle_kwargs) -> tuple[Plan, Plan, SettleReport] | None:  # noqa: ANN003 - settle's
    """A head-only round (7. above): the policy's plan (`plan_of`) and `settle` on the snapshot cut to the
    `head` jobs (running jobs all kept), against the incumbent's entries for them and for the jobs that
    left; the held plan is that with the incumbent's tail, evaluated on the whole queue. Returns (the held
    plan, the head's new plan, the report), or None when the round must plan the whole queue: no head
    job known to the incumbent, or a held plan worse than the incumbent on the objective's measure with
    a starving job in the head (without one, the incumbent is held)."""
    opts = options or SettleOptions()
    now = snapshot.now
    pending_ids = {j.job_id for j in snapshot.pending}

    def kept(j: str) -> bool:
        return j in head or j not in pending_ids

    sub_inc = Incumbent(types={j: t for j, t in incumbent.types.items() if kept(j)},
                        priority={j: p for j, p in incumbent.priority.items() if kept(j)})
    if not any(j in head for j in sub_inc.priority):
        return None
    sub = dataclasses.replace(snapshot, pending=tuple(j for j in snapshot.pending if j.job_id in head))
    new_plan = plan_of(sub)
    held, report = settle(sub, new_plan, sub_inc, objective=objective, backfill=backfill, options=opts,
                          unknown_runtime_s=unknown_runtime_s, **settle_kwargs)
    inc_prio, inc_types = _incumbent_state(snapshot, incumbent)
    prio, types = dict(inc_prio), dict(inc_types)
    for d in held.decisions:
        if d.job_id in prio:
            prio[d.job_id] = int(d.priority)
            types[d.job_id] = tuple(d.gpu_types)
    memo: dict = {}
    ev = evaluate(snapshot, prio, types, backfill=backfill, unknown_runtime_s=unknown_runtime_s, memo=memo)
    base = ev if (prio == inc_prio and types == inc_types) else \
        evaluate(snapshot, inc_prio, inc_types, backfill=backfill, unknown_runtime_s=unknown_runtime_s, memo=memo)
    measure = _measure(new_plan, objective, opts)
    if base is not ev and _worse(ev, base, measure,
                                        base.makespan_end if measure in ("capped", "allowance") else math.inf):
        # the head's moves, weighed against the head's own horizon, do not pay on the whole queue: keep
        # the incumbent (arrivals as found, as settle keeps moves not worth their writes), unless a
        # starving job must be widened, which only the whole queue's plan may do
        age = settle_kwargs.get("starvation_age_s")
        age = age if age is not None else snapshot.starvation_age_s
        if age is not None and any(j.managed and now - j.submit_time > age for j in sub.pending):
            return None
        prio, types, ev = inc_prio, inc_types, base
        report.kept += report.moved
        report.moved, report.accepted = 0, False
    report.makespan_incumbent = base.makespan_end - now
    report.makespan_held = ev.makespan_end - now
    report.makespan_new = None              # the new plan is the head's: no whole-queue estimate of it
    report.head = len(sub.pending)
    report.mean_end_incumbent = base.mean_end - now if math.isfinite(base.mean_end) else None
    report.mean_end_held = ev.mean_end - now if math.isfinite(ev.mean_end) else None
    decisions = []
    for j in sorted((j for j in snapshot.pending if j.job_id in prio), key=lambda j: -prio[j.job_id]):
        p = ev.placed.get(j.job_id)
        decisions.append(JobDecision(j.job_id, prio[j.job_id], tuple(types.get(j.job_id, ())), p.start if p else None,
                                     p.end if p else None, j.est_runtime_s))
    out = Plan(policy=held.policy, decisions=decisions, est_makespan_end=ev.makespan_end,
               free_time=new_plan.floored(ev.timeline.free_at()), free_floor=new_plan.free_floor)
    return out, new_plan, report
