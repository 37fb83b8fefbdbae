"""The LP lower bound (msched.policy.bound): hand-computed instances, and validity against real schedules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msched.policy.bound import BoundJob, Busy, lp_lower_bound, simple_bound, snapshot_lower_bound
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob
from msched.policy.timeline import Timeline


def test_type_restrictions_make_the_simple_bound_loose_and_the_lp_exact():
    """a100 and titanv, one GPU each. Two 100 s jobs only a100 can run, one 10 s job only titanv can.
    Simple: max(100, (100 + 100 + 10) / 2) = 105. LP: the a100 carries 200 s of work alone: 200, and
    running the two a100 jobs back to back while titanv runs the third reaches it."""
    jobs = [BoundJob("1", 0, 1, {"a100": 100}), BoundJob("2", 0, 1, {"a100": 100}),
            BoundJob("3", 0, 1, {"titanv": 10})]
    b = lp_lower_bound(jobs, {"a100": 1, "titanv": 1})
    assert b.solved
    assert b.simple_s == pytest.approx(105)
    assert b.value_s == pytest.approx(200, rel=1e-6)
    assert b.assignment == {"1": {"a100": 1.0}, "2": {"a100": 1.0}, "3": {"titanv": 1.0}}


def test_fractional_split_between_a_fast_and_a_slow_type():
    """a100 100 ms/iter, titanv 200 ms/iter, jobs of 100/100/50 s on a100 (double on titanv). Moving f
    a100-seconds of work to titanv costs 2f there: 250 - f = 2f gives C = 500/3 (simple bound: 125)."""
    jobs = [BoundJob("1", 0, 1, {"a100": 100, "titanv": 200}), BoundJob("2", 0, 1, {"a100": 100, "titanv": 200}),
            BoundJob("3", 0, 1, {"a100": 50, "titanv": 100})]
    b = lp_lower_bound(jobs, {"a100": 1, "titanv": 1})
    assert b.simple_s == pytest.approx(125)
    assert b.value_s == pytest.approx(500 / 3, rel=1e-6)
    for shares in b.assignment.values():
        assert sum(shares.values()) == pytest.approx(1)


def test_release_times_count_per_type():
    """a (1 GPU): job 1 at t=0 and job 2 at t=60, 100 s each; b (1 GPU): job 3, 10 s at t=0.
    Simple: max(60 + 100, (100 + 100 + 10) / 2, 60 + 100 / 2) = 160. LP: the a GPU does 200 s of work
    from t=0: 200 (= the optimum: 1 on a 0-100, 2 on a 100-200)."""
    jobs = [BoundJob("1", 0, 1, {"a": 100}), BoundJob("2", 60, 1, {"a": 100}), BoundJob("3", 0, 1, {"b": 10})]
    b = lp_lower_bound(jobs, {"a": 1, "b": 1})
    assert b.simple_s == pytest.approx(160)
    assert b.value_s == pytest.approx(200, rel=1e-6)
    # a late release on the a GPU: job 2 at t=150 can only end at 250
    late = [jobs[0], BoundJob("2", 150, 1, {"a": 100}), jobs[2]]
    assert lp_lower_bound(late, {"a": 1, "b": 1}).value_s == pytest.approx(250, rel=1e-6)


def test_origin_wide_jobs_and_jobs_without_a_type():
    """A 2-GPU job on 2 a GPUs is 2 x 50 GPU-seconds; a 4-GPU job fits no type and one with no runtime
    cannot run: both are skipped, not counted. The bound is measured from `origin`."""
    jobs = [BoundJob("w", 10, 2, {"a": 50}), BoundJob("x", 10, 1, {"a": 50}), BoundJob("too-wide", 10, 4, {"a": 1}),
            BoundJob("none", 10, 1, {})]
    b = lp_lower_bound(jobs, {"a": 2}, origin=0)
    assert set(b.skipped) == {"too-wide", "none"}
    assert b.value_s == pytest.approx(10 + (100 + 50) / 2, rel=1e-6)


def test_snapshot_bound_counts_running_jobs():
    """a100 with 2 GPUs, one held by a running job until now+50; one pending 2-GPU a100 job of 100 s and
    one 1-GPU job of 30 s that titanv can run too (60 s there, titanv: 1 GPU, free).
    By hand: the a100 carries 50 (running) + 200 (wide job) = 250 GPU-seconds over 2 GPUs = 125 with
    nothing else there; the small job goes to titanv (60 <= 125): 125."""
    nodes = (NodeState("a-1", "a100", 2, 1), NodeState("t-1", "titanv", 1, 1))
    snap = ClusterSnapshot(now=1000.0, nodes=nodes, running=(RunningJob("r", "a100", 1, 1050.0, ("a-1",)),),
                           pending=(PendingJob("w", 900.0, 2, est_runtime_s={"a100": 100.0}),
                                    PendingJob("s", 900.0, 1, est_runtime_s={"a100": 30.0, "titanv": 60.0})))
    b = snapshot_lower_bound(snap)
    assert b.origin == 1000.0
    assert b.value_s == pytest.approx(125, rel=1e-6)
    assert b.simple_s == pytest.approx(100)           # max(100, (50 + 200 + 30) / 3 = 93.3)


def test_simple_bound_matches_its_formula():
    jobs = [BoundJob("1", 0, 1, {"a": 100}), BoundJob("2", 50, 2, {"a": 40, "b": 80})]
    # max(100, 50 + 40, (100 + 80) / 3 = 60, 50 + 80 / 3)
    assert simple_bound(jobs, {"a": 2, "b": 1}, 0.0) == pytest.approx(100)
    assert simple_bound([], {"a": 1}, 0.0, [Busy("a", 1, 30.0)]) == pytest.approx(30)


def _list_schedule(jobs: list[BoundJob], capacity: dict[str, int]) -> float:
    """A real non-preemptive schedule (each job, in release order, on the type finishing it first)."""
    nodes = [NodeState(f"{t}-{k}", t, 1, 1) for t, g in capacity.items() for k in range(g)]
    tl = Timeline(0.0, nodes)
    end = 0.0
    for j in sorted(jobs, key=lambda j: j.release):
        best = None
        for t, p in j.runtime_s.items():
            pl = tl.earliest(t, 1, j.release)
            if pl is not None and (best is None or pl.start + p < best[0]):
                best = (pl.start + p, pl)
        tl.commit(best[1], best[0])
        end = max(end, best[0])
    return end


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.dictionaries(st.sampled_from(["a", "b", "c"]),
                                                                 st.integers(1, 500), min_size=1)),
                min_size=1, max_size=12),
       st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 3), min_size=3))
def test_bound_is_valid_and_dominates_the_simple_one(raw, capacity):
    """For random 1-GPU instances: simple <= LP <= the makespan of a real schedule."""
    jobs = [BoundJob(str(i), float(r), 1, {t: float(p) for t, p in rt.items()}) for i, (r, rt) in enumerate(raw)]
    b = lp_lower_bound(jobs, capacity, origin=0.0)
    assert b.solved
    assert b.simple_s <= b.value_s * (1 + 1e-6)
    assert b.value_s <= _list_schedule(jobs, capacity) * (1 + 1e-6)
