"""An event round that re-plans and settles only the head of the queue (issue 21, eighth pass;
msched.rounds.settle 7., config `replan_head`): on the simulator's dev-cluster queue (4 types x 4 GPUs all
busy, an online queue behind them), rounds settled with the whole queue planned, then the same rounds
with only the head planned anew write the same updates and hold a plan the round's own model rates no
worse than the incumbent, while a burst, a batch and a first round still plan the whole queue."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from msched.config import Config, ConfigError, load_config
from msched.rounds.settle import Incumbent, SettleOptions, replan_head_jobs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))


def _rounds(n: int, *, planner: str, head: float | None, events: int = 2, seed: int = 1,
            arrivals: int = 0) -> list:
    """Three rounds on a fresh online queue of `n` pending jobs (whole queue planned), then `events` times
    4 running jobs end (and `arrivals` jobs arrive), each followed by two rounds with `replan_head=head`.
    Returns those rounds' (sorted updates, result)."""
    import bench_reorder as br

    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.rounds.core import run_round

    c, blockers, perf = br.busy_sim(n, seed, arrival_gap_s=0.5)      # an online queue, not one batch
    est, policy = TagEstimator(perf), get_policy("msched", planner=planner)
    state = {"incumbent": Incumbent()}

    def one(opts: SettleOptions):  # noqa: ANN202
        r = run_round(c, policy, est, incumbent=state["incumbent"], settle_options=opts)
        state["incumbent"] = r.incumbent
        c.advance(1)
        return r

    for _ in range(3):
        one(SettleOptions())
    out = []
    from msched.estimate.perf_table import PerfTable

    models = br.busy_models(perf, PerfTable.load(br.TRUTH))
    for event in range(events):
        for b in blockers[event::4][:4]:
            c.cancel(b)
        for req in br.busy_queue_requests(arrivals, models, seed + 10 + event, sim=True, plain_share=0.0):
            c.submit(req)
        c.advance(0)
        for _ in range(2):
            r = one(SettleOptions(replan_head=head))
            out.append((sorted((u.job_id, u.field, str(u.value)) for u in r.updates), r))
    return out


@pytest.mark.parametrize("planner", ["greedy", "optimize"])
def test_a_head_only_round_writes_what_the_whole_queue_round_writes(planner):
    """An unchanged queue and a few ends: the same writes, the same held plan (incumbent), the same
    estimate, with only the head planned anew."""
    whole = _rounds(600, planner=planner, head=None)
    head = _rounds(600, planner=planner, head=4.0)
    assert [w for w, _r in head] == [w for w, _r in whole]
    assert sum(len(w) for w, _r in head) >= 1                  # the ends wrote something
    for (_w, r), (_w2, full) in zip(head, whole, strict=True):
        st = r.settle
        assert st.head is not None and st.head < len(r.snapshot.pending) // 2      # only the head was planned
        assert full.settle.head is None
        assert st.makespan_held <= st.makespan_incumbent + 1e-6                   # never worse than held
        assert r.plan.est_makespan_end == pytest.approx(full.plan.est_makespan_end)
        assert {d.job_id for d in r.plan.decisions} == {d.job_id for d in full.plan.decisions}
        assert r.incumbent == full.incumbent


@pytest.mark.parametrize("planner", ["greedy", "optimize"])
def test_with_arrivals_a_head_only_round_writes_few_and_never_holds_a_worse_plan(planner):
    """Arrivals with the ends: settle weighs the head's moves against the head's own horizon, a shorter
    one than the whole queue's, so more of them pass its margin than when the whole queue is planned
    (measured here: 0-8 writes per event round planned whole, 5-10 head-only; BENCHMARKS.md). Each round
    still writes under 5% of the queue and holds a plan its model rates no worse than the incumbent."""
    for _w, r in _rounds(600, planner=planner, head=4.0, arrivals=6):
        st = r.settle
        assert st.head is not None and len(r.updates) <= 0.05 * len(r.snapshot.pending)
        assert st.makespan_held <= st.makespan_incumbent + 1e-6


def test_the_head_is_the_first_places_arrivals_and_starving_jobs_and_a_burst_plans_everything():
    import dataclasses

    import bench_reorder as br

    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.rounds.core import build_snapshot, run_round

    c, _blockers, perf = br.busy_sim(200, 2, arrival_gap_s=0.5)
    est = TagEstimator(perf)
    r = run_round(c, get_policy("msched", planner="greedy"), est, incumbent=Incumbent())
    assert r.settle.head is None                                # a first round: the whole queue
    inc = r.incumbent
    snap = r.snapshot
    order = sorted(snap.pending, key=lambda j: (-inc.priority.get(j.job_id, j.priority), j.submit_time,
                                                int(j.job_id)))
    head = replan_head_jobs(snap, inc, 1.0)                     # 16 GPUs: 16 places
    assert head == {j.job_id for j in order[:16]}
    assert replan_head_jobs(snap, inc, None) is None            # off
    assert replan_head_jobs(snap, Incumbent(), 1.0) is None     # msched holds nothing yet
    assert replan_head_jobs(snap, inc, 7.0) is None             # 112 places of 200: more than half
    # an arrival (unknown to the incumbent) and a starving job deep in the queue join the head
    late = order[150]
    less = Incumbent(types={j: t for j, t in inc.types.items() if j != late.job_id},
                     priority={j: p for j, p in inc.priority.items() if j != late.job_id})
    assert late.job_id in replan_head_jobs(snap, less, 1.0)
    old = order[160]
    aged = dataclasses.replace(snap, pending=tuple(dataclasses.replace(j, submit_time=snap.now - 10 * 86400)
                                                   if j.job_id == old.job_id else j for j in snap.pending))
    assert old.job_id in replan_head_jobs(aged, inc, 1.0, starvation_age_s=86400.0)
    # a batch submitted together plans whole (as the head's writes do: settle.deferred)
    batch, _b, _p = br.busy_sim(200, 2)
    bsnap, _views = build_snapshot(batch.jobs(), batch.nodes(), est, batch.now())
    binc = run_round(batch, get_policy("msched", planner="greedy"), est, incumbent=Incumbent()).incumbent
    assert replan_head_jobs(bsnap, binc, 1.0) is None


def test_replan_head_is_read_from_the_site_config_and_zero_plans_the_whole_queue(tmp_path):
    from msched.rounds.reorder import Reorderer

    path = tmp_path / "msched.toml"
    path.write_text("replan_head = 8\n")
    assert Reorderer(load_config(path), None, None, publish=False).settle_options.replan_head == 8.0
    path.write_text("replan_head = 0\n")
    assert Reorderer(load_config(path), None, None, publish=False).settle_options.replan_head is None
    assert Config().replan_head == 0.0
    path.write_text("replan_head = -1\n")
    with pytest.raises(ConfigError, match="replan_head -1 must be a number >= 0"):
        load_config(path)


def test_a_head_plan_worse_on_the_whole_queue_keeps_the_incumbent_unless_a_job_starves(monkeypatch):
    """The whole queue's evaluation is the check on the head's moves: when it rates the held plan worse
    than the incumbent, the round holds the incumbent (no move), or plans the whole queue when a
    starving job is in the head."""
    import dataclasses

    import bench_reorder as br

    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.rounds import settle as st
    from msched.rounds.core import run_round

    c, _blockers, perf = br.busy_sim(200, 3, arrival_gap_s=0.5)
    policy = get_policy("msched", planner="greedy")
    first = run_round(c, policy, TagEstimator(perf), incumbent=Incumbent())
    snap, inc = first.snapshot, first.incumbent
    head = replan_head_jobs(snap, inc, 1.0)
    mover = next(j for j in sorted(head) if j in inc)

    def moving_settle(sub, plan, incumbent, **_kw):  # noqa: ANN001, ANN202 - one move, whatever it buys
        prio = dict(incumbent.priority)
        prio[mover] += 10_000_000
        decisions = [st.JobDecision(j.job_id, prio[j.job_id], tuple(incumbent.types[j.job_id]), None, None, {})
                     for j in sub.pending if j.job_id in incumbent]
        return st.Plan(policy="test", decisions=decisions), st.SettleReport(moved=1, placed=set(prio) & head)

    monkeypatch.setattr(st, "settle", moving_settle)
    monkeypatch.setattr(st, "_worse", lambda *_a, **_k: True)
    held, _new, report = st.settle_head(snap, policy.plan, inc, head)
    assert (report.moved, report.kept, report.accepted) == (0, 1, False)
    assert {d.job_id: d.priority for d in held.decisions} == {j: inc.priority[j] for j in inc.priority}
    assert report.makespan_held == report.makespan_incumbent
    starving = dataclasses.replace(snap, pending=tuple(dataclasses.replace(j, submit_time=snap.now - 10 * 86400)
                                                       if j.job_id == mover else j for j in snap.pending))
    assert st.settle_head(starving, policy.plan, inc, head, starvation_age_s=86400.0) is None
