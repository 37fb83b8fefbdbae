"""The optimizing planner: msched's plan searched for, not just constructed (issue 17).

The greedy plan (msched.policy.msched) fixes one order (longest or shortest first) and lets each job take
its earliest-completion type. Here that construction is the *decoder*: a plan is an order of the managed
pending jobs (optionally with a type fixed per job), and the decoder turns it into what Slurm will do
with it (the same timeline, backfill or not, unmanaged jobs in their places). The search changes the
order and the types and keeps the plan whose decoded schedule scores best:

0. No search when the greedy plan is provably best: every pending job ends when it would end alone
   (`_each_ends_at_its_earliest`), or every job starts now.
1. Start points: the greedy plan for the objective (always computed first: it is the fallback), the
   last round's plan (the queue's current priorities: a warm start that needs no state), the opposite
   greedy order, and, when planning for the makespan (`lp_start`), the greedy order with each job's type
   fixed to the one the LP relaxation (msched.policy.bound) gives most of it; with `balance_types` (on by
   default for balanced's batch plans since planner17) also those types balanced over the types' GPUs, the
   widest jobs first (`_balanced_start`).
2. Local search from each start point, best first, within the budget (`SEARCH_WORK`): insertion moves
   (a job taken out of the order and put elsewhere: the job that ends last to the front, half way up,
   one place up; each job to the front and to the end; random ones) and retyping moves (a job fixed to
   another type it may use). A small head takes the best move of its whole neighbourhood each step, a
   larger one the first move that helps. Each candidate is decoded and scored; the best is kept.
   Starving jobs stay first and are widened only to types within `slack` of their fastest.
3. CP-SAT (msched.policy.cpsat) for a head of CPSAT_MIN_JOBS (8) to `cpsat_jobs` (40) jobs whose best
   makespan is more than CPSAT_GAP (2%) above the LP bound: an interval model of the head around what it
   does not own, hinted with the local search's best plan, `cpsat_work` (0.1) deterministic seconds on one
   worker. Its schedule's start order and types are decoded like any other candidate, and a short local
   search polishes the decode. Measured (bench_planner (a), 5 seeds, the exact optimum or proven bound as
   reference): the local search alone is 3.9% / 6.2% above it on 16 / 30-job batches, with CP-SAT 2.0% /
   4.5%, for 0.2-0.3 s of CPU per plan.
   `planner="cpsat"` is CP-SAT alone from the greedy plan (bench_planner's competitor).
4. Objectives (`objective`): "makespan" = (last end, then the sum of ends); "jct" = (sum of ends, then
   the last end); "balanced" (the default) = the smallest sum of ends among plans whose last end is
   within `tolerance` (25%) of the shortest makespan the search found (measured from the oldest planned
   job's submission), i.e. JCT first with the makespan kept near its best; a plan over that limit
   ranks by its makespan. CP-SAT solves balanced in two phases: the makespan, then the sum of ends
   under that limit. For a batch submitted together (every managed pending job with one submit time)
   balanced plans the makespan first (then, with `short_first`, on by default since jct14, its shortest
   jobs first where the makespan grows by at most that share of the batch's span, a measure the plan
   carries, `Plan.measure`, which settle weighs only when told to, `SettleOptions.allowance_share`;
   `objective_for`: accepting 5%, the tolerance then, over each round's best makespan, round after round,
   drifted to 1.11x the LP bound on the static bench batch). `short_types="rebalance"` and
   `short_reference="lp"` (planner17, the defaults) put the short jobs first on their own types with the
   rest's types balanced again after them, and take the allowance over the LP bound (`_short_first`).
   The tolerance was 5% until the fifth round measured 25% as good or better on every bench workload
   and seed (BENCHMARKS.md).

Budget: work, not time, so the same snapshot gives the same plan on any machine however loaded: decodes
(`SEARCH_WORK` decode steps; a plan decoded before in the round is looked up, not decoded, but counts), CP-SAT's deterministic time on one worker, seeded random moves. The time
box (`time_box_s`, config `plan_time_s`, default 2 s) is only a safety net, measured in this process's
CPU time (`clock`, time.process_time: other processes' load does not count; CP-SAT, whose own limits are
deterministic or wall time, gets CPSAT_WALL_SLACK x the CPU time left as its wall-clock limit). When it
bites, the search stops and returns the best plan found (never worse than the greedy one, which is
scored first) and says so in a log line; if it bites before the greedy plan has been scored against
anything (a huge queue, a slow machine), the greedy plan is returned as it is. Above `head_jobs` pending
managed jobs the search plans only the head of the queue (the jobs the greedy plan starts first) and
keeps the tail in its greedy order after it.
"""

from __future__ import annotations

import heapq
import logging
import math
import operator
import random
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from msched.policy.base import Placed, queue_key
from msched.policy.msched import MschedPolicy, OraclePolicy, starving_jobs, type_demand
from msched.policy.snapshot import ClusterSnapshot, PendingJob, Plan
from msched.policy.timeline import Timeline

log = logging.getLogger("msched.policy.planner")

PLANNERS = ("optimize", "greedy", "cpsat")
DEFAULT_TIME_BOX_S = 2.0
DEFAULT_HEAD_JOBS = 600      # the search's head (200 before jct15): on make demo's 600-job batch shape 600 beat 200 on
                             # makespan and mean JCT on tuning and held-out seeds at the same plan() CPU on 10,000 jobs
                             # (bench/bench_head.py; BENCHMARKS.md "The search head and online JCT")
DEFAULT_TOLERANCE = 0.25    # balanced's makespan allowance online (0.05 before): as good or better on every bench
                             # workload and seed, better on two (BENCHMARKS.md, the planner's fifth round)
SEARCH_WORK = 6000           # decode steps per round at most (decodes x (head jobs + running jobs + nodes):
                             # ~25 decodes of a 200-job head on a small cluster, ~250 of a 16-job batch on
                             # 8 idle nodes, the minimum on a busy 1,000-GPU cluster): a round starts from
                             # the last round's plan (the queue's priorities), so the search carries on
                             # across rounds
DEFAULT_CPSAT_JOBS = 40      # CP-SAT after the local search for a head of at most this many jobs (0: never)
DEFAULT_CPSAT_WORK = 0.1     # CP-SAT's deterministic seconds per round (0.2-0.3 s of CPU here; 0.5 measured the same
                             # on 16-job batches and 0.5% better on 30 at 4-6x the CPU)
CPSAT_MIN_JOBS = 8           # CP-SAT only for a head of at least this many jobs
CPSAT_GAP = 0.02             # ... whose best makespan is more than this above the LP bound
CPSAT_WALL_SLACK = 10.0      # CP-SAT's wall-clock limit: this many times the CPU time box left (its own
                             # limits are deterministic or wall time; a loaded machine must not cut it short)
BALANCE_MAX_MOVES = 64       # `balance_types`' moves at most (the static bench batch's seed 9 took 46)
BALANCE_FAST = True          # `balance_types` prunes the moves that cannot be the best and keeps pool ends per type
                             # version (off: every move's pools placed anew; the same moves: tests/test_fast_paths.py)
RUNNING_BOUND_FIRST = True   # `_cpsat_worth_it` tries the running jobs' latest end before the simple bound (the
                             # same answer: the simple bound is at least it; off: the simple bound every time;
                             # tests/test_fast_paths.py)
MIN_EVALS = 8
BATCH_SHARE = 0.9            # balanced plans the makespan first when this share of the queue was submitted together
BATCH_OBJECTIVES = ("makespan", "balanced", "jct")
DEFAULT_BATCH_OBJECTIVE = "makespan"   # what balanced plans such a batch for (`objective_for`); the others are
                                       # measured against it in BENCHMARKS.md (planner9: a trade, not a flaw)
LP_STARTS = ("makespan", "always")   # when the LP's types are a start point (`_Search._lp_types`)
LP_MIN_JOBS = 8              # the LP start point only for a head at least this long (an LP per round costs)
DEFAULT_SETTLED_S = 60.0     # a head whose every job has been pending this long (a round at the default interval)...
DEFAULT_SETTLED_WORK = 0.0   # ... gets this share of the search budget, at least MIN_EVALS decodes (1: the whole, the
                             # rule before; 0 measured plan for plan the same or within 0.002 on the bench's online
                             # workloads, batches excluded, and 0.8x plan()'s CPU on the 20k trace: BENCHMARKS.md,
                             # the planner's tenth round)
SEARCH_MIN_HEAD = 2          # no search for fewer free pending jobs than this (below 2 nothing can move; more is a
                             # plan-changing lever, measured only: bench_sim.py --search-min-head, BENCHMARKS.md)
SHORT_FIRST_SHARES = (0.125, 0.25, 0.5, 0.75, 1.0)   # `_short_first`'s candidates: this share of the head first
CHOSEN_SHORT_FIRST = 0.1     # `short_first`'s value chosen on the tuning seeds (jct13, BENCHMARKS.md "Online mean JCT,
                             # levers against the bound": the static bench batch's mean JCT 0.850 -> 0.666x fifo on the
                             # held-out seeds, makespan 0.735 -> 0.763x); the default since jct14 (settle weighs its
                             # moves makespan first: BENCHMARKS.md "Short jobs first as the default")
SHORT_TYPES = ("plan", "rebalance")   # `_short_first`'s types: the makespan plan's, or the short jobs' own and the rest rebalanced
SHORT_REFERENCES = ("best", "lp")   # `_short_first`'s allowance over: the best makespan the search found, or the LP bound
SHORT_BISECT = 6             # `short_types="rebalance"`: halvings between the last share that fit the allowance and the next
STALE_MOVES = 12             # random moves in a row that did not help before the search stops
PREFIX_RESUME = True         # a move's decode books the prefix it shares with the plan it moved from as that
                             # plan's decode booked it, and decodes only the rest (`construct`'s resume; off:
                             # every candidate decoded whole; tests/test_fast_paths.py)


def pool_end(free: Sequence[float], jobs: Sequence[tuple[int, float]]) -> float:
    """When the last of `jobs` ((GPUs, runtime) on one type) ends, placed widest first, then longest, each
    on the GPUs that free first (`free`: the type's GPU free times, as a pool: which node a GPU is on is
    not modelled); inf when a job is wider than the pool."""
    heap = list(free)
    heapq.heapify(heap)
    last = max(heap, default=0.0)
    pop, push, swap = heapq.heappop, heapq.heappush, heapq.heapreplace
    for g, rt in sorted(jobs, key=lambda x: (-x[0], -x[1])):
        if g > len(heap):
            return math.inf
        if g == 1:                      # one GPU: the first free one, replaced by the job's end
            end = heap[0] + rt
            swap(heap, end)
        else:
            end = max(pop(heap) for _ in range(g)) + rt
            for _ in range(g):
                push(heap, end)
        if end > last:
            last = end
    return last


def _pools_of(types: Mapping[str, str], runtime: Mapping[str, Mapping[str, float]], gpus: Mapping[str, int],
              pools: Mapping[str, Sequence[float]]) -> tuple[dict[str, list[str]], dict[str, float]]:
    """`balance_types`' start: the jobs on each type of `pools` and each type's pool end (`pool_end`)."""
    on: dict[str, list[str]] = {t: [] for t in pools}
    for jid, t in types.items():
        if t in on:
            on[t].append(jid)
    return on, {t: pool_end(pools[t], [(gpus[j], runtime[j][t]) for j in js]) for t, js in on.items()}


def _move(on: dict[str, list[str]], end: dict[str, float], out: dict[str, str], jid: str, worst: str, t: str,
          left: float, here: float) -> None:
    """`balance_types`' move: job `jid` from type `worst` to `t`, whose pools then end at `left` and `here`."""
    on[worst].remove(jid)
    on[t].append(jid)
    out[jid] = t
    end[worst], end[t] = left, here


def balance_types(types: Mapping[str, str], runtime: Mapping[str, Mapping[str, float]], gpus: Mapping[str, int],
                  pools: Mapping[str, Sequence[float]], *, frozen: AbstractSet[str] = frozenset(),
                  max_moves: int = BALANCE_MAX_MOVES,
                  out_of_time: Callable[[], bool] = lambda: False) -> dict[str, str] | None:
    """Each job's type (`types`: job -> type to start from) with the types' pools' ends (`pool_end`)
    balanced: while moving one job (not in `frozen`) off the type whose pool ends last to another of its
    types (`runtime[job]`) ends the latest pool earlier, the move that ends it earliest is made, at most
    `max_moves`. None when nothing moved (the start is as balanced as this finds).

    Incremental (`BALANCE_FAST`; off: `_balance_types_plain`, the same moves): a candidate move is
    looked at only while it can still be the best (its latest end below the best so far): the other
    pools' ends and a lower bound on each of the two pools it changes (the pool's GPU free times and
    work spread evenly over its GPUs: no placement ends every GPU earlier) are checked before either
    pool is placed; a job's pool end on a type is kept until that type's pool changes."""
    if not BALANCE_FAST:
        return _balance_types_plain(types, runtime, gpus, pools, frozen=frozen, max_moves=max_moves,
                                    out_of_time=out_of_time)
    on, end = _pools_of(types, runtime, gpus, pools)
    size = {t: len(pools[t]) for t in pools}
    # each pool's free time and work, summed (the even spread's numerator)
    work = {t: math.fsum(pools[t]) + math.fsum(gpus[j] * runtime[j][t] for j in js) for t, js in on.items()}
    version = dict.fromkeys(pools, 0)
    with_job: dict[tuple[str, str], tuple[int, float]] = {}    # (job, type) -> (type's version, its pool end with the job)
    out = dict(types)
    moved = 0
    while moved < max_moves and not out_of_time():
        worst = max(sorted(end), key=end.__getitem__)
        ranked = sorted(((e, u) for u, e in end.items() if u != worst), reverse=True)
        bar = end[worst] - 1e-6          # a move is taken only below this, and below the best one so far
        best = None
        pool_w = pools[worst]
        for jid in on[worst]:
            if jid in frozen:
                continue
            g = gpus[jid]
            rt_j = runtime[jid]
            left = None
            if size[worst] and (work[worst] - g * rt_j[worst]) / size[worst] - 1e-6 >= bar:
                continue                 # the pool left still ends at or after the bar
            for t in sorted(rt_j):
                if t == worst or t not in on:
                    continue
                others = next((e for e, u in ranked if u != t), -math.inf)
                if others >= bar:
                    continue
                rt = rt_j[t]
                if size[t] and (work[t] + g * rt) / size[t] - 1e-6 >= bar:
                    continue
                memo = with_job.get((jid, t))
                if memo is not None and memo[0] == version[t]:
                    here = memo[1]
                else:
                    here = pool_end(pools[t], [(gpus[j], runtime[j][t]) for j in on[t]] + [(g, rt)])
                    with_job[(jid, t)] = (version[t], here)
                if here >= bar:
                    continue
                if left is None:
                    left = pool_end(pool_w, [(gpus[j], runtime[j][worst]) for j in on[worst] if j != jid])
                    if left >= bar:
                        break
                top = max(left, here, others)
                if top < bar:
                    best = (top, jid, t, left, here)
                    bar = top
            # the bar only falls: a job whose pool left ended at or after it cannot be a later best either
        if best is None:
            break
        _, jid, t, left, here = best
        _move(on, end, out, jid, worst, t, left, here)
        g = gpus[jid]
        work[worst] -= g * runtime[jid][worst]
        work[t] += g * runtime[jid][t]
        version[worst] += 1
        version[t] += 1
        moved += 1
    return out if moved else None


def _balance_types_plain(types: Mapping[str, str], runtime: Mapping[str, Mapping[str, float]],
                         gpus: Mapping[str, int], pools: Mapping[str, Sequence[float]], *,
                         frozen: AbstractSet[str], max_moves: int,
                         out_of_time: Callable[[], bool]) -> dict[str, str] | None:
    """`balance_types` move by move in full: every job of the latest pool to every other type it may use,
    both pools placed anew (the reference its incremental path is tested against)."""
    on, end = _pools_of(types, runtime, gpus, pools)
    out = dict(types)
    moved = 0
    while moved < max_moves and not out_of_time():
        worst = max(sorted(end), key=end.__getitem__)
        best = None
        for jid in on[worst]:
            if jid in frozen:
                continue
            rest = [j for j in on[worst] if j != jid]
            left = pool_end(pools[worst], [(gpus[j], runtime[j][worst]) for j in rest])
            for t in sorted(runtime[jid]):
                if t == worst or t not in on:
                    continue
                here = pool_end(pools[t], [(gpus[j], runtime[j][t]) for j in on[t]] + [(gpus[jid], runtime[jid][t])])
                top = max([left, here, *(end[u] for u in end if u != worst and u != t)])
                if top < end[worst] - 1e-6 and (best is None or top < best[0]):
                    best = (top, jid, t, left, here)
        if best is None:
            break
        _, jid, t, left, here = best
        _move(on, end, out, jid, worst, t, left, here)
        moved += 1
    return out if moved else None


@dataclass(frozen=True)
class Score:
    last_end: float          # the plan's makespan end (running jobs included)
    sum_end: float           # sum of the planned ends of the pending jobs (= JCT sum up to a constant; weighted,
                             # and with the planned waits added, when the policy sets age_weight / wait_weight)
    placed: int              # pending jobs the plan can place (more is better, first)


def score(snapshot: ClusterSnapshot, placed: Mapping[str, Placed], weight: Mapping[str, float] | None = None,
          wait_weight: float = 0.0) -> Score:
    """The plan's makespan end and its JCT measure: the sum of the ends, each end times its `weight`
    (default 1; `age_weight`) plus `wait_weight` x its planned wait (`MschedPolicy.wait_weight`)."""
    ends = [p.end for p in placed.values()]
    last = max(max(ends, default=snapshot.now), snapshot.running_end)
    if not weight and not wait_weight:
        return Score(last, sum(ends), len(ends))
    now = snapshot.now
    w = weight or {}
    total = sum(w.get(jid, 1.0) * p.end + wait_weight * max(0.0, p.start - now) for jid, p in placed.items())
    return Score(last, total, len(ends))


def age_weights(jobs: Sequence[PendingJob], now: float, length: Mapping[str, float],
                age_weight: float) -> dict[str, float]:
    """Per job, 1 + `age_weight` x (time pending / its length): Smith's rule on these weights orders by
    length over weight, shortest first while no job has waited long against its own length."""
    return {j.job_id: 1.0 + age_weight * max(0.0, now - j.submit_time) / max(length[j.job_id], 1.0) for j in jobs}


class OptimizingPolicy(MschedPolicy):
    """msched with the optimizing planner (planner="optimize", the default) or the greedy one ("greedy")."""

    def __init__(self, *, planner: str = "optimize", time_box_s: float = DEFAULT_TIME_BOX_S,
                 head_jobs: int = DEFAULT_HEAD_JOBS, tolerance: float | None = None,
                 objective: str = "balanced", cpsat_jobs: int = DEFAULT_CPSAT_JOBS,
                 cpsat_work: float = DEFAULT_CPSAT_WORK, lp_start: str = "makespan",
                 batch_objective: str = DEFAULT_BATCH_OBJECTIVE, settled_s: float | None = DEFAULT_SETTLED_S,
                 settled_work: float = DEFAULT_SETTLED_WORK, settled_evals: int = MIN_EVALS,
                 short_first: float | None = CHOSEN_SHORT_FIRST, balance_types: bool | None = None,
                 short_types: str = "rebalance", short_reference: str = "lp",
                 clock: Callable[[], float] = time.process_time, **opts):
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
        if cpsat_jobs < 0:
            raise ValueError(f"cpsat_jobs must be >= 0 (got {cpsat_jobs})")
        if not cpsat_work > 0:
            raise ValueError(f"cpsat_work must be positive (got {cpsat_work})")
        if lp_start not in LP_STARTS:
            raise ValueError(f"unknown lp_start {lp_start!r}; choose one of {', '.join(LP_STARTS)}")
        if batch_objective not in BATCH_OBJECTIVES:
            raise ValueError(f"unknown batch_objective {batch_objective!r}; choose one of {', '.join(BATCH_OBJECTIVES)}")
        if short_first is not None and short_first < 0:
            raise ValueError(f"short_first must be >= 0 (got {short_first})")
        # balanced's plan of a batch (made for its makespan first, `objective_for`): its shortest jobs first,
        # on the types it gave them, when its makespan stays within this share (of the time from the oldest
        # job's submission) of the plan's (`_Search._short_first`; None: off). objective="makespan" stays pure
        self.short_first = short_first
        if settled_s is not None and settled_s < 0:
            raise ValueError(f"settled_s must be >= 0 or None (got {settled_s})")
        if not 0 <= settled_work <= 1:
            raise ValueError(f"settled_work must be in [0, 1] (got {settled_work})")
        # a head every job of which has been pending `settled_s` or longer was searched by earlier rounds,
        # whose plan the queue's order carries on (a start point): its search gets `settled_work` of the
        # budget (at least MIN_EVALS decodes), unless the queue is a batch submitted together; 1 = the whole
        # budget for every head (`_Search`)
        if settled_evals < 1:
            raise ValueError(f"settled_evals must be >= 1 (got {settled_evals})")
        self.settled_s = settled_s
        self.settled_work = float(settled_work)
        # ... and at least `settled_evals` plans scored (MIN_EVALS; 3 or 5 made philly seed 2's makespan
        # fifo's, 0.901 -> 1.000: BENCHMARKS.md, the planner's tenth round)
        self.settled_evals = int(settled_evals)
        self.lp_start = lp_start
        # a makespan plan's search also starts from the LP's types balanced over the types' GPUs (`_balanced_start`).
        # Alone (planner16) it cost the static bench batch's mean JCT (tuning seeds 0.685 -> 0.729x fifo's:
        # short_first's allowance is a share of a shorter makespan, and the balanced types left the short jobs on
        # slow types); on by default since planner17, with short_types "rebalance" and short_reference "lp":
        # tuning seeds 6-10 makespan 0.650 -> 0.636x fifo, mean JCT 0.685 -> 0.678x, the oracle 1.114 -> 1.090x
        # the LP bound (BENCHMARKS.md, the planner's fourteenth round)
        # None (the default): on for balanced's plans of a batch (objective "balanced", where it was measured),
        # off for objective "makespan" (there, with settle's write budget, tests/test_rounds.py's budgeted
        # rounds stopped writing with 43 of 200 jobs never placed; not looked into); True / False: always / never
        self.balance_types = (objective == "balanced") if balance_types is None else bool(balance_types)
        if short_types not in SHORT_TYPES:
            raise ValueError(f"unknown short_types {short_types!r}; choose one of {', '.join(SHORT_TYPES)}")
        # `_short_first`'s candidates: the makespan plan's types ("plan") or the short jobs' own and the rest
        # rebalanced ("rebalance"); its allowance over the best makespan found ("best") or the LP bound ("lp")
        self.short_types = short_types
        if short_reference not in SHORT_REFERENCES:
            raise ValueError(f"unknown short_reference {short_reference!r}; choose one of {', '.join(SHORT_REFERENCES)}")
        self.short_reference = short_reference
        self.batch_objective = batch_objective
        self.planner = planner
        self.cpsat_jobs = int(cpsat_jobs)
        self.cpsat_work = float(cpsat_work)
        self.time_box_s = float(time_box_s)
        self.head_jobs = int(head_jobs)
        self.tolerance = float(tolerance)
        self.clock = clock
        self.search_work = SEARCH_WORK
        self.stale_moves = STALE_MOVES
        self.continue_tail = True            # `_whole`: the head's decode continued with the tail (False: anew)
        self.last_search: dict = {}          # what the last plan() did (for logs, tests and benches)

    def objective_for(self, snapshot: ClusterSnapshot) -> str:
        """The objective this queue is planned for. "makespan" and "jct" as set; "balanced" is
        "makespan" for a batch submitted together (at least BATCH_SHARE of the managed pending jobs, two
        or more, with one submit time: a static batch, where no later arrival will use what the plan
        frees early; a share, not all, so that one arrival does not flip the whole queue's order and
        its first round's moves wait behind the rate limit) and balanced's JCT-first rule with the
        makespan kept near its best otherwise (online arrivals). Measured on the static bench batch (5
        seeds, backfill fifo the baseline): balanced accepted up to 5% over each round's best makespan,
        round after round, and the oracle ended 1.112x the LP bound (msched's makespan 0.781x fifo, two
        seeds over 0.80); makespan-first 1.047x (0.735x fifo, every seed <= 0.77), at a cost in mean JCT
        (0.679 -> 0.850x fifo, still below fifo's on every seed). `batch_objective` (default "makespan")
        is what such a batch is planned for; "balanced" or "jct" trade the makespan back for mean JCT
        (BENCHMARKS.md, planner9: seed 9 of the static batch, 1.69x fifo's mean JCT, is this trade)."""
        if self.objective != "balanced":
            return self.objective
        return self.batch_objective if snapshot.submitted_together(BATCH_SHARE) else "balanced"

    # the greedy order of the objective: balanced starts from shortest first (JCT first)
    def _greedy_sign(self, snapshot: ClusterSnapshot) -> float:
        return -1.0 if self.objective_for(snapshot) == "makespan" else 1.0

    def order(self, snapshot: ClusterSnapshot, sign: float | None = None) -> tuple[list[PendingJob], set[str]]:
        """Starving first (oldest first), then longest first (sign -1) or shortest first (+1)."""
        age = self.starvation_age_s if self.starvation_age_s is not None else snapshot.starvation_age_s
        managed = [j for j in snapshot.pending if j.managed]
        starving = starving_jobs(managed, snapshot.now, age)
        ids = {j.job_id for j in starving}
        rest = [j for j in managed if j.job_id not in ids]
        s = self._greedy_sign(snapshot) if sign is None else sign
        typeset = set(snapshot.gpu_types)
        length = {j.job_id: self.length(j, typeset) for j in rest}
        if s > 0 and self.age_weight > 0:      # Smith's rule on the age weights (`age_weights`)
            w = age_weights(rest, snapshot.now, length, self.age_weight)
            length = {jid: v / w[jid] for jid, v in length.items()}
        keyed = sorted(((s * length[j.job_id], j.submit_time, k) for k, j in enumerate(rest)))
        return starving + [rest[k] for _, _, k in keyed], ids

    # ------------------------------------------------------------------ plan
    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        """The searched plan (`_searched`). Balanced's short-first plan of a batch (`short_first`) is made for
        its own measure, which it carries for settle (`Plan.measure` "allowance"): the smallest sum of ends
        among plans whose makespan is within the allowance, its makespan first past it. The allowance is
        carried as `Plan.makespan_slack_s`, the time the plan's makespan may grow and stay within it,
        whether or not this round's short-first candidates beat the makespan plan (the rounds weigh one
        measure round after round). Settle weighs it only with `SettleOptions.allowance_share` set: off
        by default, as it drifted the batch's makespan (BENCHMARKS.md, jct14)."""
        return self.with_drain(snapshot, self._allowance_plan)

    def _allowance_plan(self, snapshot: ClusterSnapshot) -> Plan:
        out = self._searched(snapshot)
        slack = self.last_search.get("short_slack")
        if slack is not None:
            out.measure, out.makespan_slack_s = "allowance", slack
        return out

    def _searched(self, snapshot: ClusterSnapshot) -> Plan:
        self._prune_pool(snapshot)
        order, starving = self.order(snapshot)
        head_n = min(len(order) - len(starving), self.head_jobs)      # the search's head (`_split`)
        if self.cpsat_jobs and self.planner != "greedy" and CPSAT_MIN_JOBS <= head_n <= self.cpsat_jobs \
                or self.planner == "cpsat":
            # its first import (~0.5 s) is not the search's time; only where CP-SAT may run (+50 MB of RSS)
            import ortools.sat.python.cp_model  # noqa: F401
        t0 = self.clock()
        deadline = t0 + self.time_box_s
        if self.planner == "greedy":
            self.last_search = {"planner": "greedy"}
            return self.plan_for_order(snapshot, order, starving)
        # its journal serves the search only when the search's snapshot is this one (no tail: `_split`)
        journal: list | None = [] if PREFIX_RESUME and len(order) - len(starving) <= self.head_jobs else None
        built = self.construct(snapshot, order, starving, journal=journal)
        placed = built[0]

        def greedy() -> Plan:
            return self.plan_from(snapshot, order, starving, *built)

        free = [j for j in order if j.job_id not in starving]
        now = snapshot.now
        if len(free) < SEARCH_MIN_HEAD or all(j.job_id in placed and placed[j.job_id].start <= now for j in free):
            # nothing to search: one job, or every job starts now on its earliest-completion type (an
            # online queue that keeps up); no order or retyping can end any of them sooner
            self.last_search = {"planner": "optimize", "evals": 1, "improved": False, "timed_out": False}
            return greedy()
        if self._each_ends_at_its_earliest(snapshot, placed, starving):
            self.last_search = {"planner": "optimize", "evals": 1, "improved": False, "timed_out": False,
                                "proven": True}
            return greedy()
        head, tail = self._split(free, placed)
        search = _Search(self, snapshot, order[:len(starving)], head, deadline)
        if not tail:
            # the search's snapshot is this one and its first decode (the greedy order) is this one
            search.keep(head, None, built, journal=journal)
        best_order, best_fixed, improved = search.run(greedy_order=head)
        self.last_search = {"planner": self.planner, "evals": search.evals, "improved": improved,
                            "timed_out": search.timed_out, "head": len(head), "tail": len(tail),
                            "seconds": self.clock() - t0, "greedy": search.greedy_score, "best": search.best_score,
                            "reused": search.reused, "lp_start": search.lp_start, "settled": search.settled,
                            "cpsat_phases": len(search.cpsat_runs),
                            "cpsat_deterministic_s": sum(r.deterministic_s for r in search.cpsat_runs),
                            "short_slack": search.short_slack}
        if search.timed_out and search.evals <= 1:
            log.warning("planner: time box of %.3g s reached before the search could compare a plan "
                        "(%d pending jobs); keeping the greedy plan", self.time_box_s, len(snapshot.pending))
            return greedy()
        if search.timed_out:
            log.info("planner: time box of %.3g s reached after %d plans; using the best found%s",
                     self.time_box_s, search.evals, "" if improved else " (the greedy plan)")
        if not improved:
            return greedy()
        full = order[:len(starving)] + best_order + tail
        return self.plan_from(snapshot, full, starving, *self._whole(snapshot, search, full, tail, best_fixed))

    def _whole(self, snapshot: ClusterSnapshot, search: _Search, full: list[PendingJob], tail: list[PendingJob],
               fixed: dict[str, str] | None) -> tuple:
        """The decode of the whole queue in the order `full` (the search's best head, then the tail): the
        search's decode of the head as it is when there is no tail; when every pending job is managed (the
        queue is then the order itself), that decode continued with the tail (the tail's affinity rule
        reading the whole queue's type demand, as a decode of the whole queue does), which skips a decode
        of the whole queue (at 10,000 pending a third of plan()) and keeps the head exactly as the search
        scored it; decoded anew otherwise (plain jobs sit among the tail's places)."""
        hit = search.decoded.get(_plan_key(full[len(search.first):len(full) - len(tail)], fixed))
        if hit is not None and not tail:
            return hit[2]
        if hit is not None and self.continue_tail and all(j.managed for j in snapshot.pending):
            placed, chosen, tl = hit[2]
            rest = replace(snapshot, pending=tuple(tail))
            relative = type_demand(full, snapshot.gpu_types) if self.affinity > 0 else {}
            t_placed, t_chosen, tl = self.construct(rest, tail, search.starving, None, relative, tl)
            return {**placed, **t_placed}, {**chosen, **t_chosen}, tl
        return self.construct(snapshot, full, search.starving, fixed)

    def _each_ends_at_its_earliest(self, snapshot: ClusterSnapshot, placed: Mapping[str, Placed],
                                   starving: set[str]) -> bool:
        """Whether the greedy plan is provably best, so that no search can improve it: every pending job
        it places ends when that job would end were it the only one queued (the earliest completion over
        the types it may be given, on the cluster with only the running jobs). A decode books jobs on top
        of the running ones, so no job of any plan ends sooner, and both the sum of ends and the last end
        are at their minimum. Common online: a few jobs waiting, each for a different type's next free
        GPU (measured on the simulator's 1,000-GPU trace: see BENCHMARKS.md, issue 17's fourth round)."""
        alone = Timeline(snapshot.now, snapshot.nodes, snapshot.running)      # the shared base's copy
        for job in snapshot.pending:
            p = placed.get(job.job_id)
            if p is None:
                if job.managed:
                    return False                # a managed job left out: let the search look
                continue
            cand, runtime = self._candidates(job, snapshot.gpu_types, starving, alone)
            best = math.inf
            for t in cand:
                rt = runtime.get(t)
                s0 = None if rt is None else alone.start_time(t, job.num_gpus)
                if s0 is not None:
                    best = min(best, s0 + rt)
            if p.end > best:
                return False
        return True

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


_JOB_ID = operator.attrgetter("job_id")


def _plan_key(order: Sequence[PendingJob], fixed: Mapping[str, str] | None) -> tuple:
    return tuple(map(_JOB_ID, order)), tuple(sorted(fixed.items())) if fixed else ()


class _Search:
    """One round's search over orders (and fixed types) of the head jobs."""

    def __init__(self, policy: OptimizingPolicy, snapshot: ClusterSnapshot, starving_first: list[PendingJob],
                 head: list[PendingJob], deadline: float):
        self.p = policy
        self.objective = policy.objective_for(snapshot)      # the whole queue's (the head's may look a batch)
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
        self.cpsat_runs: list = []              # msched.policy.cpsat.CpResult of each CP-SAT phase
        self.lp_end: float | None = None        # the LP lower bound on the makespan end, once solved
        self.lp_start = False                   # the LP's types were a start point
        self.best_score: Score | None = None
        self.best_ms = float("inf")             # the shortest makespan seen (balanced's reference)
        self.short_cap = float("inf")           # `_short_first`'s makespan limit (absolute), once it ran ...
        self.short_slack: float | None = None   # ... and how much later than the plan chosen a plan may end
        # balanced's tolerance is a share of the time from the oldest head job's submission to the best
        # end: a fixed point while that job waits, so re-planning every round cannot push the job that
        # sets the makespan later and later (a share of the time from *now* would, by 5% each round)
        self.anchor = min((j.submit_time for j in head), default=snapshot.now)
        self.rng = random.Random(len(head))
        self.decoded: dict[tuple, tuple] = {}     # plans decoded in this search: key -> (score, placed, built)
        self.journals: dict[tuple, tuple] = {}    # ... and their decodes' journals: key -> (journal, fixed)
        self.reused = 0
        self._runtime_memo: dict[str, dict[str, float]] | None = None    # `_runtimes`, once asked
        # a decode costs about one step per job it places (the head, and the plain and starving jobs
        # around it: at 10,000 pending with a fifth plain, ~2,000 of them), running job and node (the
        # timeline is copied)
        per_eval = len(snapshot.pending) + len(snapshot.running) + len(snapshot.nodes)
        self.max_evals = max(MIN_EVALS, policy.search_work // max(1, per_eval))
        # a head searched by earlier rounds (`settled_s`, `settled_work`): a share of the budget; not a batch
        # submitted together (planned for the makespan, where the budget measurably pays: BENCHMARKS.md)
        self.settled = policy.settled_work < 1.0 and policy.settled_s is not None and bool(head) and \
            all(snapshot.now - j.submit_time >= policy.settled_s for j in head) and \
            not snapshot.submitted_together(BATCH_SHARE)
        if self.settled:
            self.max_evals = max(policy.settled_evals, int(self.max_evals * policy.settled_work))
        typeset = set(snapshot.gpu_types)
        self.length = {j.job_id: policy.length(j, typeset) for j in head}
        # the JCT measure's weights (`age_weight`; None: every end weighs 1) and planned waits' (`wait_weight`)
        self.weight = age_weights(head, snapshot.now, self.length, policy.age_weight) if policy.age_weight > 0 \
            else None
        self.wait_weight = policy.wait_weight
        self.types = snapshot.gpu_types
        self.timeline = Timeline(snapshot.now, snapshot.nodes, snapshot.running)   # copied by each decode
        # the affinity rule's queue-wide type demand depends on the set of jobs only: once per search
        self.relative = type_demand([*starving_first, *head], snapshot.gpu_types) if policy.affinity > 0 else {}

    # ------------------------------------------------------------------ scoring
    def key(self, s: Score) -> tuple:
        obj = self.objective
        if obj == "makespan":
            return (-s.placed, s.last_end, s.sum_end)
        if obj == "jct":
            return (-s.placed, s.sum_end, s.last_end)
        cap = self.best_ms + self.p.tolerance * (self.best_ms - self.anchor) if self.best_ms < float("inf") \
            else float("inf")
        over = s.last_end if s.last_end > cap + 1e-9 else cap
        return (-s.placed, over, s.sum_end)

    def evaluate(self, order: Sequence[PendingJob], fixed: Mapping[str, str] | None = None,
                 parent: tuple | None = None) -> tuple[Score, dict]:
        """Decode and score a plan. A plan decoded before in this search (the start points of a short head
        often coincide; random moves revisit orders) is not decoded again: the decode is deterministic.
        It still counts against the budget, so the search takes the same steps either way. `parent`: the
        (journal, fixed types) of the decoded plan this one is a move from (`journal_of`): the prefix
        they share is booked from its journal, not decoded again (`PREFIX_RESUME`)."""
        self.evals += 1
        key = _plan_key(order, fixed)
        hit = self.decoded.get(key)
        if hit is not None:
            self.reused += 1
            return hit[0], hit[1]
        journal: list | None = [] if PREFIX_RESUME else None
        built = self.p.construct(self.snap, [*self.first, *order], self.starving, fixed, self.relative,
                                 self.timeline, journal=journal, resume=parent if PREFIX_RESUME else None)
        return self.keep(order, fixed, built, key, journal)

    def keep(self, order: Sequence[PendingJob], fixed: Mapping[str, str] | None, built: tuple,
             key: tuple | None = None, journal: list | None = None) -> tuple[Score, dict]:
        """Score a decode (`construct`'s placements, chosen types and timeline) and remember it: the plan
        returned at the end is built from it rather than decoded once more. `key`: its `_plan_key`, when
        the caller has it; `journal`: its decode's journal (what a move from it resumes from)."""
        placed = built[0]
        s = score(self.snap, placed, self.weight, self.wait_weight)
        self.best_ms = min(self.best_ms, s.last_end) if s.placed == len(placed) else self.best_ms
        key = _plan_key(order, fixed) if key is None else key
        self.decoded[key] = (s, placed, built)
        if journal is not None:
            self.journals[key] = (journal, dict(fixed) if fixed else None)
        return s, placed

    def journal_of(self, order: Sequence[PendingJob], fixed: Mapping[str, str] | None) -> tuple | None:
        """(journal, fixed types) of this plan's decode, when it was decoded in this search (None: not
        kept)."""
        return self.journals.get(_plan_key(order, fixed)) if PREFIX_RESUME else None

    def out_of_time(self) -> bool:
        if self.p.clock() >= self.deadline:
            self.timed_out = True
        return self.timed_out or self.evals >= self.max_evals

    # ------------------------------------------------------------------ search
    def run(self, greedy_order: list[PendingJob]) -> tuple[list[PendingJob], dict[str, str] | None, bool]:
        g_score, g_placed = self.evaluate(greedy_order)
        self.greedy_score = g_score
        if self.p.planner == "cpsat":          # CP-SAT alone, hinted with the greedy plan (bench's competitor)
            got = None if self.out_of_time() else self._cpsat(greedy_order, None, g_score)
            improved = got is not None and self.key(got[2]) < self.key(g_score)
            self.best_score = got[2] if improved else g_score
            return (got[0], got[1], True) if improved else (greedy_order, None, False)
        starts = [(greedy_order, None, g_score, g_placed)]
        # other start points: the last round's plan (the queue's order now: a warm start that needs no
        # state), the opposite greedy order, and the greedy order with the LP's types
        by_len = sorted(self.head, key=lambda j: (self.length[j.job_id], j.submit_time))
        orders = [sorted(self.head, key=queue_key),
                  list(reversed(by_len)) if self.objective != "makespan" else by_len]
        lp_types = self._lp_types()
        orders_fixed = [(greedy_order, lp_types)] if lp_types else []
        balanced = self._balanced_start(lp_types) if lp_types and self.p.balance_types else None
        if balanced is not None:
            orders_fixed.append(balanced)
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
        # a small head: CP-SAT from the best plan so far (its schedule decoded as an order and types)
        if self._cpsat_worth_it(best_s):
            got = self._cpsat(order, fixed, best_s)
            if got is not None and self.key(got[2]) < self.key(best_s):
                order, fixed, best_s = got
                # a short local search from CP-SAT's decode (its own budget: the first one is spent)
                self.max_evals = self.evals + max(MIN_EVALS, self.max_evals // 4)
                _, cp_placed = self.evaluate(order, fixed)
                o, fx, s = self._improve(list(order), fixed, best_s, cp_placed)
                if self.key(s) < self.key(best_s):
                    order, fixed, best_s = o, fx, s
        # a makespan plan: its shortest jobs first where the makespan allows (`short_first`)
        chosen = None
        if self.objective == "makespan" and self.p.objective == "balanced" and self.p.short_first is not None \
                and not self.timed_out:
            chosen = self._short_first(order, fixed, best_s)
            if chosen is not None:
                order, fixed, best_s = chosen
            self.short_slack = max(0.0, self.short_cap - best_s.last_end)
        # balanced's reference may have dropped during the search: re-rank against the greedy plan
        improved = chosen is not None or self.key(best_s) < self.key(g_score)
        self.best_score = best_s if improved else g_score
        return (order, fixed, True) if improved else (greedy_order, None, False)

    def _short_first(self, order: list[PendingJob], fixed: dict[str, str] | None,
                     s: Score) -> tuple[list[PendingJob], dict[str, str], Score] | None:
        """The makespan plan (order, fixed) with its shortest jobs moved to the front (on the types its
        decode gave them, each job's length its runtime there): the shortest SHORT_FIRST_SHARES of the head
        in shortest-first order, then the rest in the plan's order. Of those whose makespan end is within
        `short_first` x (the plan's end - the oldest job's submission) of the plan's, the one with the
        smallest sum of ends, if below the plan's (None: none). A batch planned for its makespan runs
        long jobs first on every type, and its short jobs wait behind them (jct13, BENCHMARKS.md: on
        the static bench batch's seed 9 the <0.5 h jobs' waits were 1.4x fifo's whole flow time).

        `short_types="rebalance"` (planner17): the front jobs, shortest first by their fastest type, take
        their own types (the decode's earliest completion), and a second candidate per share has the rest's
        types balanced again over the GPUs the front leaves (`_rebalanced`); between the last share that
        fits the allowance and the next, SHORT_BISECT halvings look for the largest share that fits. A plan
        balanced for its makespan (`balance_types`) has filled each type's GPUs to one end, so the plan's
        own types left the short jobs on slow types and no room to move them (seed 9 at t=0: mean end
        1.17 h, 0.81 h without the balancing; rebalanced 0.84 h at 1.099x the LP bound).
        `short_reference="lp"`: the allowance is a share of the LP bound's span, not of the best plan's:
        the best plan each round found is later when the last round's plan already used the allowance, so
        an allowance over it grew round after round (seed 9's replay: 1.05 -> 1.31x the LP bound while the
        LP bound of what was left stayed at 1.00-1.06x)."""
        _, placed = self.evaluate(order, fixed)
        fx = dict(fixed or {})
        for j in order:
            p = placed.get(j.job_id)
            if p is not None and j.managed and not j.pinned_type and j.job_id not in self.starving:
                fx[j.job_id] = p.gpu_type
        base = self.lp_end if self.p.short_reference == "lp" and self.lp_end is not None else s.last_end
        cap = self.short_cap = base + self.p.short_first * max(0.0, base - self.anchor) + 1e-6
        mode = self.p.short_types
        if mode == "plan":
            length = {j.job_id: j.est_runtime_s.get(fx.get(j.job_id, ""), self.length[j.job_id]) for j in order}
        else:
            length = self.length
        by_len = sorted(order, key=lambda j: (length[j.job_id], j.submit_time))
        n = len(order)
        self.max_evals = self.evals + (1 if mode == "plan" else 2) * len(SHORT_FIRST_SHARES)   # its own budget
        best = None

        def fits(k: int) -> bool:
            nonlocal best
            front = {j.job_id for j in by_len[:k]}
            rest = [j for j in order if j.job_id not in front]
            cands = []
            if mode == "plan":
                cands.append((by_len[:k] + rest, fx))
            else:
                own = {jid: t for jid, t in fx.items() if jid not in front}
                cands += [(by_len[:k] + rest, fx), (by_len[:k] + rest, own)]
                if rest:
                    _, cp = self.evaluate(by_len[:k] + rest, own)
                    rb = self._rebalanced(by_len[:k], rest, own, cp)
                    if rb is not None:
                        cands.append(rb)
            ok = False
            for cand, cfx in cands:
                cs, _ = self.evaluate(cand, cfx)
                if cs.placed >= s.placed and cs.last_end <= cap:
                    ok = True
                    if cs.sum_end < (best[2] if best else s).sum_end - 1e-6:
                        best = (cand, cfx, cs)
            return ok

        last_ok, first_bad = 0, None
        for share in SHORT_FIRST_SHARES:
            if self.p.clock() >= self.deadline:
                self.timed_out = True
                break
            k = max(1, round(n * share))
            if fits(k):
                last_ok = k
            elif first_bad is None:
                first_bad = k
        if mode != "plan" and first_bad is not None:
            lo, hi = last_ok, first_bad             # bisect between the last share that fit and the first that did not
            self.max_evals += 3 * SHORT_BISECT
            for _ in range(SHORT_BISECT):
                if hi - lo <= 1 or self.p.clock() >= self.deadline:
                    break
                mid = (lo + hi) // 2
                if fits(mid):
                    lo = mid
                else:
                    hi = mid
        if mode != "plan":
            best = self._least_sum_within(cap, s, best)
        return best

    def _least_sum_within(self, cap: float, s: Score, best: tuple | None) -> tuple | None:
        """Of every plan this search decoded (start points, moves, short-first candidates) that places as
        many jobs as `s` and ends by `cap`, the one with the smallest sum of ends if below `best`'s (or
        `s`'s): the plan the short-first step moved from is one makespan plan of several, and on the
        static bench batch's seed 6 another start point's plan within the allowance had the smaller sum."""
        ref = (best[2] if best else s).sum_end - 1e-6
        found = None
        for (ids, fixed_items), (cs, _, _) in self.decoded.items():
            if cs.placed >= s.placed and cs.last_end <= cap and cs.sum_end < ref:
                ref, found = cs.sum_end, (ids, fixed_items, cs)
        if found is None:
            return best
        by_id = {j.job_id: j for j in self.head}
        ids, fixed_items, cs = found
        return [by_id[jid] for jid in ids], dict(fixed_items), cs

    def _rebalanced(self, front: list[PendingJob], rest: list[PendingJob], fixed: dict[str, str],
                    placed: Mapping[str, Placed]) -> tuple[list[PendingJob], dict[str, str]] | None:
        """`front` (placed as `placed` has them) then `rest` with its types (`fixed`) balanced over each
        type's GPUs as the front leaves them (`balance_types`), widest first, then longest on its type
        (None: nothing moved)."""
        runtime = self._runtimes()
        pools = self._pools()
        for j in sorted(front, key=lambda j: placed[j.job_id].start if j.job_id in placed else math.inf):
            p = placed.get(j.job_id)
            if p is None or p.gpu_type not in pools:
                continue
            heap = pools[p.gpu_type]
            heapq.heapify(heap)
            for _ in range(min(j.num_gpus, len(heap))):
                heapq.heappop(heap)
            for _ in range(j.num_gpus):
                heapq.heappush(heap, p.end)
        gpus_of = {j.job_id: j.num_gpus for j in rest}
        start = {j.job_id: fixed[j.job_id] for j in rest if fixed.get(j.job_id) in runtime.get(j.job_id, ())}
        pinned = {j.job_id for j in rest if j.pinned_type or not j.managed or j.job_id not in start}
        types = balance_types(start, runtime, gpus_of, pools, frozen=pinned,
                              out_of_time=lambda: self.p.clock() >= self.deadline)
        if types is None:
            return None
        out = {**fixed, **types}
        order = sorted(rest, key=lambda j: (-j.num_gpus, -runtime[j.job_id].get(out.get(j.job_id, ""), self.length[j.job_id]),
                                            j.submit_time))
        return front + order, out

    def _pools(self) -> dict[str, list[float]]:
        """Each type's GPU free times now, sorted (`pool_end`'s pools)."""
        tl = self.timeline
        return {t: sorted(f for i in idx for f in tl.free[i]) for t, idx in tl.by_type.items()}

    def _runtimes(self) -> dict[str, dict[str, float]]:
        """Each head job's runtime on each type it may be given (once per search)."""
        got = self._runtime_memo
        if got is None:
            got = {}
            for j in self.head:
                cand, rt = self.p._candidates(j, self.types, self.starving, self.timeline)
                got[j.job_id] = {t: rt[t] for t in cand if rt.get(t) is not None}
            self._runtime_memo = got
        return got

    def _cpsat_worth_it(self, best: Score) -> bool:
        """CP-SAT for a head of CPSAT_MIN_JOBS to `cpsat_jobs` jobs, unless the best plan's makespan is
        already within CPSAT_GAP of the LP bound (measured: on the static bench batch CP-SAT every round
        cost 9x the plan time for 0.2% of makespan; a small head is searched near exhaustively anyway).
        Without the LP start point (an online queue) the simple bound is tried first: within CPSAT_GAP
        of it is within CPSAT_GAP of the LP bound, which is higher; only otherwise is the LP solved."""
        if not self.p.cpsat_jobs or self.timed_out or not CPSAT_MIN_JOBS <= len(self.head) <= self.p.cpsat_jobs:
            return False
        now = self.snap.now

        def near(end: float) -> bool:
            return best.last_end <= end * (1.0 + CPSAT_GAP) - CPSAT_GAP * now

        if self.lp_end is None:
            from msched.policy.bound import (
                snapshot_lower_bound,
                snapshot_running_bound,
                snapshot_simple_bound,
            )
            # the running jobs' term first (`RUNNING_BOUND_FIRST`): the simple bound is at least it, and near()
            # holds for any bound above one it holds for; online it answers ~99% of these calls alone
            if RUNNING_BOUND_FIRST and near(snapshot_running_bound(self.snap)):
                return False
            if near(snapshot_simple_bound(self.snap)):
                return False
            b = snapshot_lower_bound(self.snap)
            if b.solved:
                self.lp_end = b.origin + b.value_s
        return self.lp_end is None or not near(self.lp_end)

    def _cpsat(self, order: list[PendingJob], fixed: dict[str, str] | None,
               s: Score) -> tuple[list[PendingJob], dict[str, str] | None, Score] | None:
        """CP-SAT (msched.policy.cpsat) on the head, hinted with the plan (order, fixed) scoring `s`,
        within `cpsat_work` deterministic seconds (the wall-clock time box left as a safety net). Each
        schedule it finds is decoded from its start order and types, and the best decode is returned
        (None: nothing found). balanced solves for the makespan first, then for the sum of ends under
        balanced's makespan limit, half the budget each."""
        from msched.policy import cpsat

        now = self.snap.now
        _, placed = self.evaluate(order, fixed)
        head_ids = {j.job_id for j in self.head}
        jobs, hint = [], {}
        for j in self.head:
            cand, runtime = self.p._candidates(j, self.types, self.starving, self.timeline)
            rt = {t: max(1, math.ceil(runtime[t])) for t in cand if runtime.get(t) is not None}
            if not rt or j.job_id not in placed:
                return None                     # a job the decoder cannot place: leave it to the search
            jobs.append(cpsat.CpJob(j.job_id, j.num_gpus, rt))
            p = placed[j.job_id]
            hint[j.job_id] = (p.gpu_type, max(0, round(p.start - now)))
        tl = self.timeline
        capacity: dict[str, int] = {}
        held: dict[tuple[str, int], int] = {}
        for i, frees in enumerate(tl.free):
            t = tl.types[i]
            capacity[t] = capacity.get(t, 0) + len(frees)
            for f in frees:
                if f > now:
                    key = (t, math.ceil(f - now))
                    held[key] = held.get(key, 0) + 1
        busy = [cpsat.CpBusy(t, g, 0, e) for (t, e), g in sorted(held.items())]
        gpus = {j.job_id: j.num_gpus for j in self.snap.pending}
        for jid, p in sorted(placed.items()):          # plain and starving jobs where the plan puts them
            if jid not in head_ids and p.end > p.start:
                g = gpus[jid]
                busy.append(cpsat.CpBusy(p.gpu_type, g, max(0, round(p.start - now)), math.ceil(p.end - now)))
        budget = self.p.cpsat_work
        obj = self.objective
        phases = ["makespan", "jct"] if obj == "balanced" else [obj]
        best = None
        for k, phase in enumerate(phases):
            left = self.deadline - self.p.clock()
            if left <= 0:
                self.timed_out = True
                break
            cap = None
            if phase == "jct" and obj == "balanced":
                ref = min(self.best_ms, s.last_end)
                cap = math.floor(ref + self.p.tolerance * (ref - self.anchor) - now)
            res = cpsat.solve(jobs, capacity, busy, objective=phase, hint=hint, makespan_cap=cap,
                              deterministic_s=budget / len(phases), max_s=CPSAT_WALL_SLACK * left, workers=1)
            self.cpsat_runs.append(res)
            if res.hit_wall_limit:
                self.timed_out = True
            if not res.found:
                continue
            by_id = {j.job_id: j for j in self.head}
            cand = [by_id[jid] for jid in res.order()]
            cfix = {jid: t for jid, t in res.types.items() if not by_id[jid].pinned_type}
            cs, cp = self.evaluate(cand, cfix)
            if best is None or self.key(cs) < self.key(best[2]):
                best = (cand, cfix, cs)
            if k + 1 < len(phases):
                hint = {jid: (p.gpu_type, max(0, round(p.start - now))) for jid, p in cp.items() if jid in head_ids}
        return best

    def _balanced_start(self, lp_types: dict[str, str]) -> tuple[list[PendingJob], dict[str, str]] | None:
        """A makespan plan's start point from the LP's types, balanced (`balance_types`): the LP's types
        rounded leave some type's GPUs busy long after the others', and a whole-node job placed after narrow
        ones waits for its node to drain. Here each type is a pool of its GPUs (their free times now), its
        jobs placed widest first, then longest (`pool_end`); while moving one job off the type that ends last
        to another type ends the latest pool earlier, the best such move is made (`balance_types`). The
        start point is those types, the head widest first, then longest on its type. Measured on the static
        bench batch's seed 9 (15 whole-node jobs of 200, one 4-GPU node per type), planned at t=0 with the
        true runtimes: the LP's types rounded 1.318x the LP bound, balanced 1.041x (at most 64 moves; the
        search's plan from it 1.061x); the greedy plan 1.251x and the local search 1.224x even at 100x its
        budget (BENCHMARKS.md, the planner's thirteenth round)."""
        gpus_of = {j.job_id: j.num_gpus for j in self.head}
        runtime = self._runtimes()
        pools = self._pools()
        start = {jid: t for jid, t in lp_types.items() if t in runtime.get(jid, ())}
        pinned = {j.job_id for j in self.head if j.pinned_type or not j.managed or j.job_id not in start}
        types = balance_types(start, runtime, gpus_of, pools, frozen=pinned,
                              out_of_time=lambda: self.p.clock() >= self.deadline)
        if types is None:
            return None
        fixed = {**lp_types, **types}
        order = sorted(self.head, key=lambda j: (-j.num_gpus,
                                                  -runtime[j.job_id].get(fixed.get(j.job_id, ""), self.length[j.job_id]),
                                                  j.submit_time))
        return order, fixed

    def _lp_types(self) -> dict[str, str] | None:
        """Each head job's type with the largest share in the LP relaxation (None: nothing to fix; a
        head of fewer than LP_MIN_JOBS jobs is left to the local search's retyping moves). The LP
        minimises the makespan, so by default (`lp_start="makespan"`) it is a start point only when the
        plan is for the makespan (a batch, or objective makespan); online (balanced, jct) it is skipped:
        measured on the bench workloads, the plans were as good without it (BENCHMARKS.md, issue 17's
        fourth round) and the simulator's 1,000-GPU trace spent a fifth of plan() solving it."""
        if self.out_of_time() or len(self.head) < LP_MIN_JOBS:
            return None
        if self.p.lp_start == "makespan" and self.objective != "makespan":
            return None
        from msched.policy.bound import snapshot_lower_bound
        b = snapshot_lower_bound(self.snap)
        if not b.solved:
            return None
        self.lp_end = b.origin + b.value_s
        out = {}
        for j in self.head:
            shares = b.assignment.get(j.job_id)
            if shares and not j.pinned_type:
                out[j.job_id] = max(sorted(shares), key=lambda t: shares[t])
        self.lp_start = bool(out)
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
            parent = self.journal_of(order, fixed)
            for move in moves:
                if self.out_of_time():
                    break
                cand, cfix = self._apply(move, order, fixed)
                if cand is None:
                    continue
                cs, cp = self.evaluate(cand, cfix, parent)
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
