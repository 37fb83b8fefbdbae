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
FLOW_METHOD = "highs-ipm"   # lp_flow_bound's (HiGHS' interior point; its dual simplex takes as long on the bench traces)
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


def snapshot_running_bound(snapshot) -> float:  # noqa: ANN001
    """The running jobs' term of `snapshot_simple_bound` alone: the latest estimated end of a running job
    on a type with GPUs (now at the earliest). The simple bound, and so the LP bound, is never below it, so a
    test that the simple bound passes whenever a lower value does (the planner's `_cpsat_worth_it`) can try
    this first: a pass over the running jobs, without the pending jobs' feasible types and estimates."""
    cap = snapshot.gpus_total
    now = snapshot.now
    end = max((r.est_end for r in snapshot.running if r.num_gpus > 0 and cap.get(r.gpu_type, 0) > 0), default=now)
    return end if end > now else now


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


# ----------------------------------------------------------------------------- the sum of completion times
@dataclass(frozen=True)
class FlowBound:
    """A lower bound on the sum (and mean) of the jobs' flow times (end - release, a trace's JCT)."""

    total_flow_s: float                  # the LP bound on sum_j (C_j - r_j)
    mean_flow_s: float                   # total_flow_s over the jobs counted
    floor_s: float                       # sum_j of the fastest runtime (no wait, no contention), for comparison
    jobs: int
    intervals: int                       # intervals of the time grid (the last one open-ended)
    step_s: float                        # the fine grid's step (a given grid's widest interval)
    solved: bool                         # False: the LP failed and total_flow_s is the floor
    skipped: tuple[str, ...] = ()
    # per job, the LP's flow time C_j - r_j at its optimum (job id -> seconds; empty when not solved): where
    # the relaxation puts each job's share of the bound. Not a per-job bound (another optimum may shift flow
    # between jobs); it shows which jobs a schedule's excess over the bound sits on (BENCHMARKS.md, jct13)
    job_flow_s: Mapping[str, float] = field(default_factory=dict)
    job_types: Mapping[str, Mapping[str, float]] = field(default_factory=dict)   # per job, its work's share per type


def _flow_grid(usable: Sequence[BoundJob], origin: float, step_s: float | None, max_fine: int,
               growth: float) -> tuple[list[float], float]:
    """The interval starts: a uniform step from origin until well past the last release (the fine part),
    then steps growing by `growth` each, up to a horizon no schedule worth counting passes; the last
    interval, from the last start on, is open-ended (and has no capacity row)."""
    import statistics
    fastest = [min(j.runtime_s.values()) for j in usable]
    last_release = max(j.release for j in usable)
    median = statistics.median(fastest)
    fine_until = last_release + 10 * median
    if step_s is None:
        step_s = max(median / 4, (fine_until - origin) / max_fine, 1e-6)
    step_s = max(step_s, 1e-9)
    total = sum(j.num_gpus * min(j.runtime_s.values()) for j in usable)
    horizon = last_release + max(max(j.runtime_s.values()) for j in usable) + total
    grid = [origin]
    while grid[-1] < fine_until:
        grid.append(grid[-1] + step_s)
    step = step_s
    while grid[-1] < horizon:
        step *= 1 + growth
        grid.append(grid[-1] + step)
    return grid, step_s


def lp_flow_bound(jobs: Sequence[BoundJob], capacity: Mapping[str, int], *, origin: float | None = None,
                  busy: Sequence[Busy] = (), step_s: float | None = None, grid: Sequence[float] | None = None,
                  max_fine: int = 200, growth: float = 0.1, method: str = FLOW_METHOD) -> FlowBound:
    """A lower bound on the sum of flow times (end - release) of any schedule in which every job runs on
    one GPU type (preemptive or not, never two types at once), by an interval-indexed LP relaxation
    (Hall, Schulz, Shmoys & Wein's, with Goemans' mean busy time):

        intervals  I_k = [tau_k, tau_{k+1}), k < K, and I_K = [tau_K, inf) (no capacity row: dropped)
        variables  y[j,t,k] >= 0   the fraction of job j's work done on type t in I_k (only where the
                                   interval ends after the release r_j; L[j,k] = max(tau_k, r_j)), C_j
        minimise   sum_j C_j
        subject to sum_{t,k} y[j,t,k] = 1                                    every job runs
                   sum_j g_j p[j,t] y[j,t,k] <= G_t |I_k| - busy GPU-time    per type and interval
                   sum_t p[j,t] y[j,t,k] <= tau_{k+1} - L[j,k]                a job runs on one type at a
                                                                              time, after its release
                   C_j >= r_j + sum_{t,k} p[j,t] y[j,t,k]                    its runtime after its release
                   C_j >= sum_{t,k} y[j,t,k] (L[j,k] + p[j,t] / 2)           mean busy time + half its
                                                                              runtime, on its one type t

    A schedule gives a feasible point (y its work per interval, the type integral): a job's mean busy
    time is at least the weighted lower ends of the intervals it runs in, and its end is its mean busy
    time plus half its runtime (at least, when preempted). The grid's rounding loses at most one step per
    job delayed across an interval boundary; the per-node fit (wide jobs on one node) is dropped too.
    `grid` (interval starts, the first at origin) replaces the automatic one (`_flow_grid`: a fine step
    of a quarter of the median fastest runtime, at most `max_fine` steps to 10 medians past the last
    release, then growing by `growth`). Solved with HiGHS (scipy's linprog); the result is the bound on
    sum_j (C_j - r_j)."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    cap, usable, skipped, busy = _usable(jobs, capacity, busy)
    if origin is None:
        origin = min((j.release for j in usable), default=0.0)
    usable = [BoundJob(j.job_id, max(j.release, origin), j.num_gpus, j.runtime_s) for j in usable]
    floor = sum(min(j.runtime_s.values()) for j in usable)
    n = len(usable)
    if not n:
        return FlowBound(0.0, 0.0, 0.0, 0, 0, 0.0, True, tuple(skipped))
    if grid is None:
        tau, step = _flow_grid(usable, origin, step_s, max_fine, growth)
    else:
        tau = sorted(float(g) for g in grid)
        step = max((b - a for a, b in zip(tau[:-1], tau[1:], strict=True)), default=0.0)     # its widest closed interval
    scale = max([max(j.runtime_s.values()) for j in usable] + [tau[-1] - origin, 1.0])
    tau_s = (np.asarray(tau) - origin) / scale
    n_int = len(tau_s)                                    # interval k in [0, n_int): the last one open
    types = sorted(cap)
    tindex = {t: i for i, t in enumerate(types)}
    length = np.diff(tau_s)
    cap_rhs = np.zeros((len(types), n_int - 1))
    for t in types:
        cap_rhs[tindex[t]] = cap[t] * length
    for b in busy:
        until = (b.until - origin) / scale
        cap_rhs[tindex[b.gpu_type]] -= b.num_gpus * np.clip(np.minimum(tau_s[1:], until) - tau_s[:-1], 0, None)
    cap_rhs = np.clip(cap_rhs, 0, None)

    # variables: y blocks per job (types x its intervals), then C_j
    ub_r: list = []
    ub_c: list = []
    ub_v: list = []
    ub_b: list = []
    eq_r: list = []
    eq_c: list = []
    col = 0
    row = 0
    y_cols_per_job = []
    spans = []
    for jn, j in enumerate(usable):
        r = (j.release - origin) / scale
        k0 = max(0, int(np.searchsorted(tau_s, r, side="right")) - 1)
        ks = np.arange(k0, n_int)
        lower = np.maximum(tau_s[ks], r)
        jtypes = sorted(j.runtime_s)
        m = len(ks)
        p = np.array([j.runtime_s[t] / scale for t in jtypes])
        cols = col + np.arange(len(jtypes) * m).reshape(len(jtypes), m)
        col += len(jtypes) * m
        y_cols_per_job.append((jn, jtypes, ks, cols, p, lower, r))
        spans.append(m)
    n_y = col
    c_base = n_y
    n_var = n_y + n
    for jn, jtypes, ks, cols, p, lower, r in y_cols_per_job:
        # every job runs
        eq_r.append(np.full(cols.size, jn))
        eq_c.append(cols.ravel())
        # a job on one type at a time, within each closed interval after its release
        closed = ks < n_int - 1
        nk = int(closed.sum())
        if nk:
            rows = row + np.arange(nk)
            ub_r.append(np.tile(rows, len(jtypes)))
            ub_c.append(cols[:, closed].ravel())
            ub_v.append(np.repeat(p, nk))
            ub_b.append(tau_s[ks[closed] + 1] - lower[closed])
            row += nk
        # C_j >= r_j + sum p y
        ub_r.append(np.full(cols.size + 1, row))
        ub_c.append(np.append(cols.ravel(), c_base + jn))
        ub_v.append(np.append(np.repeat(p, len(ks)), -1.0))
        ub_b.append(np.array([-r]))
        row += 1
        # C_j >= sum y (L + p / 2)
        ub_r.append(np.full(cols.size + 1, row))
        ub_c.append(np.append(cols.ravel(), c_base + jn))
        ub_v.append(np.append((lower[None, :] + p[:, None] / 2).ravel(), -1.0))
        ub_b.append(np.array([0.0]))
        row += 1
    # capacity per type and closed interval
    cap_row0 = row
    for jn, jtypes, ks, cols, p, _lower, _r in y_cols_per_job:
        closed = ks < n_int - 1
        g = usable[jn].num_gpus
        for i, t in enumerate(jtypes):
            ub_r.append(cap_row0 + tindex[t] * (n_int - 1) + ks[closed])
            ub_c.append(cols[i, closed])
            ub_v.append(np.full(int(closed.sum()), g * p[i]))
    row = cap_row0 + len(types) * (n_int - 1)
    ub_b.append(cap_rhs.ravel())
    a_ub = coo_matrix((np.concatenate(ub_v), (np.concatenate(ub_r), np.concatenate(ub_c))),
                      shape=(row, n_var)).tocsr()
    er, ec = np.concatenate(eq_r), np.concatenate(eq_c)
    a_eq = coo_matrix((np.ones(er.size), (er, ec)), shape=(n, n_var)).tocsr()
    cost = np.zeros(n_var)
    cost[c_base:] = 1.0
    try:
        res = linprog(cost, A_ub=a_ub, b_ub=np.concatenate(ub_b), A_eq=a_eq, b_eq=np.ones(n),
                      bounds=(0, None), method=method)
    except (ValueError, MemoryError) as exc:          # pragma: no cover - solver refused the model
        log.warning("LP flow bound failed (%s); using the floor", exc)
        return FlowBound(floor, floor / n, floor, n, n_int, step, False, tuple(skipped))
    if res.status != 0 or res.x is None:
        log.warning("LP flow bound not solved (%s); using the floor", res.message)
        return FlowBound(floor, floor / n, floor, n, n_int, step, False, tuple(skipped))
    total_end = float(res.fun) * scale
    total_flow = total_end - sum(j.release - origin for j in usable)
    total_flow = max(total_flow * (1 - 1e-7), floor * (1 - 1e-9))
    job_flow = {j.job_id: float(res.x[c_base + jn]) * scale - (j.release - origin) for jn, j in enumerate(usable)}
    shares = {usable[jn].job_id: {t: float(res.x[cols[i]].sum()) for i, t in enumerate(jtypes)}
              for jn, jtypes, _ks, cols, _p, _lower, _r in y_cols_per_job}
    return FlowBound(total_flow, total_flow / n, floor, n, n_int, step, True, tuple(skipped), job_flow, shares)
