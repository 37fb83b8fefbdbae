"""The one lower bound on the makespan: the LP relaxation over GPU types (issue 15 point 6).

Why an LP: the simple bound (longest job at its best type; all work after each release over all GPUs)
lets every job use every GPU at its fastest speed. On a cluster of several types that is far from true:
a job that only a100 can hold still has to queue on the a100s, and work moved to a slower type costs
more GPU-seconds there. The relaxation keeps what no schedule can escape and drops only integrality and
non-preemption:

    variables  x[j,t] >= 0   fraction of job j run on type t (t: types that can hold j's shape and have
                             a runtime p[j,t] for it), C the makespan's end
    minimise   C
    subject to sum_t x[j,t] = 1                                          every job runs
               C >= r_j + sum_t p[j,t] x[j,t]                            a job ends no sooner than its
                                                                         release plus its runtime (at least
                                                                         its fastest one)
               sum_{j: r_j >= r} g_j p[j,t] x[j,t] <= G_t (C - r)        per type t and release time r:
                                                                         work released from r on fits in
                                                                         the type's GPUs between r and C

`G_t` is the GPU count of type t; GPUs held by running jobs are work released at `origin` pinned to
their type (and C is no earlier than their ends). Any schedule Slurm can produce gives a feasible
point (x integral), so C - origin bounds every policy's makespan from below. It dominates the simple
bound: summing the capacity rows over the types gives the total-work term and the runtime row gives the
longest-job term. The release rows are written with suffix sums (one helper variable per type and
release time) so the matrix stays linear in the number of jobs; above `max_releases` distinct release
times only that many (evenly spread) are kept, which drops constraints and so stays a valid bound.

Solved with HiGHS through `scipy.optimize.linprog(method="highs")`. The fractional assignment is
returned too: the planner uses it to choose GPU types.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MAX_RELEASES = 256
LP_METHOD = "highs"
SIMPLE_FAST = True          # snapshot_simple_bound summed without the instance's objects; off: through simple_bound
                            # (tests/test_fast_paths.py)


@dataclass(frozen=True)
class BoundJob:
    """One job as the bound sees it: when it may start, how wide, its runtime on each type that can hold it."""

    job_id: str
    release: float
    num_gpus: int
    runtime_s: Mapping[str, float]        # only types whose nodes hold the job's shape (and that have data)


@dataclass(frozen=True)
class Busy:
    """GPUs of one type held until `until` (running jobs, in a snapshot)."""

    gpu_type: str
    num_gpus: int
    until: float


@dataclass(frozen=True)
class LowerBound:
    value_s: float                       # the LP bound on (last end - origin)
    simple_s: float                      # the simple bound on the same instance (for comparison)
    origin: float
    solved: bool                         # False: the LP failed and value_s is the simple bound
    assignment: dict[str, dict[str, float]] = field(default_factory=dict)   # job -> type -> fraction
    skipped: tuple[str, ...] = ()        # jobs with no type that can run them (left out of both bounds)


def simple_bound(jobs: Sequence[BoundJob], capacity: Mapping[str, int], origin: float,
                 busy: Sequence[Busy] = ()) -> float:
    """max(longest job at its best type after its release, work released from r on over all GPUs)."""
    total = sum(capacity.values())
    lb = max((b.until - origin for b in busy), default=0.0)
    items = []
    for j in jobs:
        if not j.runtime_s:
            continue
        r = min(j.runtime_s.values())
        lb = max(lb, j.release - origin + r)
        items.append((max(j.release, origin), j.num_gpus * r))
    items += [(origin, b.num_gpus * max(0.0, b.until - origin)) for b in busy]
    if not total:
        return lb
    items.sort()
    suffix = 0.0
    for k in range(len(items) - 1, -1, -1):
        suffix += items[k][1]
        if k == 0 or items[k - 1][0] != items[k][0]:
            lb = max(lb, items[k][0] - origin + suffix / total)
    return lb


def _usable(jobs: Sequence[BoundJob], capacity: Mapping[str, int], busy: Sequence[Busy]):  # noqa: ANN202
    """(capacity of the types with GPUs, the jobs some type can run with only those types, the ids of
    the others, the busy GPUs of those types)."""
    cap = {t: int(g) for t, g in capacity.items() if g > 0}
    usable, skipped = [], []
    for j in jobs:
        rt = {t: float(p) for t, p in j.runtime_s.items() if t in cap and j.num_gpus <= cap[t] and p >= 0}
        if rt:
            usable.append(BoundJob(j.job_id, float(j.release), max(1, int(j.num_gpus)), rt))
        else:
            skipped.append(j.job_id)
    return cap, usable, skipped, [b for b in busy if b.gpu_type in cap and b.num_gpus > 0]


def lp_lower_bound(jobs: Sequence[BoundJob], capacity: Mapping[str, int], *, origin: float | None = None,
                   busy: Sequence[Busy] = (), max_releases: int = MAX_RELEASES) -> LowerBound:
    """The LP bound on the makespan (last end - origin; origin defaults to the first release).
    Jobs with no usable type (no runtime on any type with GPUs, or wider than every type) are skipped."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    cap, usable, skipped, busy = _usable(jobs, capacity, busy)
    if origin is None:
        origin = min((j.release for j in usable), default=0.0)
    simple = simple_bound(usable, cap, origin, busy)
    if not usable:
        return LowerBound(simple, simple, origin, True, {}, tuple(skipped))

    # scale times to ~1 for HiGHS' tolerances
    scale = max([max(j.runtime_s.values()) for j in usable] + [abs(j.release - origin) for j in usable]
                + [b.until - origin for b in busy] + [1.0])
    types = sorted(cap)
    tindex = {t: k for k, t in enumerate(types)}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    # variables: x (one per job-type pair), C, then S[t, k] suffix sums
    pairs: list[tuple[int, str]] = []
    for jn, j in enumerate(usable):
        for t in sorted(j.runtime_s):
            pairs.append((jn, t))
    n_x = len(pairs)
    c_var = n_x
    rel = sorted({max(0.0, (j.release - origin) / scale) for j in usable} | {0.0})
    if len(rel) > max_releases:
        step = (len(rel) - 1) / (max_releases - 1)
        rel = sorted({rel[round(k * step)] for k in range(max_releases)})
    n_k = len(rel)
    s_base = c_var + 1

    def s_var(t: str, k: int) -> int:
        return s_base + tindex[t] * n_k + k

    n_var = s_base + len(types) * n_k

    # equality rows: sum_t x[j,t] = 1; S[t,k] - S[t,k+1] - sum_{j in bucket k} g p x = busy work in bucket k
    eq_r: list[int] = []
    eq_c: list[int] = []
    eq_v: list[float] = []
    eq_b: list[float] = [1.0] * len(usable)
    for v, (jn, _t) in enumerate(pairs):
        eq_r.append(jn)
        eq_c.append(v)
        eq_v.append(1.0)
    row0 = len(usable)
    bucket_busy = np.zeros((len(types), n_k))
    for b in busy:
        bucket_busy[tindex[b.gpu_type], 0] += b.num_gpus * max(0.0, b.until - origin) / scale
    for t in types:
        for k in range(n_k):
            r = row0 + tindex[t] * n_k + k
            eq_r.append(r)
            eq_c.append(s_var(t, k))
            eq_v.append(1.0)
            if k + 1 < n_k:
                eq_r.append(r)
                eq_c.append(s_var(t, k + 1))
                eq_v.append(-1.0)
            eq_b.append(bucket_busy[tindex[t], k])
    for v, (jn, t) in enumerate(pairs):
        j = usable[jn]
        k = bisect.bisect_right(rel, max(0.0, (j.release - origin) / scale) + 1e-12) - 1
        eq_r.append(row0 + tindex[t] * n_k + max(0, k))
        eq_c.append(v)
        eq_v.append(-j.num_gpus * j.runtime_s[t] / scale)
    n_eq = row0 + len(types) * n_k

    # inequality rows: r_j + sum_t p x - C <= 0 ; S[t,k] - G_t C <= -G_t r_k ; busy ends <= C
    ub_b: list[float] = []
    for v, (jn, t) in enumerate(pairs):
        rows.append(jn)
        cols.append(v)
        vals.append(usable[jn].runtime_s[t] / scale)
    for jn, j in enumerate(usable):
        rows.append(jn)
        cols.append(c_var)
        vals.append(-1.0)
        ub_b.append(-(j.release - origin) / scale)
    row = len(usable)
    for t in types:
        for k in range(n_k):
            rows += [row, row]
            cols += [s_var(t, k), c_var]
            vals += [1.0, -float(cap[t])]
            ub_b.append(-cap[t] * rel[k])
            row += 1
    ends = max((b.until - origin for b in busy), default=0.0) / scale
    cost = np.zeros(n_var)
    cost[c_var] = 1.0
    bounds = [(0, None)] * n_var
    bounds[c_var] = (max(0.0, ends), None)
    a_ub = coo_matrix((vals, (rows, cols)), shape=(row, n_var)).tocsr()
    a_eq = coo_matrix((eq_v, (eq_r, eq_c)), shape=(n_eq, n_var)).tocsr()
    try:
        res = linprog(cost, A_ub=a_ub, b_ub=np.array(ub_b), A_eq=a_eq, b_eq=np.array(eq_b), bounds=bounds,
                      method=LP_METHOD)
    except (ValueError, MemoryError) as exc:          # pragma: no cover - solver refused the model
        log.warning("LP lower bound failed (%s); using the simple bound", exc)
        return LowerBound(simple, simple, origin, False, {}, tuple(skipped))
    if res.status != 0 or res.x is None:
        log.warning("LP lower bound not solved (%s); using the simple bound", res.message)
        return LowerBound(simple, simple, origin, False, {}, tuple(skipped))
    # HiGHS' dual bound is what is proven; the primal value is within its tolerance of it
    value = float(res.x[c_var]) * scale
    value = max(value * (1 - 1e-7), simple)
    assignment: dict[str, dict[str, float]] = {}
    for v, (jn, t) in enumerate(pairs):
        f = float(res.x[v])
        if f > 1e-9:
            assignment.setdefault(usable[jn].job_id, {})[t] = f
    return LowerBound(value, simple, origin, True, assignment, tuple(skipped))


def snapshot_lower_bound(snapshot, default_runtime_s: float | None = None) -> LowerBound:  # noqa: ANN001
    """The bound for a policy snapshot (msched.policy.snapshot.ClusterSnapshot): pending jobs with their
    estimated runtimes per feasible type (released now), running jobs holding their GPUs until their
    estimated end. A pending job with no estimate counts with `default_runtime_s` on every type it may
    use (its time limit when it has one), or is left out when that is None."""
    jobs, cap, busy = _snapshot_instance(snapshot, default_runtime_s)
    return lp_lower_bound(jobs, cap, origin=snapshot.now, busy=busy)


def snapshot_simple_bound(snapshot, default_runtime_s: float | None = None) -> float:  # noqa: ANN001
    """The simple bound of the same instance as `snapshot_lower_bound` (no LP: far cheaper, weaker),
    as the last end's earliest time (origin `now` added)."""
    if not SIMPLE_FAST:
        jobs, cap, busy = _snapshot_instance(snapshot, default_runtime_s)
        cap, usable, _, busy = _usable(jobs, cap, busy)
        return snapshot.now + simple_bound(usable, cap, snapshot.now, busy)
    # `simple_bound` of that instance without its objects: every job and busy GPU is released at now (the
    # origin), so its one release point sums all the work, summed as it sums it (largest last)
    now = snapshot.now
    jobs, cap, _ = _snapshot_instance(snapshot, default_runtime_s, with_busy=False)
    cap, usable, _, _ = _usable(jobs, cap, ())
    total = sum(cap.values())
    lb = 0.0
    works = []
    for r in snapshot.running:
        g = r.num_gpus
        if g > 0 and r.gpu_type in cap:
            until = r.est_end if r.est_end > now else now
            lb = max(lb, until - now)
            works.append(g * max(0.0, until - now))
    for j in usable:
        rt = min(j.runtime_s.values())
        lb = max(lb, j.release - now + rt)
        works.append(j.num_gpus * rt)
    if total and works:
        works.sort()
        suffix = 0.0
        for w in reversed(works):
            suffix += w
        lb = max(lb, now - now + suffix / total)
    return now + lb


def _snapshot_instance(snapshot, default_runtime_s: float | None, with_busy: bool = True):  # noqa: ANN001, ANN202
    from msched.policy.base import PossibleTypes, feasible_types, runtime_guess

    now = snapshot.now
    cap = snapshot.gpus_total
    types = snapshot.gpu_types
    possible = PossibleTypes(snapshot)
    jobs = []
    for p in snapshot.pending:
        feas = feasible_types(p, types, possible)
        rt = {t: p.est_runtime_s[t] for t in feas}
        if not rt and (default_runtime_s is not None or p.time_limit_s):
            guess = runtime_guess(p, default_runtime_s or 0.0)
            rt = {t: guess for t in (p.allowed_types or types) if t in cap and t in possible(p)}
        jobs.append(BoundJob(p.job_id, now, p.num_gpus, rt))
    busy = [Busy(r.gpu_type, r.num_gpus, max(now, r.est_end)) for r in snapshot.running] if with_busy else []
    return jobs, cap, busy
