"""The optimizing planner: msched's plan searched for, not just constructed (issue 17).

The greedy plan (msched.policy.msched) fixes one order (longest or shortest first) and lets each job take
its earliest-completion type. Here that construction is the *decoder*: a plan is an order of the managed
pending jobs (optionally with a type fixed per job), and the decoder turns it into what Slurm will do
with it (the same timeline, backfill or not, unmanaged jobs in their places). The search changes the
order and the types and keeps the plan whose decoded schedule scores best:

1. Start points: the greedy plan for the objective (always computed first: it is the fallback), the
   last round's plan (the queue's current priorities: a warm start that needs no state), the opposite
   greedy order, and the greedy order with each job's type fixed to the one the LP relaxation
   (msched.policy.bound) gives most of it.
2. Local search from each start point, best first, within the budget (`SEARCH_WORK`): insertion moves
   (a job taken out of the order and put elsewhere: the job that ends last to the front, half way up,
   one place up; each job to the front and to the end; random ones) and retyping moves (a job fixed to
   another type it may use). A small head takes the best move of its whole neighbourhood each step, a
   larger one the first move that helps. Each candidate is decoded and scored; the best is kept.
   Starving jobs stay first and are widened only to types within `slack` of their fastest.
3. Objectives (`objective`): "makespan" = (last end, then the sum of ends); "jct" = (sum of ends, then
   the last end); "balanced" (the default) = the smallest sum of ends among plans whose last end is
   within `tolerance` (5%) of the shortest makespan the search found (measured from the oldest planned
   job's submission), i.e. JCT first with the makespan kept near its best; a plan over that limit
   ranks by its makespan.

Time box (`time_box_s`, config `plan_time_s`, default 2 s): the search stops at the deadline and returns
the best plan found (never worse than the greedy one, which is scored first). If the deadline passes
before the greedy plan has been scored against anything (a huge queue, a slow machine), the greedy plan
is returned as it is, with a log line. Above `head_jobs` pending managed jobs the search plans only the
head of the queue (the jobs the greedy plan starts first) and keeps the tail in its greedy order after it.
Deterministic: the random moves use a fixed seed, so the same snapshot and enough time give the same plan.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from msched.policy.base import Placed, queue_key
from msched.policy.msched import MschedPolicy, OraclePolicy, type_demand
from msched.policy.snapshot import ClusterSnapshot, PendingJob, Plan
from msched.policy.timeline import Timeline

log = logging.getLogger("msched.policy.planner")

PLANNERS = ("optimize", "greedy")
DEFAULT_TIME_BOX_S = 2.0
DEFAULT_HEAD_JOBS = 200
DEFAULT_TOLERANCE = 0.05
SEARCH_WORK = 6000           # decode steps per round at most (decodes x (head jobs + running jobs + nodes):
                             # ~25 decodes of a 200-job head on a small cluster, ~250 of a 16-job batch on
                             # 8 idle nodes, the minimum on a busy 1,000-GPU cluster): a round starts from
                             # the last round's plan (the queue's priorities), so the search carries on
                             # across rounds
MIN_EVALS = 8
LP_MIN_JOBS = 8              # the LP start point only for a head at least this long (an LP per round costs)
STALE_MOVES = 12             # random moves in a row that did not help before the search stops


@dataclass(frozen=True)
class Score:
    last_end: float          # the plan's makespan end (running jobs included)
    sum_end: float           # sum of the planned ends of the pending jobs (= JCT sum up to a constant)
    placed: int              # pending jobs the plan can place (more is better, first)


def score(snapshot: ClusterSnapshot, placed: Mapping[str, Placed]) -> Score:
    ends = [p.end for p in placed.values()]
    last = max(max(ends, default=snapshot.now), snapshot.running_end)
    return Score(last, sum(ends), len(ends))


class OptimizingPolicy(MschedPolicy):
    """msched with the optimizing planner (planner="optimize", the default) or the greedy one ("greedy")."""

    def __init__(self, *, planner: str = "optimize", time_box_s: float = DEFAULT_TIME_BOX_S,
                 head_jobs: int = DEFAULT_HEAD_JOBS, tolerance: float | None = None,
                 objective: str = "balanced", clock: Callable[[], float] = time.perf_counter, **opts):
        super().__init__(objective=objective, **opts)
        if planner not in PLANNERS:
            raise ValueError(f"unknown planner {planner!r}; choose one of {', '.join(PLANNERS)}")
        if not time_box_s > 0:
            raise ValueError(f"time_box_s must be positive (got {time_box_s})")
        if head_jobs < 1:
            raise ValueError(f"head_jobs must be >= 1 (got {head_jobs})")
        tolerance = DEFAULT_TOLERANCE if tolerance is None else tolerance
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0 (got {tolerance})")
        self.planner = planner
        self.time_box_s = float(time_box_s)
        self.head_jobs = int(head_jobs)
        self.tolerance = float(tolerance)
        self.clock = clock
        self.search_work = SEARCH_WORK
        self.stale_moves = STALE_MOVES
        self.last_search: dict = {}          # what the last plan() did (for logs, tests and benches)

    # the greedy order of the objective: balanced starts from shortest first (JCT first)
    def _greedy_sign(self) -> float:
        return -1.0 if self.objective == "makespan" else 1.0

    def order(self, snapshot: ClusterSnapshot, sign: float | None = None) -> tuple[list[PendingJob], set[str]]:
        """Starving first (oldest first), then longest first (sign -1) or shortest first (+1)."""
        age = self.starvation_age_s if self.starvation_age_s is not None else snapshot.starvation_age_s
        managed = [j for j in snapshot.pending if j.managed]
        starving = [j for j in managed if age is not None and snapshot.now - j.submit_time > age]
        starving.sort(key=lambda j: (j.submit_time, j.job_id))
        ids = {j.job_id for j in starving}
        rest = [j for j in managed if j.job_id not in ids]
        s = self._greedy_sign() if sign is None else sign
        typeset = set(snapshot.gpu_types)
        keyed = sorted(((s * self.length(j, typeset), j.submit_time, k) for k, j in enumerate(rest)))
        return starving + [rest[k] for _, _, k in keyed], ids

    # ------------------------------------------------------------------ plan
    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        t0 = self.clock()
        deadline = t0 + self.time_box_s
        order, starving = self.order(snapshot)
        if self.planner == "greedy":
            self.last_search = {"planner": "greedy"}
            return self.plan_for_order(snapshot, order, starving)
        placed, chosen, tl = self.construct(snapshot, order, starving)
        greedy = self.plan_from(snapshot, order, starving, placed, chosen, tl)
        free = [j for j in order if j.job_id not in starving]
        now = snapshot.now
        if len(free) < 2 or all(j.job_id in placed and placed[j.job_id].start <= now for j in free):
            # nothing to search: one job, or every job starts now on its earliest-completion type (an
            # online queue that keeps up); no order or retyping can end any of them sooner
            self.last_search = {"planner": "optimize", "evals": 1, "improved": False, "timed_out": False}
            return greedy
        head, tail = self._split(free, placed)
        search = _Search(self, snapshot, order[:len(starving)], head, deadline)
        best_order, best_fixed, improved = search.run(greedy_order=head)
        self.last_search = {"planner": "optimize", "evals": search.evals, "improved": improved,
                            "timed_out": search.timed_out, "head": len(head), "tail": len(tail),
                            "seconds": self.clock() - t0, "greedy": search.greedy_score, "best": search.best_score}
        if search.timed_out and search.evals <= 1:
            log.warning("planner: time box of %.3g s reached before the search could compare a plan "
                        "(%d pending jobs); keeping the greedy plan", self.time_box_s, len(snapshot.pending))
            return greedy
        if search.timed_out:
            log.info("planner: time box of %.3g s reached after %d plans; using the best found%s",
                     self.time_box_s, search.evals, "" if improved else " (the greedy plan)")
        if not improved:
            return greedy
        full = order[:len(starving)] + best_order + tail
        return self.plan_for_order(snapshot, full, starving, best_fixed)

    def _candidates(self, job: PendingJob, types: list[str], starving: set[str], tl):  # noqa: ANN001, ANN202
        """As the greedy plan's, except that a starving job is widened only to the types that run it
        within `slack` (1.25x) of its fastest: the guard gives a job that waited too long more places to
        start, not a type where it runs 3-5x longer. Measured on the Gavel-shaped static batch (100 jobs,
        k80/p100/v100, 24 h guard): widening to every type put long jobs on k80 and made msched 3.5x the
        LP bound (fifo's 3.5x); so narrowed, 1.00-1.04x. planner="greedy" keeps the greedy plan's rule."""
        cand, runtime = super()._candidates(job, types, starving, tl)
        if self.planner == "optimize" and job.job_id in starving and runtime is job.est_runtime_s and len(cand) > 1:
            fastest = min((runtime[t] for t in cand if t in runtime), default=None)
            if fastest is not None:
                near = tuple(t for t in cand if t in runtime and runtime[t] <= self.slack * fastest)
                cand = near or cand
        return cand, runtime

    def _split(self, free: list[PendingJob], placed: Mapping[str, Placed]) -> tuple[list[PendingJob], list[PendingJob]]:
        """The head (the jobs the greedy plan starts first, at most head_jobs) and the tail after it."""
        if len(free) <= self.head_jobs:
            return free, []
        inf = float("inf")
        by_start = sorted(range(len(free)), key=lambda k: (placed[free[k].job_id].start if free[k].job_id in placed
                                                           else inf, k))
        keep = set(by_start[:self.head_jobs])
        return [free[k] for k in sorted(keep)], [free[k] for k in range(len(free)) if k not in keep]


class _Search:
    """One round's search over orders (and fixed types) of the head jobs."""

    def __init__(self, policy: OptimizingPolicy, snapshot: ClusterSnapshot, starving_first: list[PendingJob],
                 head: list[PendingJob], deadline: float):
        self.p = policy
        self.deadline = deadline
        self.first = starving_first
        self.starving = {j.job_id for j in starving_first}
        head_ids = {j.job_id for j in head}
        # the head's own snapshot: the head and every unmanaged or starving job (the tail comes later)
        if len(head) + len(starving_first) < sum(1 for j in snapshot.pending if j.managed):
            keep = tuple(j for j in snapshot.pending if not j.managed or j.job_id in head_ids
                         or j.job_id in self.starving)
            snapshot = replace(snapshot, pending=keep)
        self.snap = snapshot
        self.head = head
        self.evals = 0
        self.timed_out = False
        self.greedy_score: Score | None = None
        self.best_score: Score | None = None
        self.best_ms = float("inf")             # the shortest makespan seen (balanced's reference)
        # balanced's tolerance is a share of the time from the oldest head job's submission to the best
        # end: a fixed point while that job waits, so re-planning every round cannot push the job that
        # sets the makespan later and later (a share of the time from *now* would, by 5% each round)
        self.anchor = min((j.submit_time for j in head), default=snapshot.now)
        self.rng = random.Random(len(head))
        # a decode costs about one step per head job, running job and node (the timeline is rebuilt)
        per_eval = len(head) + len(snapshot.running) + len(snapshot.nodes)
        self.max_evals = max(MIN_EVALS, policy.search_work // max(1, per_eval))
        typeset = set(snapshot.gpu_types)
        self.length = {j.job_id: policy.length(j, typeset) for j in head}
        self.types = snapshot.gpu_types
        self.timeline = Timeline(snapshot.now, snapshot.nodes, snapshot.running)   # copied by each decode
        # the affinity rule's queue-wide type demand depends on the set of jobs only: once per search
        self.relative = type_demand([*starving_first, *head], snapshot.gpu_types) if policy.affinity > 0 else {}

    # ------------------------------------------------------------------ scoring
    def key(self, s: Score) -> tuple:
        obj = self.p.objective
        if obj == "makespan":
            return (-s.placed, s.last_end, s.sum_end)
        if obj == "jct":
            return (-s.placed, s.sum_end, s.last_end)
        cap = self.best_ms + self.p.tolerance * (self.best_ms - self.anchor) if self.best_ms < float("inf") \
            else float("inf")
        over = s.last_end if s.last_end > cap + 1e-9 else cap
        return (-s.placed, over, s.sum_end)

    def evaluate(self, order: Sequence[PendingJob], fixed: Mapping[str, str] | None = None) -> tuple[Score, dict]:
        placed, _, _ = self.p.construct(self.snap, [*self.first, *order], self.starving, fixed, self.relative,
                                        self.timeline)
        self.evals += 1
        s = score(self.snap, placed)
        self.best_ms = min(self.best_ms, s.last_end) if s.placed == len(placed) else self.best_ms
        return s, placed

    def out_of_time(self) -> bool:
        if self.p.clock() >= self.deadline:
            self.timed_out = True
        return self.timed_out or self.evals >= self.max_evals

    # ------------------------------------------------------------------ search
    def run(self, greedy_order: list[PendingJob]) -> tuple[list[PendingJob], dict[str, str] | None, bool]:
        g_score, g_placed = self.evaluate(greedy_order)
        self.greedy_score = g_score
        starts = [(greedy_order, None, g_score, g_placed)]
        # other start points: the last round's plan (the queue's order now: a warm start that needs no
        # state), the opposite greedy order, and the greedy order with the LP's types
        by_len = sorted(self.head, key=lambda j: (self.length[j.job_id], j.submit_time))
        orders = [sorted(self.head, key=queue_key),
                  list(reversed(by_len)) if self.p.objective != "makespan" else by_len]
        lp_types = self._lp_types()
        orders_fixed = [(greedy_order, lp_types)] if lp_types else []
        for o, fx in [(o, None) for o in orders] + orders_fixed:
            if self.out_of_time():
                break
            s, pl = self.evaluate(o, fx)
            starts.append((o, fx, s, pl))
        # local search from each start point, best first, while the budget lasts
        starts.sort(key=lambda c: self.key(c[2]))
        order, fixed, best_s, _ = starts[0]
        for o, fx, s, pl in starts:
            if self.out_of_time():
                break
            o, fx, s = self._improve(list(o), fx, s, pl)
            if self.key(s) < self.key(best_s):
                order, fixed, best_s = o, fx, s
        # balanced's reference may have dropped during the search: re-rank against the greedy plan
        improved = self.key(best_s) < self.key(g_score)
        self.best_score = best_s if improved else g_score
        return (order, fixed, True) if improved else (greedy_order, None, False)

    def _lp_types(self) -> dict[str, str] | None:
        """Each head job's type with the largest share in the LP relaxation (None: nothing to fix; a
        head of fewer than LP_MIN_JOBS jobs is left to the local search's retyping moves)."""
        if self.out_of_time() or len(self.head) < LP_MIN_JOBS:
            return None
        from msched.policy.bound import snapshot_lower_bound
        b = snapshot_lower_bound(self.snap)
        if not b.solved:
            return None
        out = {}
        for j in self.head:
            shares = b.assignment.get(j.job_id)
            if shares and not j.pinned_type:
                out[j.job_id] = max(sorted(shares), key=lambda t: shares[t])
        return out or None

    def _improve(self, order: list[PendingJob], fixed: dict[str, str] | None, s: Score,
                 placed: dict) -> tuple[list[PendingJob], dict[str, str] | None, Score]:
        """Local search until no move helps, the time box or the evaluation budget. Moves: insertion
        (take one job out of the order, put it elsewhere) and retyping (fix a job to another type it may
        use). A small head (every move fits a quarter of the budget) takes the best move of the whole
        neighbourhood each step; a larger one the first move that helps, trying first the job that ends
        last (to the front, half way up, one place up, on each other type), then each job from the
        latest-ending down to the front and to the end of the order, then random moves (at most
        `stale_moves` + 2 x head in a row that do not help)."""
        n = len(order)
        if n < 2:
            return order, fixed, s
        fixed = dict(fixed or {})
        small = n * (n - 1 + len(self.types)) <= self.max_evals // 4
        while not self.out_of_time():
            moves = self._all_moves(order) if small else self._moves(order, placed)
            best = None
            stale = 0
            for move in moves:
                if self.out_of_time():
                    break
                cand, cfix = self._apply(move, order, fixed)
                if cand is None:
                    continue
                cs, cp = self.evaluate(cand, cfix)
                if self.key(cs) < self.key(s if best is None else best[2]):
                    best = (cand, cfix, cs, cp)
                    if not small:
                        break
                elif not small:
                    stale += 1
                    if stale >= self.p.stale_moves + 2 * n:
                        break
            if best is None:
                break                                  # a local optimum (or out of budget)
            order, fixed, s, placed = best
        return order, (fixed or None), s

    def _apply(self, move: tuple, order: list[PendingJob], fixed: dict[str, str]):
        """The order and fixed types after a move; (None, None) for a retype to the type it has."""
        kind, i, x = move
        if kind == "ins":
            cand = order[:i] + order[i + 1:]
            cand.insert(x, order[i])
            return cand, fixed
        job = order[i]
        if fixed.get(job.job_id) == x:
            return None, None
        return order, {**fixed, job.job_id: x}

    def _retypes(self, k: int, order: list[PendingJob]):
        job = order[k]
        if job.pinned_type or not job.managed:
            return
        for t in self.types:
            if t in job.est_runtime_s and (not job.allowed_types or t in job.allowed_types):
                yield ("type", k, t)

    def _all_moves(self, order: list[PendingJob]):
        n = len(order)
        for i in range(n):
            for j in range(n):
                if i != j:
                    yield ("ins", i, j)
            yield from self._retypes(i, order)

    def _moves(self, order: list[PendingJob], placed: dict):
        n = len(order)
        ends = sorted(range(n), key=lambda k: -(placed[order[k].job_id].end if order[k].job_id in placed else 0.0))
        crit = ends[0]
        if crit > 0:
            yield from (("ins", crit, 0), ("ins", crit, crit // 2), ("ins", crit, crit - 1))
        yield from self._retypes(crit, order)
        for k in ends:
            if k > 0:
                yield ("ins", k, 0)
            if k < n - 1:
                yield ("ins", k, n - 1)
        while True:
            i, j = self.rng.randrange(n), self.rng.randrange(n)
            if i != j:
                yield ("ins", i, j)
            elif self.rng.random() < 0.5:
                yield from self._retypes(i, order)


class OptimizingOraclePolicy(OptimizingPolicy, OraclePolicy):
    """The optimizing planner fed the true runtimes."""

    name = "oracle"
    estimator_kind = "truth"
