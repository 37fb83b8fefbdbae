"""The model-similarity policies: `msched` (re-planned every round), `msched-once` (decided at submit
only), `oracle` (msched's planner fed the true runtimes).

Plan (DESIGN policy point 5, guards point 6):
1. Order the managed pending jobs: starving ones first (oldest first), then longest first for
   `objective="makespan"` (LPT) or shortest first for `"jct"` (SPT). A job's length is its estimate on
   its fastest feasible type.
2. Construct a schedule on the cluster timeline (running jobs' estimated ends, free GPUs per node):
   walk the queue with the managed places filled in that order (unmanaged jobs keep their own Slurm
   order and hold GPUs for their time limit; the managed places sit among them by submit time, never by
   the priorities msched wrote: `construct_order`); give each managed job the type that brings its
   estimated completion earliest (list scheduling across types, earliest-completion-time rule), at the
   earliest time its GPUs are free on one node or whole nodes. Starving jobs get every feasible type
   (OR); pinned jobs and jobs with no estimate keep what they have; a type whose estimate exceeds the
   job's time limit is never chosen (estimators drop those). The plan never reads the priorities or
   the types msched itself wrote (a round is a fixed point: planning an unchanged queue gives the same
   plan, so it writes nothing); whether a job's change is worth a write (`hysteresis`: its own planned
   finish must improve by 5% of its runtime) is decided after planning, against the incumbent plan
   (`msched.rounds.settle`).
   Relative speed (`affinity`, 10%): among the types that finish a job within 10% of the earliest
   completion (counted from now), it takes the one where it is relatively fastest compared with how
   fast that type is for the whole queue, so a job that runs as well on a slower type leaves the type
   the others need most (comparative advantage, `type_demand`).
3. Priorities in order of planned start (starving first). Slurm starts a partition's jobs in priority
   order (strictly, without backfill), so a queue sorted by planned start lets it follow the schedule:
   no job planned for later sits above one planned for now and blocks it. Written with
   `priorities.assign_priorities` (few changes, see there).
   The constructed schedule gives the estimated starts/ends and the free time per type that the
   reorderer publishes for msub.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from msched.config import OBJECTIVES
from msched.policy.base import (
    Placed,
    Policy,
    PossibleTypes,
    as_is_runtime,
    default_types,
    feasible_types,
    placed_at,
    queue_key,
    runtime_guess,
)
from msched.policy.choice import DEFAULT_INFORMED_SLACK, completion_choice, submit_slack
from msched.policy.drain import drained_plan, drained_snapshot
from msched.policy.price import MEASURES as PRICE_MEASURES
from msched.policy.priorities import assign_keeping_plain
from msched.policy.snapshot import ClusterSnapshot, PendingJob, Plan, decision_at
from msched.policy.timeline import NOT_CACHED, Timeline


def type_demand(jobs: list[PendingJob], types: list[str]) -> dict[str, float]:
    """Per GPU type, the mean over the queue of a job's runtime there relative to its fastest type: 1.0
    for a type that is every job's fastest, larger for one most jobs run slowly on."""
    total: dict[str, float] = dict.fromkeys(types, 0.0)
    count: dict[str, int] = dict.fromkeys(types, 0)
    for j in jobs:
        est = j.est_runtime_s
        if not est:
            continue
        fastest = min(est.values())
        if fastest <= 0:
            continue
        for t, v in est.items():
            if t in total:
                total[t] += v / fastest
                count[t] += 1
    return {t: total[t] / count[t] for t in types if count[t]}


def arrival_key(job: PendingJob) -> tuple:
    """Submit time, then job id (numeric when it is one): an order msched never changes by writing."""
    jid = job.job_id
    return (job.submit_time, (0, int(jid), "") if jid.isdigit() else (1, 0, jid))


def construct_order(pending: Sequence[PendingJob], order: Sequence[PendingJob]) -> list[PendingJob]:
    """The queue the plan is built on: unmanaged jobs in their own Slurm order (their priorities are
    never msched's), the managed places merged in among them by submit time and filled with `order`.

    Placing the managed jobs by the priorities Slurm holds would plan from msched's own last writes:
    each round would re-derive a different plan from its predecessor's output and rewrite the queue
    (measured on the dev cluster: 1,010 then 586 writes in two rounds of an unchanged queue)."""
    plain = sorted((j for j in pending if not j.managed), key=queue_key)
    slots = sorted((j for j in pending if j.managed), key=arrival_key)
    return fill_places(plain, slots, order)


def fill_places(plain: Sequence[PendingJob], slots: Sequence[PendingJob],
                order: Sequence[PendingJob]) -> list[PendingJob]:
    """`construct_order`'s merge: the unmanaged jobs (Slurm's order) with the managed places (`slots`, by
    arrival) among them, each place filled with the next job of `order`."""
    if not plain and len(order) >= len(slots):
        return list(order[:len(slots)])
    out: list[PendingJob] = []
    fill = iter(order)
    k = 0
    for slot in slots:
        while k < len(plain) and plain[k].submit_time <= slot.submit_time:     # ties: the plain job first
            out.append(plain[k])
            k += 1
        out.append(next(fill))
    out.extend(plain[k:])
    return out


_PLACE = object()        # a managed job's place in `_QueueMemo`'s merge pattern
KEEP_PLACES = True       # `_QueueMemo.construct_order` fills a kept pattern of the merge (off: `fill_places` each
                         # time; tests/test_fast_paths.py)
SHARE_ENTRIES = True     # the per-queue memos of one context share their per-job entries (`_entry_pool`); off: each
                         # memo computes its own (tests/test_fast_paths.py)
ONE_NODE_BOOKING = True  # construct books a one-node job on the node its type's cached start names (`Timeline.book`)
                         # instead of building its placement and committing it (off: `commit(place(...))`, the same
                         # booking; tests/test_fast_paths.py)
FASTEST_FIRST = True     # construct looks at a job's candidate types fastest first (`_decode_entry`); off: as given
                         # (tests/test_fast_paths.py)


def _decode_entry(job: PendingJob, cand, runtime, starving: set[str], fastest_first: bool) -> tuple:  # noqa: ANN001
    """What `construct` reads of a job on each decode: (candidate types, runtimes, chosen by completion,
    GPUs, GPUs as the timeline's start cache keys them, job id, whether msched writes its type constraint,
    the candidates as given: a starving job's constraint). `fastest_first`: the candidates by runtime (then name),
    types without one last: construct's choice is the minimum of a strict order over the types it
    looks at, and a type it prunes could not be that minimum, so the order only lets it prune sooner."""
    g = job.num_gpus
    typed = job.managed and not job.pinned_type and runtime is job.est_runtime_s
    given = cand
    by_completion = chosen_by_completion(job, starving)
    if fastest_first and by_completion:
        inf = float("inf")
        cand = tuple([t for _, t in sorted([(runtime.get(t, inf), t) for t in cand])])   # by (runtime, name)
    return cand, runtime, by_completion, g, g if g > 1 else 1, job.job_id, typed, given


def _replay_prefix(resume: tuple, construct: list[PendingJob], fixed: Mapping[str, str] | None, tl: Timeline,
                   placed: dict, chosen: dict, journal: list | None) -> int:
    """`construct`'s `resume`: the length of the longest prefix of `construct` that the earlier decode's
    journal walked with the same job objects and the same fixed types, with that prefix's bookings
    committed on `tl` and its placements and constraints entered (in the same order) into `placed`,
    `chosen` and `journal`."""
    done, old_fixed = resume
    fx = fixed or {}
    ofx = old_fixed or {}
    n = min(len(done), len(construct))
    q = 0
    while q < n:
        job = construct[q]
        if done[q][0] is not job:
            break
        if (fx or ofx) and fx.get(job.job_id) != ofx.get(job.job_id):
            break
        q += 1
    book = tl.book
    for k in range(q):
        e = done[k]
        b = e[1]
        if b is None:
            continue
        book(b[0], b[1], b[2], e[3].end)
        jid = e[0].job_id
        placed[jid] = e[3]
        if e[4] is not None:
            chosen[jid] = e[4]
    if journal is not None and q:
        journal.extend(done[:q])
    return q


def chosen_by_completion(job: PendingJob, starving: set[str]) -> bool:
    """msched picks the type of a managed, unpinned, non-starving job (earliest completion); the others
    take whichever allowed type starts them first, as Slurm does."""
    return job.managed and not job.pinned_type and job.job_id not in starving


def starving_jobs(managed: Sequence[PendingJob], now: float, age: float | None) -> list[PendingJob]:
    """The managed jobs the starvation guard puts first (oldest first): those pending longer than `age`.

    The guard keeps a job from being overtaken by later arrivals for ever. A batch submitted together
    (two or more managed jobs, every one of them past the age, all with one submit time) has no later
    arrival to be protected from: putting it "first" would only order the whole batch by job id and
    widen every job, undoing the plan. Measured on bench_planner's Gavel-shaped static batch (100 jobs at
    t=0, about 140 h of work per type, 24 h guard): on seed 4 the guard turned the plan into id order
    after 24 h and msched was 1.284x the LP bound; 1.149x with this rule (1.006x with no guard at all;
    1.004x with balanced's batch rule as well, `OptimizingPolicy.objective_for`)."""
    if age is None:
        return []
    out = [j for j in managed if now - j.submit_time > age]
    if len(out) >= 2 and len(out) == len(managed) and len({j.submit_time for j in out}) == 1:
        return []
    out.sort(key=arrival_key)
    return out


class MschedOncePolicy(Policy):
    """The similarity choice at submit (types within `slack` of the best projected completion); no rounds."""

    name = "msched-once"
    replans = False

    def submit_choice(self, est: Mapping[str, float], free_at: Mapping[str, float],
                      now: float) -> tuple[str, ...]:
        return completion_choice(est, free_at, now, self.slack)


class MschedPolicy(MschedOncePolicy):
    """Re-planned every round: LPT/SPT order + earliest-completion type, with the guards."""

    name = "msched"
    replans = True
    prune_slow_types = True      # construct's shortcut past types too slow to matter (tests/test_fast_paths.py)
    reuse_per_queue = True       # construct's sorts and candidates kept across the decodes of one queue (_QueueMemo)

    def __init__(self, *, objective: str = "makespan", starvation_age_s: float | None = None,
                 hysteresis: float = 0.05, affinity: float = 0.1, managed_first: bool = False,
                 informed_slack: float | None = DEFAULT_INFORMED_SLACK, price_quantile: float | None = None,
                 price_window_s: float | None = None, price_measure: str = "saving",
                 free_slack: float | None = None, wait_factor: float = 1.0, wait_weight: float = 0.0,
                 age_weight: float = 0.0, drain_wide: bool = False, **opts):
        super().__init__(**opts)
        # keep narrow jobs off a type whole-node jobs wait on (msched.policy.drain; BENCHMARKS.md, wide18)
        self.drain_wide = bool(drain_wide)
        if wait_weight < 0 or age_weight < 0:
            raise ValueError(f"wait_weight and age_weight must be >= 0 (got {wait_weight}, {age_weight})")
        # the round's plan for mean JCT (jct11; both off by default, BENCHMARKS.md "Online mean JCT, round
        # levers"): `wait_weight` = each planned second of wait counts 1 + this in a managed job's type
        # choice (construct) and in the plan's score (later arrivals overtake a job planned to wait, so a
        # planned wait runs longer than planned); `age_weight` = a job's end weighs 1 + this x (its age /
        # its length) in the plan's sum of ends, and the greedy order is by length over that weight
        # (Smith's rule): a job that has waited long against its length is no longer overtaken by every
        # shorter arrival (an age guard on shortest first)
        self.wait_weight = float(wait_weight)
        self.age_weight = float(age_weight)
        if price_quantile is not None and not 0 <= price_quantile <= 1:
            raise ValueError(f"price_quantile must be in [0, 1] (got {price_quantile})")
        self.price_quantile = price_quantile      # the round's submit prices (msched.policy.price; None: off)
        self.price_window_s = price_window_s
        if price_measure not in PRICE_MEASURES:
            raise ValueError(f"price_measure must be one of {', '.join(PRICE_MEASURES)} (got {price_measure!r})")
        self.price_measure = price_measure
        if free_slack is not None and free_slack < 1.0:
            raise ValueError(f"free_slack must be >= 1 (got {free_slack})")
        # the slack at most when the best type is free now (choice.completion_choice); off: on the held-out
        # seeds 1.1 moved online mean JCT by noise (philly 0.718 -> 0.718, alibaba 0.704 -> 0.700) and
        # raised philly seed 2's makespan to fifo's (BENCHMARKS.md, jct10)
        self.free_slack = free_slack
        if wait_factor < 1.0:
            raise ValueError(f"wait_factor must be >= 1 (got {wait_factor})")
        self.wait_factor = wait_factor            # projected waits taken this many times over (completion_choice)
        if informed_slack is not None and informed_slack < 1.0:
            raise ValueError(f"informed_slack must be >= 1 (got {informed_slack})")
        self.informed_slack = informed_slack
        self.managed_first = managed_first
        if affinity < 0:
            raise ValueError(f"affinity must be >= 0 (got {affinity})")
        self.affinity = affinity
        if hysteresis < 0:
            raise ValueError(f"hysteresis must be >= 0 (got {hysteresis})")
        self.hysteresis = hysteresis
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
        self.objective = objective
        self.starvation_age_s = starvation_age_s

    def submit_choice(self, est: Mapping[str, float], free_at: Mapping[str, float],
                      now: float) -> tuple[str, ...]:
        """msub's choice: the types within `slack` of the best projected completion; `informed_slack`
        (when set; off by default, see msched.policy.choice.DEFAULT_INFORMED_SLACK) instead when the
        round's published free times say some type is busy now (with every type free, as before any round
        or from a stale one, a burst spreads over the wider slack)."""
        return completion_choice(est, free_at, now, submit_slack(free_at, now, self.slack, self.informed_slack),
                                 self.free_slack, self.wait_factor)

    # ------------------------------------------------------------------ order
    def length(self, job: PendingJob, types: list[str] | set[str]) -> float:
        """The job's estimate on its fastest feasible type (its time limit or a default if none)."""
        est = job.est_runtime_s
        allowed = job.allowed_types
        if not allowed and est and isinstance(types, set) and types.issuperset(est):
            return min(est.values())          # every estimated type counts: the same values, in the same order
        best = min((v for t, v in est.items() if t in types and (not allowed or t in allowed)), default=None)
        return runtime_guess(job, self.unknown_runtime_s) if best is None else best

    def size(self, job: PendingJob, types: list[str] | set[str]) -> float:
        """The ordering key: the estimate on the job's fastest feasible type (LPT/SPT). Measured on
        static batches of non-reference models (6 types x 8 GPUs, 120 jobs, 6 seeds, no starvation
        guard): ordering by length gave msched/fifo 0.62, by GPU-seconds (length x GPUs) 0.71; wide jobs
        are protected anyway by the priorities following the planned starts."""
        return self.length(job, types)

    def order(self, snapshot: ClusterSnapshot) -> tuple[list[PendingJob], set[str]]:
        """Managed jobs in planned order, and the ids of the starving ones."""
        age = self.starvation_age_s if self.starvation_age_s is not None else snapshot.starvation_age_s
        types = snapshot.gpu_types
        managed = [j for j in snapshot.pending if j.managed]
        starving = starving_jobs(managed, snapshot.now, age)
        starving_ids = {j.job_id for j in starving}
        rest = [j for j in managed if j.job_id not in starving_ids]
        sign = -1.0 if self.objective == "makespan" else 1.0
        typeset = set(types)
        rest.sort(key=lambda j: (sign * self.size(j, typeset), *arrival_key(j)))
        return starving + rest, starving_ids

    # ------------------------------------------------------------------ plan
    def plan(self, snapshot: ClusterSnapshot) -> Plan:
        return self.with_drain(snapshot, self._greedy_plan)

    def _greedy_plan(self, snapshot: ClusterSnapshot) -> Plan:
        self._prune_pool(snapshot)
        order, starving = self.order(snapshot)
        return self.plan_for_order(snapshot, order, starving)

    def with_drain(self, snapshot: ClusterSnapshot, plan_of: Callable[[ClusterSnapshot], Plan]) -> Plan:
        """`plan_of(snapshot)`, planned again with the narrow jobs kept off the types whole-node jobs wait on
        when `drain_wide` is set and some type drains (`msched.policy.drain`)."""
        plan = plan_of(snapshot)
        if not self.drain_wide:
            return plan
        drained = drained_snapshot(snapshot, plan)
        if drained is None:
            return plan
        snap, drain = drained
        return drained_plan(plan if snap is None else plan_of(snap), drain, snapshot)

    def plan_for_order(self, snapshot: ClusterSnapshot, order: list[PendingJob], starving: set[str],
                       fixed: Mapping[str, str] | None = None) -> Plan:
        """Steps 1-3 for a given planned order of the managed jobs (`fixed`: job -> the one type to give it)."""
        placed, chosen, tl = self.construct(snapshot, order, starving, fixed)
        return self.plan_from(snapshot, order, starving, placed, chosen, tl)

    def construct(self, snapshot: ClusterSnapshot, order: list[PendingJob], starving: set[str],
                  fixed: Mapping[str, str] | None = None, relative: Mapping[str, float] | None = None,
                  timeline: Timeline | None = None, *, journal: list | None = None,
                  resume: tuple | None = None):  # noqa: ANN201 - (placed, chosen, Timeline)
        """Step 1-2: the queue as Slurm holds it, managed places filled in `order`; each job placed at its
        earliest start (managed ones on their earliest-completion type, or on `fixed[job]` when given and
        possible; `relative`: `type_demand` of the order when the caller has it; `timeline`: the snapshot's
        timeline, copied rather than rebuilt). Returns the placements, the chosen type constraints and the
        booked timeline.

        `journal`: a list this decode appends what it did to, one entry per job of the queue it walks
        (the job, its booking (type, nodes, GPUs per node: `Timeline.book`'s) or None, its runtime there, its
        `Placed`, its chosen constraint or None).
        `resume`: (journal, fixed) of an earlier decode of the same snapshot, starving set, `relative` and
        `timeline` (the optimizing planner's search): the longest prefix of this queue that it walked
        with the same job objects and the same fixed types is booked as it booked it (its placements
        committed, no start looked up or type chosen: each job's choice depends only on what was booked
        before it, on the job and on its fixed type), and the rest is decoded (`prefix_resume`)."""
        types = snapshot.gpu_types
        now = snapshot.now
        tl = timeline.copy() if timeline is not None else Timeline(now, snapshot.nodes, snapshot.running)
        if getattr(self, "_possible_of", None) is not snapshot:
            self._possible, self._possible_of = PossibleTypes(snapshot), snapshot
        if not self.reuse_per_queue:
            construct = construct_order(snapshot.pending, order)

            def entries(walk: list[PendingJob]) -> list[tuple]:
                return [_decode_entry(job, *self._candidates(job, types, starving, tl), starving, False)
                        for job in walk]
        else:
            memo = self._queue_memo(snapshot, starving)
            construct = memo.construct_order(order)
            entries = functools.partial(memo.entries, types=types, tl=tl)
        if relative is None:
            relative = type_demand(order, types) if self.affinity > 0 else {}
        chosen: dict[str, tuple[str, ...]] = {}
        placed: dict[str, Placed] = {}
        start_time = tl.start_time
        tops = tl._top                  # start_time's cache, read here first (the same answer, without a call)
        book = tl.book
        one_node = ONE_NODE_BOOKING
        reach = 1.0 + (self.affinity if self.affinity > 0 else 0.0)
        prune = self.prune_slow_types
        miss = NOT_CACHED
        lam = self.wait_weight
        walk = construct
        if resume is not None:
            q = _replay_prefix(resume, construct, fixed, tl, placed, chosen, journal)
            if q:
                walk = construct[q:]
        for job, (cand, runtime, by_completion, g, tg, jid, typed, given) in zip(walk, entries(walk), strict=True):
            best_t = None
            best_done = best_rt = best_s = 0.0
            want = fixed.get(jid) if fixed and by_completion else None
            # a type whose runtime alone ends the job past what the affinity rule still considers (no
            # start is before now) can neither be chosen nor change the choice: no need to find its start
            skip = by_completion and want is None and prune
            done: dict[str, float] = {}
            for t in cand:
                rt = runtime.get(t)
                if rt is None:
                    continue
                if skip and best_t is not None and rt > (best_done - now) * reach + 1e-9:
                    continue
                hit = tops[t].get(tg, miss)
                s0 = start_time(t, g) if hit is miss else None if hit is None else hit[0]
                if s0 is None:
                    continue
                d = s0 + rt
                if lam and by_completion:    # `wait_weight`: the planned wait counts 1 + lam times
                    d += lam * (s0 - now)
                done[t] = d
                if best_t is None:
                    better = True
                elif by_completion:      # earliest completion, then the faster type, then the name
                    better = d < best_done or (d == best_done and (rt, t) < (best_rt, best_t))
                else:                    # as Slurm does with an OR: earliest start
                    better = s0 < best_s or (s0 == best_s and (d, t) < (best_done, best_t))
                if better:
                    best_t, best_done, best_rt, best_s = t, d, rt, s0
            if best_t is None:
                if journal is not None:
                    journal.append((job, None, 0.0, None, None))
                continue
            if want is not None and want in done:
                best_t = want
            elif by_completion and self.affinity > 0 and len(done) > 1:
                best_t = self._affine(runtime, done, best_done, now, relative)
            rt = runtime[best_t]
            hit = tops[best_t][tg]
            if hit[1] >= 0 and one_node:
                # on one node: the node its cached start names is booked (as `commit(place(...))` books it)
                start = hit[0]
                booking = (best_t, (hit[1],), tg)
                book(best_t, booking[1], tg, start + rt)
            else:
                p = tl.place(best_t, g)
                start = p.start
                booking = (p.gpu_type, p.nodes, p.per_node)
                tl.commit(p, start + rt)
            at = placed[jid] = placed_at(best_t, start, start + rt)
            if typed:
                c = chosen[jid] = given if jid in starving else (best_t,)
            else:
                c = None
            if journal is not None:
                journal.append((job, booking, rt, at, c))
        return placed, chosen, tl

    def _queue_memo(self, snapshot: ClusterSnapshot, starving: set[str]) -> _QueueMemo:
        """What every decode of this queue shares (`reuse_per_queue`): kept while the plan's snapshot (the same
        object) and starving set (the same jobs) are the ones it was made for. The last two are kept: the
        optimizing planner decodes the whole queue, then its head (a snapshot of its own) and the whole
        queue again (`_whole`, with the search's starving set: equal, not the same object)."""
        memos = self.__dict__.setdefault("_memos", [])
        for memo in memos:
            if memo.snapshot is snapshot and (memo.starving is starving or memo.starving == starving):
                return memo
        memo = _QueueMemo(self, snapshot, starving, self._entry_pool(snapshot, starving))
        memos[:] = [memo, *memos[:1]]
        return memo

    def _entry_pool(self, snapshot: ClusterSnapshot, starving: set[str]) -> tuple[dict, dict] | None:
        """The per-job candidates and decode entries a `_QueueMemo` keeps, shared by the memos of every
        queue with the same context (`SHARE_ENTRIES`; None: off): a job's entry depends only on the job
        object (each kept with its job), the snapshot's types, the shapes of its nodes (`PossibleTypes`, whose
        answers are one dict while the shapes hold), whether the job starves, FASTEST_FIRST and the
        policy's own options. So one plan's decodes of the search's head, of the whole queue and of the
        tail after the head (the optimizing planner's snapshots of one queue) and the next round's of the
        jobs still queued find what an earlier one computed."""
        if not SHARE_ENTRIES:
            return None
        key = (tuple(snapshot.gpu_types), frozenset(starving), FASTEST_FIRST, getattr(self, "planner", None),
               self.slack, self.unknown_runtime_s)
        answers = self._possible._memo
        pool = getattr(self, "_pool", None)
        if pool is None or pool[0] is not answers or pool[1] != key:
            pool = self._pool = (answers, key, {}, {})
        elif len(pool[2]) > 4 * len(snapshot.pending) + 50_000:      # never for ever
            pool[2].clear()
            pool[3].clear()
        return pool[2], pool[3]

    def _prune_pool(self, snapshot: ClusterSnapshot) -> None:
        """At a round's plan: the shared entries (`_entry_pool`) of jobs no longer queued dropped, once they
        are as many again as the queue."""
        pool = getattr(self, "_pool", None)
        if pool is not None and len(pool[2]) + len(pool[3]) > 4 * len(snapshot.pending) + 256:
            ids = {j.job_id for j in snapshot.pending}
            for d in (pool[2], pool[3]):
                for jid in [k for k in d if k not in ids]:
                    del d[jid]

    def plan_from(self, snapshot: ClusterSnapshot, order: list[PendingJob], starving: set[str],
                  placed: Mapping[str, Placed], chosen: Mapping[str, tuple[str, ...]], tl: Timeline) -> Plan:
        """Step 3: priorities in order of planned start (starving first); Slurm then starts them in that
        order, so the constructed schedule is what Slurm will do with the queue."""
        rank = {j.job_id: k for k, j in enumerate(order)}
        inf = float("inf")
        # starving first, then by planned start, then in `order` (k: the sort's stability, made explicit)
        keys = sorted([(jid not in starving, p.start if (p := placed.get(jid)) is not None else inf, rank[jid], k)
                       for k, jid in enumerate([j.job_id for j in order])])
        prio_order = [order[key[3]] for key in keys]
        # plain jobs keep their rank (managed jobs permuted among the places they hold) unless the site
        # opted in to "managed jobs first" (README: Security model)
        plain = {j.job_id: j.priority for j in snapshot.pending if not j.managed}
        current = {j.job_id: j.priority for j in order}
        ids = [j.job_id for j in prio_order]
        prio = assign_keeping_plain(ids, current, plain, self.managed_first)
        # 3. the constructed schedule is what Slurm will do with a queue in planned-start order
        decisions = [decision_at(j.job_id, prio[j.job_id], chosen.get(j.job_id, ()),
                                 p.start if (p := placed.get(j.job_id)) else None, p.end if p else None,
                                 j.est_runtime_s) for j in prio_order]
        return self._plan(decisions, placed, tl, snapshot)

    def _affine(self, runtime, done: dict[str, float], best: float, now: float, relative: dict[str, float]) -> str:
        """Among the types that finish the job within `affinity` of the earliest completion (counted from
        now), the one where the job is relatively fastest compared with how fast that type is for the
        queue as a whole (comparative advantage): a job that runs as well on a slower type leaves the
        type that others need most to them."""
        horizon = now + (best - now) * (1.0 + self.affinity) + 1e-9
        pick = None
        pick_key = None
        for t, d in done.items():
            if d <= horizon:
                # runtime here over the queue's mean relative runtime here (the job's own fastest
                # runtime, a constant factor for the job, is left out of the comparison)
                key = (runtime[t] / relative.get(t, 1.0), d, t)
                if pick_key is None or key < pick_key:
                    pick, pick_key = t, key
        return pick

    def _candidates(self, job: PendingJob, types: list[str], starving: set[str], tl: Timeline):
        """Types the job may be placed on in construction, and its runtime on each. (The estimate's keys
        are iterated directly when nothing restricts them: types the cluster lacks never start.)"""
        if job.managed and not job.pinned_type:
            possible = self._possible(job)
            if not job.allowed_types and job.est_runtime_s and job.job_id not in starving \
                    and possible.issuperset(job.est_runtime_s):
                return job.est_runtime_s, job.est_runtime_s
            feas = feasible_types(job, types, self._possible)
            if feas:
                return feas, job.est_runtime_s
        t = default_types(job, tl)
        return t, as_is_runtime(job, t, self.unknown_runtime_s)



class _QueueMemo:
    """The parts of a decode that depend only on the queue (the snapshot's pending jobs and the starving
    set), not on the order being decoded: the unmanaged jobs and the managed places in Slurm's order
    (`construct_order`'s sorts) and each job's candidate types and runtimes (`_candidates`: the policy,
    the snapshot's types and shapes, the job and whether it starves; a timeline of the snapshot is only
    read for its types, which every copy shares). The optimizing planner decodes one queue tens of times
    per round; each decode then only merges and places."""

    def __init__(self, policy: MschedPolicy, snapshot: ClusterSnapshot, starving: set[str],
                 pool: tuple[dict, dict] | None = None):
        self.policy, self.snapshot, self.starving = policy, snapshot, starving
        self.plain = sorted((j for j in snapshot.pending if not j.managed), key=queue_key)
        self.slots = sorted((j for j in snapshot.pending if j.managed), key=arrival_key)
        self._pattern: list | None = None        # `construct_order`'s merge, once asked
        # job id -> (job, its candidates) and (job, its decode entry); shared with other memos of the same
        # context when `pool` is given (`MschedPolicy._entry_pool`)
        self._cand: dict[str, tuple]
        self._entry: dict[str, tuple]
        self._cand, self._entry = pool if pool is not None else ({}, {})

    def construct_order(self, order: Sequence[PendingJob]) -> list[PendingJob]:
        """`construct_order(snapshot.pending, order)` from the sorted lists kept: `fill_places`' merge, whose
        places depend on the queue only, kept as a pattern (the plain jobs, `_PLACE` where a managed job
        goes) that each order fills in one pass."""
        if len(order) < len(self.slots) or not KEEP_PLACES:
            return fill_places(self.plain, self.slots, order)
        if self._pattern is None:
            self._pattern = fill_places(self.plain, self.slots, [_PLACE] * len(self.slots))
        fill = iter(order).__next__
        return [fill() if j is _PLACE else j for j in self._pattern]

    def candidates(self, job: PendingJob, types: list[str], tl: Timeline) -> tuple:
        hit = self._cand.get(job.job_id)
        if hit is None or hit[0] is not job:
            hit = self._cand[job.job_id] = (job, self.policy._candidates(job, types, self.starving, tl))
        return hit[1]

    def entry(self, job: PendingJob, types: list[str], tl: Timeline) -> tuple:
        """`_decode_entry` of the job, kept for the queue's decodes (candidates fastest first: FASTEST_FIRST)."""
        hit = self._entry.get(job.job_id)
        if hit is None or hit[0] is not job:
            hit = self._entry[job.job_id] = (job, _decode_entry(job, *self.candidates(job, types, tl), self.starving,
                                                                FASTEST_FIRST))
        return hit[1]

    def entries(self, walk: Sequence[PendingJob], types: list[str], tl: Timeline) -> list[tuple]:
        """`entry` of each job of a decode's walk, in one pass (the kept ones read without a call each)."""
        get = self._entry.get
        return [hit[1] if (hit := get(job.job_id)) is not None and hit[0] is job else self.entry(job, types, tl)
                for job in walk]


class OraclePolicy(MschedPolicy):
    """msched's planner with perfect knowledge: the round is built with the truth estimator."""

    name = "oracle"
    estimator_kind = "truth"
