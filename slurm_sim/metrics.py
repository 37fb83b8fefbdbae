"""Metrics of one simulated run (DESIGN's `msched sim` JSON) and a lower bound on the makespan.

- makespan_s: last end minus first submit; mean_jct_s / p99_jct_s: end minus submit (p99 by the
  nearest-rank method: the ceil(0.99 n)-th smallest); mean_wait_s: start minus submit;
  gpu_utilization: busy GPU-seconds / (all GPUs x makespan); longest_job_s: the longest run (end minus
  start): a makespan close to it says one job, not the schedule, decided the result.
- lower_bound_s: no schedule can finish sooner, whatever the policy: the LP relaxation over GPU types
  of `msched.policy.bound` (each job fractionally assigned to the types that can hold it and have a
  truth row, its runtime there capped at its time limit, where Slurm would kill it; per-type capacity
  after every release time; every job no shorter than its runtime). It dominates the simple bound (the
  longest job at its best type; all work submitted from t on over all GPUs), which is printed beside it
  as `simple_lower_bound_s`. Both ignore queueing order and non-preemption, so they are rarely reached.
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
    writes: int = 0            # Slurm updates msched made to the job over its life (churn)
    nodes: tuple[str, ...] = ()   # the nodes it ran on (bench_packing --wide: when a node of a type was whole)


ENDED_OK = ("COMPLETED", "TIMEOUT")      # a job that ran to its end or to its limit; CANCELLED is not finished


def percentile_nearest_rank(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = max(1, math.ceil(q / 100.0 * len(s)))
    return s[k - 1]


def true_runtimes(job: TraceJob, truth: PerfTable, cluster: ClusterSpec) -> dict[str, float]:
    """A job's true runtime on each type that can hold it (its pin, size and partitions) and has a truth row
    (capped at its time limit)."""
    from slurm_sim.trace import candidate_types
    out: dict[str, float] = {}
    for t in candidate_types(job, cluster):
        ms = truth.iter_ms(job.model, t, job.num_gpus, job.batch_size)
        if ms is None:
            continue
        r = job.iterations * ms / 1000.0
        out[t] = min(r, job.time_limit_s) if job.time_limit_s else r
    return out


def trace_bound(trace: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec):  # noqa: ANN201
    """The LP bound (`msched.policy.bound.LowerBound`) of a trace on a cluster, from the first submit."""
    from msched.policy.bound import BoundJob, lp_lower_bound
    jobs = [BoundJob(j.job_id, j.submit_time, j.num_gpus, true_runtimes(j, truth, cluster)) for j in trace]
    return lp_lower_bound(jobs, cluster.gpus_total)


def trace_flow_bound(trace: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec,  # noqa: ANN201
                     step_s: float | None = None):
    """The LP bound on the sum and mean of the trace's JCTs (`msched.policy.bound.FlowBound`): no schedule
    that runs each job on one type (Slurm's, preemptive or not) has a smaller mean JCT. `step_s`: the
    grid's fine step (None: lp_flow_bound's automatic one, at most 200 steps; a finer one is tighter and
    slower)."""
    from msched.policy.bound import BoundJob, lp_flow_bound
    jobs = [BoundJob(j.job_id, j.submit_time, j.num_gpus, true_runtimes(j, truth, cluster)) for j in trace]
    if step_s is None:
        return lp_flow_bound(jobs, cluster.gpus_total)
    return lp_flow_bound(jobs, cluster.gpus_total, step_s=step_s, max_fine=10**6)


def jct_floor(trace: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec) -> float:
    """A lower bound on the mean JCT: every job starts at its submission on its fastest type (no wait, no
    contention), so its JCT is at least its shortest true runtime. Exact only on an idle cluster; loose
    where the fast types are few (the bench's Alibaba cluster: 32 of 256 GPUs are a100 or titanv)."""
    rts = [min(rt.values()) for rt in (true_runtimes(j, truth, cluster) for j in trace) if rt]
    return sum(rts) / len(rts) if rts else 0.0


def lower_bound(trace: Sequence[TraceJob], truth: PerfTable, cluster: ClusterSpec) -> float:
    """No schedule of the trace ends sooner than this after its first submit (the LP bound)."""
    if not trace:
        return 0.0
    return trace_bound(trace, truth, cluster).value_s


def summarize(policy: str, outcomes: Sequence[JobOutcome], total_gpus: int, lb: float,
              submitted: int | None = None, simple_lb: float | None = None) -> dict:
    """DESIGN's per-policy result object. Every metric counts every submitted job: a job that never ended
    (or was never accepted: `submitted` > len(outcomes)) has no end time, so when any job is unfinished
    the makespan and JCTs are None (unknown, not the smaller figure of the jobs that did finish) and the
    ratios are None too. `submitted`, `finished`, `unfinished` are always there."""
    submitted = len(outcomes) if submitted is None else submitted
    done = [o for o in outcomes if o.end is not None and o.start is not None and o.state in ENDED_OK]
    unfinished = submitted - len(done)
    out = {"policy": policy, "jobs": submitted, "submitted": submitted, "finished": len(done),
           "unfinished": unfinished, "timeouts": sum(1 for o in done if o.state == "TIMEOUT"),
           "lower_bound_s": lb, "simple_lower_bound_s": lb if simple_lb is None else simple_lb}
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
        "longest_job_s": max((o.end - o.start for o in done), default=0.0),
        "mean_jct_s": sum(jct) / len(jct) if jct else 0.0,
        "p99_jct_s": percentile_nearest_rank(jct, 99),
        "mean_wait_s": sum(wait) / len(wait) if wait else 0.0,
        "gpu_utilization": busy / (total_gpus * makespan) if makespan > 0 and total_gpus else 0.0,
        "ratio_to_lower_bound": makespan / lb if lb > 0 else None,
        "writes_per_job": sum(o.writes for o in outcomes) / len(outcomes),
        "max_writes_per_job": max(o.writes for o in outcomes),
    })
    return out
