"""Metrics of one simulated run (DESIGN's `msched sim` JSON) and a lower bound on the makespan.

- makespan_s: last end minus first submit; mean_jct_s / p99_jct_s: end minus submit (p99 by the
  nearest-rank method: the ceil(0.99 n)-th smallest); mean_wait_s: start minus submit;
  gpu_utilization: busy GPU-seconds / (all GPUs x makespan).
- lower_bound_s: no schedule can finish sooner, whatever the policy. With r_j = job j's shortest true
  runtime over the GPU types that can hold it (its data, its pin, its size; capped at its time limit,
  where Slurm would kill it), g_j its GPUs, s_j its submit time, s_0 the first submit, G all GPUs:

      LB = max( max_j (s_j - s_0 + r_j),                                  # no job ends before that
                max_t (t - s_0 + sum_{j: s_j >= t} g_j r_j / G) )         # work submitted from t on

  The second term holds because jobs submitted at or after t occupy at least g_j r_j GPU-seconds after
  t, and at most G GPUs run at once; t = s_0 gives the classic total-work bound. Both terms ignore
  queueing and fragmentation, so the bound is valid but rarely reached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from msched.estimate.perf_table import PerfTable
from slurm_sim.cluster import ClusterSpec
from slurm_sim.trace import TraceJob


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    policy: str
    gpu_type: str | None
    submit: float
    start: float | None
    end: float | None
    num_gpus: int
    state: str
    model: str = ""


ENDED_OK = ("COMPLETED", "TIMEOUT")      # a job that ran to its end or to its limit; CANCELLED is not finished


def percentile_nearest_rank(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = max(1, math.ceil(q / 100.0 * len(s)))
    return s[k - 1]


def best_runtime(job: TraceJob, truth: PerfTable, cluster: ClusterSpec) -> float | None:
    """Shortest true runtime of a job on any type that can hold it (capped at its time limit)."""
    types = [job.gpu_type] if job.gpu_type else cluster.gpu_types
    best = None
    for t in types:
        if not cluster.fits(t, job.num_gpus):
            continue
        ms = truth.iter_ms(job.model, t, job.num_gpus, job.batch_size)
        if ms is None:
            continue
        r = job.iterations * ms / 1000.0
        best = r if best is None else min(best, r)
    if best is not None and job.time_limit_s:
        best = min(best, job.time_limit_s)
    return best


def lower_bound(trace: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec) -> float:
    if not trace:
        return 0.0
    s0 = min(j.submit_time for j in trace)
    G = cluster.total_gpus
    items = []
    lb_single = 0.0
    for j in trace:
        r = best_runtime(j, truth, cluster)
        if r is None:
            continue
        lb_single = max(lb_single, j.submit_time - s0 + r)
        items.append((j.submit_time, j.num_gpus * r))
    items.sort()
    lb_work = 0.0
    suffix = 0.0
    for k in range(len(items) - 1, -1, -1):
        suffix += items[k][1]
        if k == 0 or items[k - 1][0] != items[k][0]:
            lb_work = max(lb_work, items[k][0] - s0 + suffix / G)
    return max(lb_single, lb_work)


def summarize(policy: str, outcomes: Sequence[JobOutcome], total_gpus: int, lb: float,
              submitted: int | None = None) -> dict:
    """DESIGN's per-policy result object. Every metric counts every submitted job: a job that never ended
    (or was never accepted: `submitted` > len(outcomes)) has no end time, so when any job is unfinished
    the makespan and JCTs are None (unknown, not the smaller figure of the jobs that did finish) and the
    ratios are None too. `submitted`, `finished`, `unfinished` are always there."""
    submitted = len(outcomes) if submitted is None else submitted
    done = [o for o in outcomes if o.end is not None and o.start is not None and o.state in ENDED_OK]
    unfinished = submitted - len(done)
    out = {"policy": policy, "jobs": submitted, "submitted": submitted, "finished": len(done),
           "unfinished": unfinished, "timeouts": sum(1 for o in done if o.state == "TIMEOUT"),
           "lower_bound_s": lb}
    if not outcomes or unfinished:
        out.update({"makespan_s": None, "mean_jct_s": None, "p99_jct_s": None, "mean_wait_s": None,
                    "gpu_utilization": None, "ratio_to_lower_bound": None})
        return out
    first = min(o.submit for o in outcomes)
    last = max((o.end for o in done), default=first)
    makespan = last - first
    jct = [o.end - o.submit for o in done]
    wait = [o.start - o.submit for o in done]
    busy = sum((o.end - o.start) * o.num_gpus for o in done)
    out.update({
        "makespan_s": makespan,
        "mean_jct_s": sum(jct) / len(jct) if jct else 0.0,
        "p99_jct_s": percentile_nearest_rank(jct, 99),
        "mean_wait_s": sum(wait) / len(wait) if wait else 0.0,
        "gpu_utilization": busy / (total_gpus * makespan) if makespan > 0 and total_gpus else 0.0,
        "ratio_to_lower_bound": makespan / lb if lb > 0 else None,
    })
    return out
