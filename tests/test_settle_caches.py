"""settle's evaluation caches give what the plain computation gives (issue 21, twelfth pass).

`slurm_order` ranks the part of Slurm's order that no priority changes (submit time, then job id) once per
snapshot and keeps it in the evaluation memo; each evaluation then sorts (priority, rank) pairs. Checked
against `sorted(pending, key=queue_key)` on random queues (ties in submit time and in priority, numeric
and non-numeric job ids, priorities given for some jobs and not others, several priority maps on one
memo as a round's evaluations share it), and whole settle results with the memo against a round without
it."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from msched.policy.base import queue_key
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob
from msched.rounds import settle as settle_mod
from msched.rounds.settle import Incumbent, SettleOptions, evaluate, settle, slurm_order


@st.composite
def _queues(draw) -> tuple[ClusterSnapshot, list[dict[str, int]]]:
    n = draw(st.integers(0, 40))
    ids = draw(st.lists(st.one_of(st.integers(1, 10 ** 6).map(str), st.from_regex(r"[0-9]{1,4}_[0-9]{1,2}", fullmatch=True)),
                        min_size=n, max_size=n, unique=True))
    jobs = tuple(PendingJob(jid, float(draw(st.integers(0, 5))), 1, priority=draw(st.integers(0, 4)),
                            managed=draw(st.booleans())) for jid in ids)
    snap = ClusterSnapshot(now=10.0, nodes=(NodeState("n0", "a100", 4, 0),), running=(), pending=jobs)
    maps = [{j.job_id: draw(st.integers(-3, 6)) for j in jobs if draw(st.booleans())}
            for _ in range(draw(st.integers(1, 4)))]
    return snap, maps


@settings(max_examples=300, deadline=None)
@given(_queues())
def test_slurm_order_equals_the_sort_by_queue_key(case):
    snap, maps = case
    memo: dict = {}
    for prio in maps:
        want = sorted(snap.pending, key=lambda j: queue_key(j, prio.get(j.job_id)))   # noqa: B023
        assert slurm_order(snap, prio, memo) == want
        assert slurm_order(snap, prio) == want                       # without a memo
    other = dataclasses.replace(snap, pending=tuple(reversed(snap.pending)))   # another snapshot, same memo
    assert slurm_order(other, maps[0], memo) == sorted(other.pending,
                                                         key=lambda j: queue_key(j, maps[0].get(j.job_id)))


def test_a_nan_submit_time_falls_back_to_the_whole_keys_sort():
    jobs = tuple(PendingJob(str(k), t, 1, priority=1) for k, t in enumerate([3.0, float("nan"), 1.0, 2.0]))
    snap = ClusterSnapshot(now=0.0, nodes=(), running=(), pending=jobs)
    assert slurm_order(snap, {}, {}) == sorted(jobs, key=lambda j: queue_key(j))


def _busy_round(n: int = 600):  # noqa: ANN202 - (snapshot, plan, incumbent) of the simulated dev cluster
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from bench_reorder import busy_sim

    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.rounds.core import run_round

    c, blockers, perf = busy_sim(n, 3)
    # head_jobs 200 (the default until jct15): the search plans a head and a greedy tail and settle weighs
    # moves; with the whole 600-job queue searched (head_jobs 600) settle's report had 0 candidates here,
    # leaving nothing for this test to compare. The queue is one batch (every job submitted at once), which
    # planner17's default plans from a balanced start with short jobs first on their own types: that plan
    # leaves settle 2 trials here instead of the 4 the tests of its halving sequence need, so the fixture
    # keeps the plan of before (balance_types off, short jobs on the plan's types, allowance over the best)
    policy = get_policy("msched", head_jobs=200, balance_types=False, short_types="plan", short_reference="best")
    est = TagEstimator(perf)
    r = run_round(c, policy, est, incumbent=Incumbent())
    c.advance(1)
    for b in blockers[:4]:
        c.cancel(b)
    c.advance(0)
    return c, policy, est, r.incumbent


def test_settle_with_the_ranks_kept_equals_settle_sorting_by_queue_key(monkeypatch):
    """A whole event round's settle (the plan, the held plan, the report) on the simulated dev cluster
    queue, with `slurm_order` and with the plain sort in its place."""
    from msched.rounds.core import build_snapshot

    c, policy, est, inc = _busy_round()
    snap, _views = build_snapshot(c.jobs(), c.nodes(), est, now=c.now())
    plan = policy.plan(snap)
    opts = SettleOptions(write_budget=50)
    got = settle(snap, plan, inc, options=opts)
    monkeypatch.setattr(settle_mod, "slurm_order",
                        lambda s, p, memo=None: sorted(s.pending, key=lambda j: queue_key(j, p.get(j.job_id))))
    want = settle(snap, plan, inc, options=opts)
    assert got[0] == want[0] and got[1] == want[1]
    assert got[1].candidates and len(got[0].decisions) > 400        # moves were weighed: hybrids evaluated
    ev = evaluate(snap, {}, {})
    assert [j.job_id for j in ev.order] == [j.job_id for j in sorted(snap.pending, key=queue_key)]


def _hybrid_order_plainly(inc_order, inc_eval, moves, new_eval, new_rank):  # noqa: ANN001, ANN202
    """The rule as `_hybrid_order`'s docstring puts it, job by job: each moved job before the first unmoved
    job whose start (the running latest of the unmoved jobs') is not before its new planned start."""
    import bisect
    import math

    stay = [j for j in inc_order if j not in set(moves)]
    latest, m = [], -math.inf
    for j in stay:
        p = inc_eval.placed.get(j)
        m = max(m, p.start if p is not None else math.inf)
        latest.append(m)
    slots: dict = {}
    for j in moves:
        p = new_eval.placed.get(j)
        s = p.start if p is not None else math.inf
        slots.setdefault(bisect.bisect_left(latest, s), []).append((s, new_rank.get(j, 0), j))
    out = []
    for k in range(len(stay) + 1):
        out += [j for _s, _r, j in sorted(slots.get(k, ()))]
        if k < len(stay):
            out.append(stay[k])
    return out


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 30), st.data())
def test_the_hybrid_order_follows_its_rule(n, data):
    """Starts with ties, unplaced jobs (no start: inf) on both sides, moves in any order (issue 21,
    fourteenth pass: the running latest start folded by itertools.accumulate, the order built by slices)."""
    from msched.policy.base import Placed
    from msched.rounds.settle import Evaluation, _hybrid_order

    ids = [f"j{k}" for k in range(n)]
    start = st.one_of(st.none(), st.integers(0, 8).map(float))

    def evaluation(starts: list) -> Evaluation:
        return Evaluation({j: Placed("a100", s, s + 1.0) for j, s in zip(ids, starts, strict=True) if s is not None},
                          0.0, 0.0, None)  # type: ignore[arg-type]

    inc_eval = evaluation([data.draw(start) for _ in ids])
    new_eval = evaluation([data.draw(start) for _ in ids])
    moves = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    new_rank = {j: data.draw(st.integers(0, 5)) for j in ids if data.draw(st.booleans())}
    args = (ids, inc_eval, moves, new_eval, new_rank)
    assert _hybrid_order(*args) == _hybrid_order_plainly(*args)
