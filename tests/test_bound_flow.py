"""The lower bound on the sum of flow times (msched.policy.bound.lp_flow_bound): instances worked by hand,
and validity against the exact optimum of tiny instances found by enumeration."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msched.policy.bound import BoundJob, Busy, lp_flow_bound


def grid(step: float, until: float) -> list[float]:
    return [k * step for k in range(int(round(until / step)) + 1)]


def best_sum_of_flows(jobs: list[BoundJob], capacity: dict[str, int]) -> float:
    """The exact optimum for one-GPU jobs on single-GPU types, non-preemptive: every assignment of jobs
    to types and every order on each type, each job started as early as its order allows (for a fixed
    order per GPU, the earliest starts minimise every end at once)."""
    types = [t for t, g in capacity.items() for _ in range(g)]
    best = float("inf")
    for assign in itertools.product(range(len(types)), repeat=len(jobs)):
        if any(types[m] not in j.runtime_s for j, m in zip(jobs, assign, strict=True)):
            continue
        total = 0.0
        for m in range(len(types)):
            mine = [j for j, a in zip(jobs, assign, strict=True) if a == m]
            best_m = float("inf")
            for order in itertools.permutations(mine):
                t = 0.0
                s = 0.0
                for j in order:
                    t = max(t, j.release) + j.runtime_s[types[m]]
                    s += t - j.release
                best_m = min(best_m, s)
            total += best_m if mine else 0.0
        best = min(best, total)
    return best


def test_one_gpu_two_jobs_converges_to_shortest_first():
    """One GPU, jobs of 1 s and 2 s at t=0: the optimum runs the short one first, flows 1 + 3 = 4. On a
    grid of step d, an interval assignment within capacity orders into a preemptive schedule whose
    pieces sit at most d above their interval's start, and a job's end is at least its mean busy time
    plus half its runtime; the preemptive optimum of that sum is the shortest-first one (0.5 + 0.5) + (2 +
    1) = 4, so the LP is within 2 d of 4 and no more than 4."""
    jobs = [BoundJob("1", 0, 1, {"a": 1}), BoundJob("2", 0, 1, {"a": 2})]
    for step in (0.5, 0.1):
        b = lp_flow_bound(jobs, {"a": 1}, grid=grid(step, 4))
        assert b.solved
        assert (4 - 2 * step) * (1 - 1e-6) <= b.total_flow_s <= 4 + 1e-6
        assert b.mean_flow_s == pytest.approx(b.total_flow_s / 2)
    assert b.floor_s == pytest.approx(3)           # no contention: 1 + 2


def test_two_types_three_jobs_worked_by_hand():
    """a fast and b slow, one GPU each. Jobs 1 and 2 take 1 s on a and 3 s on b, job 3 takes 2 s on
    either. Every schedule: job 3 on b (ends at 2), 1 and 2 on a (1 and 2) gives 5; putting 1 or 2 on b
    costs 3 there, and job 3 on a delays them: the optimum is 5 (the enumeration agrees). The floor (every
    job at once on its fastest type) is 1 + 1 + 2 = 4, short of it by the a GPU's contention; the bound
    lies between the two, above the floor."""
    jobs = [BoundJob("1", 0, 1, {"a": 1, "b": 3}), BoundJob("2", 0, 1, {"a": 1, "b": 3}),
            BoundJob("3", 0, 1, {"a": 2, "b": 2})]
    cap = {"a": 1, "b": 1}
    assert best_sum_of_flows(jobs, cap) == pytest.approx(5)
    b = lp_flow_bound(jobs, cap, grid=grid(0.05, 8))
    assert b.floor_s == pytest.approx(4)
    assert 4 + 0.1 < b.total_flow_s <= 5 + 1e-6
    # the automatic grid (a quarter of the median fastest runtime) is valid too
    assert b.floor_s <= lp_flow_bound(jobs, cap).total_flow_s <= 5 + 1e-6


def test_per_job_flows_and_type_shares_add_up():
    """The LP's per-job flows (`job_flow_s`) add up to its total (less the 1e-7 safety margin) and each
    job's type shares (`job_types`) to 1; one job on one type, released at 5 on a free GPU: flow 1, all
    of it on a. On the three-job instance above each job's flow is at least its fastest runtime."""
    jobs = [BoundJob("1", 0, 1, {"a": 1, "b": 3}), BoundJob("2", 0, 1, {"a": 1, "b": 3}),
            BoundJob("3", 0, 1, {"a": 2, "b": 2})]
    b = lp_flow_bound(jobs, {"a": 1, "b": 1}, grid=grid(0.05, 8))
    assert sum(b.job_flow_s.values()) == pytest.approx(b.total_flow_s, rel=1e-6)
    for j in jobs:
        assert sum(b.job_types[j.job_id].values()) == pytest.approx(1, abs=1e-6)
        assert b.job_flow_s[j.job_id] >= min(j.runtime_s.values()) - 1e-6
    late = lp_flow_bound([BoundJob("1", 5, 1, {"a": 1})], {"a": 1}, origin=0, grid=grid(0.1, 20))
    assert late.job_flow_s["1"] == pytest.approx(1, abs=1e-6)
    assert late.job_types["1"] == {"a": pytest.approx(1, abs=1e-6)}


def test_busy_gpus_and_release_dates():
    """One GPU held until t=10 by a running job; a 1 s job released at t=0 can only run from 10 on:
    its flow is 11. On a grid of step 0.1 its pieces after 10 have mean lower ends at least 10.45 (at
    most 0.1 s of it per interval), so the bound is at least 10.45 + 0.5 and at most 11. Released at 5
    instead, with a free GPU, its flow is its runtime, 1."""
    job = [BoundJob("1", 0, 1, {"a": 1})]
    b = lp_flow_bound(job, {"a": 1}, origin=0, busy=[Busy("a", 1, 10)], grid=grid(0.1, 20))
    assert 10.95 * (1 - 1e-6) <= b.total_flow_s <= 11 + 1e-6
    late = lp_flow_bound([BoundJob("1", 5, 1, {"a": 1})], {"a": 1}, origin=0, grid=grid(0.1, 20))
    assert late.total_flow_s == pytest.approx(1, abs=1e-6)


def test_wide_jobs_use_gpu_time_and_unrunnable_jobs_are_skipped():
    """Two GPUs of a; a 2-GPU job of 2 s and a 1-GPU job of 2 s, both at t=0; a 4-GPU job fits no node
    type and one without runtimes cannot run (both skipped). The wide job takes both GPUs: one of the two
    waits 2 s, the optimum is 2 + 4 = 6; the floor 4 ignores that, the LP (one step 0.1 grid) sees the
    6 GPU-seconds on 2 GPUs: its bound is above 4.5 and at most 6."""
    jobs = [BoundJob("w", 0, 2, {"a": 2}), BoundJob("n", 0, 1, {"a": 2}), BoundJob("too-wide", 0, 4, {"a": 1}),
            BoundJob("none", 0, 1, {})]
    b = lp_flow_bound(jobs, {"a": 2}, grid=grid(0.1, 10))
    assert set(b.skipped) == {"too-wide", "none"}
    assert b.jobs == 2
    assert b.floor_s == pytest.approx(4)
    assert 4.5 < b.total_flow_s <= 6 + 1e-6


def test_no_jobs():
    b = lp_flow_bound([BoundJob("none", 0, 1, {})], {"a": 1})
    assert (b.jobs, b.total_flow_s, b.skipped) == (0, 0.0, ("none",))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 6), st.integers(1, 6), st.booleans()),
                min_size=1, max_size=4))
def test_never_above_the_exact_optimum(spec):
    """Random one-GPU jobs (release, runtime on a, on b, whether b can run it) on a fast and a slow
    one-GPU type: the bound is at most the enumerated optimum and at least the floor."""
    jobs = [BoundJob(str(i), r, 1, {"a": pa, "b": pb} if both else {"a": pa})
            for i, (r, pa, pb, both) in enumerate(spec)]
    cap = {"a": 1, "b": 1}
    opt = best_sum_of_flows(jobs, cap)
    b = lp_flow_bound(jobs, cap)
    assert b.solved
    assert b.floor_s * (1 - 1e-6) <= b.total_flow_s <= opt * (1 + 1e-6) + 1e-6


def test_below_every_policy_of_a_simulated_online_trace():
    """An online trace of 20 jobs that keeps a queue on 12 GPUs of 3 types, replayed by the simulator (backfill)
    under fifo, msched and oracle: the bound on the mean JCT (slurm_sim.metrics.trace_flow_bound, the
    trace's true runtimes, on the automatic grid and on one of half its step) is at most each policy's
    measured mean JCT and at least the floor."""
    from msched.estimate.perf_table import PerfTable
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.commands import default_truth_path
    from slurm_sim.compare import Classifier, SimSetup, compare
    from slurm_sim.metrics import jct_floor, trace_flow_bound
    from slurm_sim.trace import synth

    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster("a100:4x1,titanv:4x1,rtx2080ti:2x2")
    models = sorted(truth.models())[:8]
    trace = synth(20, models, truth, seed=3, arrival="poisson:300", max_gpus=4, cluster=cluster)
    bound = trace_flow_bound(trace, truth, cluster)
    assert bound.solved and bound.jobs == len(trace)
    floor = jct_floor(trace, truth, cluster)
    assert bound.mean_flow_s >= floor * (1 - 1e-6)
    fine = trace_flow_bound(trace, truth, cluster, step_s=bound.step_s / 2)      # a finer grid: as valid
    assert fine.step_s == pytest.approx(bound.step_s / 2)
    results = compare(trace, ["fifo", "msched", "oracle"], SimSetup(cluster, truth, truth, Classifier(models, truth),
                                                                     scheduler="backfill"))
    for r in results:
        assert r.metrics["unfinished"] == 0
        assert max(bound.mean_flow_s, fine.mean_flow_s) <= r.metrics["mean_jct_s"] * (1 + 1e-6), r.policy


def test_the_bench_greedy_by_hand():
    """bench/bench_jct_greedy.py's rule (the feasible schedule beside the bound in BENCHMARKS.md). One GPU,
    jobs of 1 and 2 s at t=0, shortest first: ends 1 and 3, mean JCT 2, makespan 3. Two one-GPU types a
    (fast) and b: two jobs of 1 s on a, 3 s on b. theta 0: the second waits for a (ends 1, 2: mean 1.5);
    theta 1 (its end on b, 3, is within 1 x 1 s of its best end, 2): it starts on b (mean 2)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_jct_greedy import greedy

    assert greedy([(0.0, 1, {"a": 2.0}), (0.0, 1, {"a": 1.0})], [("a", 1)], 0.0, "spt") == (2.0, 3.0)
    two = [(0.0, 1, {"a": 1.0, "b": 3.0}), (0.0, 1, {"a": 1.0, "b": 3.0})]
    assert greedy(two, [("a", 1), ("b", 1)], 0.0, "spt") == (1.5, 2.0)
    assert greedy(two, [("a", 1), ("b", 1)], 1.0, "spt") == (2.0, 3.0)
