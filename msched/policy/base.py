"""What every policy is, and the machinery they share: Slurm's queue order and the list-scheduling pass.

A policy is a small object with `.name`, `.replans` (does it re-plan in rounds), `.estimator_kind`
("tag": msched's knowledge, "truth": the oracle's; whoever builds the round picks the estimator from it),
`.submit_choice(est, free_at, now)` (the policy's rule for the GPU types to allow a new job, applied by
the one submit decision, `msched.policy.choice.decide_submit`, after it has kept only the types the job's
shape fits and estimated them) and `.plan(snapshot) -> Plan`, a pure function of the snapshot.
A type is never chosen for a job whose shape its nodes cannot hold (`possible_types`, by
`msched.policy.feasibility`, the one feasibility rule).

`simulate` is the planner's model of what Slurm will do with a queue: jobs in priority order (ties by
submit time, then job id, as Slurm and slurm_sim sort them); each job starts on the allowed type that
can start it first (that is what Slurm does with `a|b` or an untyped request), or on the one type the
plan chose. Without backfill Slurm starts jobs of a partition in strict priority order (a top job
waiting for its type blocks the rest), so each start is at or after the previous one; with backfill
(`backfill=True`) a later job may start earlier when it fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from msched.policy import feasibility
from msched.policy.choice import DEFAULT_SLACK, DEFAULT_UNKNOWN_RUNTIME_S
from msched.policy.snapshot import ClusterSnapshot, JobDecision, PendingJob, Plan
from msched.policy.timeline import NOT_CACHED, Timeline

# simulate() reads a one-node job's start from the timeline's cached earliest start per type and books
# the node that start names (Timeline.book; tests/test_fast_paths.py: the same placements with it off)
ONE_NODE_FAST_PATH = True


def queue_key(job: PendingJob, priority: int | None = None) -> tuple:
    """Slurm's order: priority high first, then submit time, then job id (numeric when it is one)."""
    jid = job.job_id
    return (-(job.priority if priority is None else priority), job.submit_time,
            (0, int(jid), "") if jid.isdigit() else (1, 0, jid))


def runtime_guess(job: PendingJob, default_s: float = DEFAULT_UNKNOWN_RUNTIME_S) -> float:
    """Runtime of a job msched cannot estimate (unmanaged or unknown model): its time limit, else a default."""
    return float(job.time_limit_s) if job.time_limit_s else default_s


class PossibleTypes:
    """Per job shape, the snapshot's GPU types whose nodes can hold it (`msched.policy.feasibility`),
    remembered per shape for one plan (10k jobs have a handful of shapes)."""

    keep = True           # the last snapshot's sizes and answers kept while its nodes' types and sizes hold
    _last: tuple = ((), {}, {})   # (nodes, sizes, memo)

    def __init__(self, snapshot: ClusterSnapshot):
        nodes = snapshot.nodes
        last, sizes_kept, memo = PossibleTypes._last
        if self.keep and len(nodes) == len(last) and all(
                a is b or (a.gpu_type == b.gpu_type and a.gpus == b.gpus) for a, b in zip(nodes, last, strict=True)):
            self.sizes, self._memo = sizes_kept, memo
            PossibleTypes._last = (nodes, sizes_kept, memo)
            return
        sizes: dict[str, list[int]] = {}
        for n in nodes:
            sizes.setdefault(n.gpu_type, []).append(n.gpus)
        self.sizes = {t: tuple(sorted(v)) for t, v in sizes.items()}
        self._memo: dict[tuple, frozenset[str]] = {}
        if self.keep:
            PossibleTypes._last = (nodes, self.sizes, self._memo)

    def __call__(self, job: PendingJob) -> frozenset[str]:
        key = (job.num_gpus, job.gpus_per_node, job.num_nodes)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = frozenset(feasibility.feasible_types(job, self.sizes))
        return hit


def feasible_types(job: PendingJob, cluster_types: Sequence[str],
                   possible: Callable[[PendingJob], frozenset[str]] | None = None) -> tuple[str, ...]:
    """Types the job may be given: estimated (so within its time limit), allowed by its request, present,
    and (with `possible`, a `PossibleTypes`) able to hold its shape."""
    allowed = set(job.allowed_types) if job.allowed_types else None
    fit = possible(job) if possible is not None else None
    return tuple(t for t in cluster_types if t in job.est_runtime_s and (allowed is None or t in allowed)
                 and (fit is None or t in fit))


@dataclass(frozen=True)
class Placed:
    gpu_type: str
    start: float
    end: float


_new = object.__new__


def placed_at(gpu_type: str, start: float, end: float) -> Placed:
    """`Placed(gpu_type, start, end)` with its fields entered straight into the instance's dict: the frozen
    dataclass's __init__ sets each through `object.__setattr__` (~0.4 us against ~0.2 us, and a settle
    evaluation and a decode make one per job: 10,000 at 10,000 pending). The same frozen instance, equal,
    hashed and shown alike (tests/test_fast_paths.py)."""
    p = _new(Placed)
    d = p.__dict__
    d["gpu_type"] = gpu_type
    d["start"] = start
    d["end"] = end
    return p


def simulate(snapshot: ClusterSnapshot, order: Sequence[PendingJob],
             choose: Callable[[PendingJob, Timeline, float], tuple[tuple[str, ...], Mapping[str, float]]],
             *, backfill: bool = False, timeline: Timeline | None = None,
             choices: Sequence[tuple] | None = None) -> tuple[dict[str, Placed], Timeline]:
    """Place `order` (Slurm's order) on the timeline. `choose(job, timeline, not_before)` returns the
    types the job may start on and its runtime per type; the job starts on whichever can start it first.
    `choices`: those answers for every job of `order`, in its order, when the caller made them beforehand
    (settle's evaluations, whose answers do not depend on the timeline); `choose` is then not called."""
    tl = timeline or Timeline(snapshot.now, snapshot.nodes, snapshot.running)
    out: dict[str, Placed] = {}
    last_start = snapshot.now
    one_node = ONE_NODE_FAST_PATH
    max_node = tl.max_node              # per type with nodes, its widest node (a job that fits one fits)
    tops = tl._top                      # start_time's cache: (start, node) per type and GPU count
    start_time, book = tl.start_time, tl.book
    unknown = NOT_CACHED
    for job, pick in zip(order, choices if choices is not None else [None] * len(order), strict=True):
        types, runtime = pick if pick is not None else choose(job, tl, last_start)
        best = None
        g = job.num_gpus if job.num_gpus > 1 else 1
        for t in types:
            if t not in runtime:
                continue
            if one_node and g <= max_node.get(t, 0):
                # on one node (so it fits): the start is the timeline's cached earliest (`start_time`), and
                # the node it names is the one booked if this type is chosen
                hit = tops[t].get(g, unknown)
                if hit is unknown:
                    start_time(t, g)
                    hit = tops[t][g]
                if hit is None:
                    continue
                s0 = hit[0]
                start = s0 if backfill or s0 >= last_start else last_start
                key = (start, start + runtime[t])
                if best is None or key < best[0]:
                    best = (key, t, runtime[t], hit[1])
                continue
            if not tl.fits(t, g):
                continue
            p = tl.earliest(t, g, None if backfill else last_start)
            if p is None:
                continue
            key = (p.start, p.start + runtime[t])
            if best is None or key < best[0]:
                best = (key, p, runtime[t], -1)
        if best is None:
            continue                       # can never run here (too wide for every allowed type)
        key, p, rt, node = best
        start = key[0]
        if isinstance(p, str):             # the one-node fast path chose type p: the node its cached start names
            book(p, (node,), g, start + rt)
            out[job.job_id] = placed_at(p, start, start + rt)
        else:
            tl.commit(p, start + rt)
            out[job.job_id] = placed_at(p.gpu_type, start, start + rt)
        if not backfill:
            last_start = max(last_start, start)
    return out, tl


def default_types(job: PendingJob, tl: Timeline) -> tuple[str, ...]:
    """What Slurm lets a job use as it stands: pinned / constrained types, else every type."""
    if job.pinned_type:
        pinned = job.allowed_types or tuple(job.pinned_type.split("|"))
        return tuple(t for t in pinned if t in tl.by_type) or tuple(tl.gpu_types())
    if job.current_types:
        return tuple(t for t in job.current_types if t in tl.by_type)
    if job.allowed_types:
        return tuple(t for t in job.allowed_types if t in tl.by_type)
    return tuple(tl.gpu_types())


def as_is_runtime(job: PendingJob, types: Sequence[str], default_s: float) -> dict[str, float]:
    guess = runtime_guess(job, default_s)
    return {t: job.est_runtime_s.get(t, guess) for t in types}


class Policy:
    """Base: no reordering, no retyping (subclasses override what they change)."""

    name = "abstract"
    replans = False
    estimator_kind = "tag"

    def __init__(self, *, slack: float = DEFAULT_SLACK, backfill: bool = False,
                 unknown_runtime_s: float = DEFAULT_UNKNOWN_RUNTIME_S, **unknown):
        if unknown:
            raise TypeError(f"policy {self.name!r} takes no option(s) {', '.join(sorted(unknown))}")
        if slack < 1.0:
            raise ValueError(f"slack must be >= 1 (got {slack})")
        self.slack = slack
        self.backfill = backfill
        self.unknown_runtime_s = unknown_runtime_s

    def __repr__(self) -> str:
        return f"<policy {self.name}>"

    # ------------------------------------------------------------ submit time
    def submit_choice(self, est: Mapping[str, float], free_at: Mapping[str, float],
                      now: float) -> tuple[str, ...]:
        """The GPU types to allow a new job, given its estimate on each type it can use and when each
        type frees up; () = no constraint (take whatever frees first). See `decide_submit`."""
        return ()

    # ------------------------------------------------------------ rounds
    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        """Leave the queue as Slurm holds it; the plan still carries the projected starts and free times."""
        order = sorted(snapshot.pending, key=queue_key)
        placed, tl = simulate(snapshot, order, self._as_is, backfill=self.backfill)
        decisions = [JobDecision(j.job_id, j.priority, (), *self._times(placed, j), dict(j.est_runtime_s))
                     for j in order if j.managed]
        return self._plan(decisions, placed, tl, snapshot)

    def _as_is(self, job: PendingJob, tl: Timeline, not_before: float):
        types = default_types(job, tl)
        return types, as_is_runtime(job, types, self.unknown_runtime_s)

    @staticmethod
    def _times(placed: Mapping[str, Placed], job: PendingJob) -> tuple[float | None, float | None]:
        p = placed.get(job.job_id)
        return (p.start, p.end) if p else (None, None)

    def _plan(self, decisions: list[JobDecision], placed: Mapping[str, Placed], tl: Timeline,
              snapshot: ClusterSnapshot) -> Plan:
        last = max((p.end for p in placed.values()), default=None)
        if snapshot.running:
            last = snapshot.running_end if last is None else max(last, snapshot.running_end)
        return Plan(policy=self.name, decisions=decisions, est_makespan_end=last,
                    free_time=tl.free_at())
