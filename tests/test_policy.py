"""The policy layer on small hand-checked cases: order, type choice, guards, priorities, constraints,
estimators. Pure functions: no Slurm, no files besides the shared perf table where named."""

from __future__ import annotations

import pytest

from msched.estimate.estimators import TagEstimator, TruthEstimator
from msched.estimate.perf_table import PerfRow, PerfTable
from msched.estimate.runtime import Estimate
from msched.policy import POLICY_NAMES, UnknownPolicy, get_policy
from msched.policy.choice import ClusterView, SubmitJob, decide_submit
from msched.policy.fastest import rank_types
from msched.policy.priorities import MAX_PRIORITY, SPACING, assign_priorities, changed, fewest_moves
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob
from msched.policy.timeline import Timeline
from msched.slurm.base import PENDING, SlurmJob
from msched.slurm.feature_expr import combine, names_gpu_type, split, top_level_terms
from msched.tag import JobTag

H = 3600.0


def node(name: str, gtype: str, gpus: int = 1, free: int | None = None) -> NodeState:
    return NodeState(name, gtype, gpus, gpus if free is None else free)


def job(jid: str, est: dict[str, float], *, gpus: int = 1, prio: int = 100, submit: float = 0.0,
        **kw) -> PendingJob:
    return PendingJob(jid, submit, gpus, prio, est, **kw)


def snap(nodes, pending, running=(), now=0.0, starvation=None) -> ClusterSnapshot:
    return ClusterSnapshot(now, tuple(nodes), tuple(running), tuple(pending), starvation)


def order_of(plan) -> list[str]:
    return [d.job_id for d in sorted(plan.decisions, key=lambda d: -d.priority)]


# ----------------------------------------------------------------------------------------- registry
def test_registry_builds_every_policy_and_names_the_valid_ones():
    for name in POLICY_NAMES:
        p = get_policy(name, ranking=["a100"]) if name == "fastest" else get_policy(name)
        assert p.name == name
        assert p.estimator_kind == ("truth" if name == "oracle" else "tag")
    assert get_policy("msched").replans and not get_policy("msched-once").replans
    with pytest.raises(UnknownPolicy, match="choose one of fifo, fastest, msched-once, msched, oracle"):
        get_policy("sjf")
    with pytest.raises(UnknownPolicy, match="valid:"):
        get_policy("msched", objectiv="jct")
    with pytest.raises(ValueError, match="balanced, makespan, jct"):
        get_policy("msched", objective="fast")


# ----------------------------------------------------------------------------------------- ordering
def test_makespan_orders_longest_first_and_jct_shortest_first():
    nodes = [node("n1", "a100")]
    pend = [job("1", {"a100": 1 * H}, prio=300), job("2", {"a100": 3 * H}, prio=200),
            job("3", {"a100": 2 * H}, prio=100)]
    assert order_of(get_policy("msched", objective="makespan", planner="greedy").plan(snap(nodes, pend))) == ["2", "3", "1"]
    assert order_of(get_policy("msched", objective="jct", planner="greedy").plan(snap(nodes, pend))) == ["1", "3", "2"]


def test_planned_schedule_on_one_gpu_is_back_to_back():
    plan = get_policy("msched", objective="makespan", planner="greedy").plan(snap([node("n1", "a100")],
                                          [job("1", {"a100": 1 * H}), job("2", {"a100": 3 * H})]))
    d = plan.by_job()
    assert (d["2"].est_start, d["2"].est_end) == (0.0, 3 * H)
    assert (d["1"].est_start, d["1"].est_end) == (3 * H, 4 * H)
    assert plan.est_makespan_end == 4 * H


def test_type_choice_is_earliest_completion_given_running_jobs():
    # a100 busy for 2 h; job runs 1 h there or 2.5 h on titanv: 2+1 = 3 h > 2.5 h -> titanv
    nodes = [node("a", "a100", free=0), node("t", "titanv")]
    running = [RunningJob("r", "a100", 1, 2 * H, ("a",))]
    plan = get_policy("msched").plan(snap(nodes, [job("1", {"a100": 1 * H, "titanv": 2.5 * H})], running))
    assert plan.by_job()["1"].gpu_types == ("titanv",)
    # ... but 3.5 h on titanv: waiting for a100 (done at 3 h) wins
    plan = get_policy("msched").plan(snap(nodes, [job("1", {"a100": 1 * H, "titanv": 3.5 * H})], running))
    assert plan.by_job()["1"].gpu_types == ("a100",)
    assert plan.by_job()["1"].est_start == 2 * H


def test_list_scheduling_spreads_jobs_over_types():
    # two equal jobs, one a100 GPU and one titanv GPU: the second goes to titanv (finishes at 2 h, not 2 h on
    # a100 after the first: a tie on completion breaks to the faster type, so make titanv strictly better)
    nodes = [node("a", "a100"), node("t", "titanv")]
    pend = [job("1", {"a100": 1 * H, "titanv": 1.5 * H}), job("2", {"a100": 1 * H, "titanv": 1.5 * H})]
    plan = get_policy("msched").plan(snap(nodes, pend))
    assert sorted(d.gpu_types for d in plan.decisions) == [("a100",), ("titanv",)]
    assert plan.est_makespan_end == 1.5 * H


def test_node_granularity_a_job_never_spans_partial_nodes():
    # 2 free GPUs on each of two 4-GPU nodes: a 4-GPU job must wait for one node to free (whole node)
    nodes = [node("n1", "a100", 4, free=2), node("n2", "a100", 4, free=2)]
    running = [RunningJob("r1", "a100", 2, 1 * H, ("n1",)), RunningJob("r2", "a100", 2, 2 * H, ("n2",))]
    plan = get_policy("msched").plan(snap(nodes, [job("1", {"a100": 1 * H}, gpus=4)], running))
    assert plan.by_job()["1"].est_start == 1 * H
    # an 8-GPU job takes both nodes whole: it starts when the later one frees
    plan = get_policy("msched").plan(snap(nodes, [job("1", {"a100": 1 * H}, gpus=8)], running))
    assert plan.by_job()["1"].est_start == 2 * H


def test_timeline_prefers_the_fuller_node_for_small_jobs():
    tl = Timeline(0.0, [node("n1", "a100", 4), node("n2", "a100", 4, free=3)],
                  [RunningJob("r", "a100", 1, 5 * H, ("n2",))])
    p = tl.earliest("a100", 1)
    assert tl.names[p.nodes[0]] == "n2"           # best fit keeps n1 whole for a 4-GPU job
    tl.commit(p, 1 * H)
    assert tl.earliest("a100", 4).start == 0.0


# ----------------------------------------------------------------------------------------- guards
def test_pinned_job_keeps_its_type_and_unmanaged_jobs_are_not_planned():
    nodes = [node("a", "a100"), node("t", "titanv")]
    pend = [job("p", {"a100": 1 * H, "titanv": 5 * H}, pinned_type="titanv", allowed_types=("titanv",)),
            job("u", {}, managed=False, prio=1000, time_limit_s=2 * H)]
    plan = get_policy("msched").plan(snap(nodes, pend))
    d = plan.by_job()
    assert "u" not in d
    assert d["p"].gpu_types == ()                  # () = leave the constraint as it is
    assert d["p"].est_start == 0.0 and d["p"].est_end == 5 * H


def test_unmanaged_job_holds_gpus_in_its_place_in_the_queue():
    # an unmanaged job above ours, untyped, takes the only GPU first (its time limit: 2 h)
    nodes = [node("a", "a100")]
    pend = [job("u", {}, managed=False, prio=1000, time_limit_s=2 * H), job("m", {"a100": 1 * H}, prio=10)]
    d = get_policy("msched").plan(snap(nodes, pend)).by_job()
    assert d["m"].est_start == 2 * H


def test_a_batch_submitted_together_is_not_reordered_by_the_starvation_guard():
    """Every job past the age with one submit time (a static batch a day in): no later arrival to be
    protected from, so the guard neither reorders (by id) nor widens; one later arrival brings it back."""
    nodes = [node("a", "a100"), node("t", "titanv")]
    pend = [job("1", {"a100": 1 * H, "titanv": 2 * H}, prio=300), job("2", {"a100": 3 * H, "titanv": 6 * H}, prio=200),
            job("3", {"a100": 2 * H, "titanv": 4 * H}, prio=100)]
    for planner in ("greedy", "optimize"):
        lpt = get_policy("msched", objective="makespan", planner=planner)
        batch = lpt.plan(snap(nodes, pend, now=100_000.0, starvation=86_400.0))
        assert order_of(batch) == order_of(lpt.plan(snap(nodes, pend, now=100_000.0))) != ["1", "2", "3"]
        assert all(len(d.gpu_types) == 1 for d in batch.decisions)
    later = job("4", {"a100": 9 * H, "titanv": 9 * H}, submit=50_000.0, prio=50)
    guarded = get_policy("msched", objective="makespan", planner="greedy").plan(
        snap(nodes, [*pend, later], now=100_000.0, starvation=86_400.0))
    assert order_of(guarded) == ["1", "2", "3", "4"]           # the three past the age first, by id
    assert guarded.by_job()["1"].gpu_types == ("a100", "titanv")


def test_starving_job_goes_first_with_every_feasible_type():
    nodes = [node("a", "a100"), node("t", "titanv"), node("x", "titanxp")]
    pend = [job("old", {"a100": 1 * H, "titanv": 2 * H}, submit=0.0, prio=10),
            job("big", {"a100": 9 * H, "titanv": 9 * H, "titanxp": 9 * H}, submit=90_000.0, prio=20)]
    lpt = get_policy("msched", objective="makespan", planner="greedy")
    plan = lpt.plan(snap(nodes, pend, now=100_000.0, starvation=86_400.0))
    assert order_of(plan) == ["old", "big"]
    assert plan.by_job()["old"].gpu_types == ("a100", "titanv")   # widened, titanxp has no estimate
    no_guard = lpt.plan(snap(nodes, pend, now=100_000.0, starvation=None))
    assert order_of(no_guard) == ["big", "old"]
    # big runs 9 h anywhere: it leaves a100 (the type the queue needs most) to old, which runs 2x
    # slower elsewhere (the relative-speed rule, `affinity`)
    assert no_guard.by_job()["big"].gpu_types in {("titanv",), ("titanxp",)}
    assert no_guard.by_job()["old"].gpu_types == ("a100",)
    greedy = get_policy("msched", affinity=0, objective="makespan", planner="greedy").plan(
        snap(nodes, pend, now=100_000.0)).by_job()
    assert greedy["big"].gpu_types == ("a100",)                  # plain earliest completion, ties by name
    assert greedy["old"].gpu_types == ("titanv",)                # a100 busy for 9 h: titanv ends at 2 h


def test_time_limit_guard_drops_types_the_job_would_overrun():
    perf = PerfTable([PerfRow("resnet50", "a100", 1, 32, "float", 100.0),
                      PerfRow("resnet50", "titanxp", 1, 32, "float", 400.0)])
    tag = JobTag(model="resnet50", ref="resnet50", iters=10_000, bs=32)
    sj = SlurmJob("1", PENDING, num_gpus=1, time_limit_s=2 * H)
    assert TagEstimator(perf)(sj, tag) == {"a100": pytest.approx(1000.0), "titanxp": pytest.approx(4000.0)}
    sj_short = SlurmJob("1", PENDING, num_gpus=1, time_limit_s=3000.0)
    assert set(TagEstimator(perf)(sj_short, tag)) == {"a100"}
    # over the limit everywhere: the estimate is wrong, the limit fixes the work (slowest type = limit)
    sj_tiny = SlurmJob("1", PENDING, num_gpus=1, time_limit_s=800.0)
    assert TagEstimator(perf)(sj_tiny, tag) == {"a100": pytest.approx(200.0), "titanxp": pytest.approx(800.0)}
    sj_long = SlurmJob("1", PENDING, num_gpus=1, time_limit_s=5000.0)
    assert set(TagEstimator(perf)(sj_long, tag)) == {"a100", "titanxp"}
    # the planner never picks a type the estimate left out, even when it is the only free one
    nodes = [node("a", "a100", free=0), node("x", "titanxp")]
    running = [RunningJob("r", "a100", 1, 10 * H, ("a",))]
    d = get_policy("msched").plan(snap(nodes, [job("1", TagEstimator(perf)(sj_short, tag),
                                                   time_limit_s=3000.0)], running)).by_job()["1"]
    assert d.gpu_types == ("a100",) and d.est_start == 10 * H


# ----------------------------------------------------------------------------------------- estimators
def test_tag_estimator_scales_by_flops_batch_and_falls_back_to_time_limit_work():
    perf = PerfTable([PerfRow("resnet50", "a100", 1, 32, "float", 100.0),
                      PerfRow("resnet50", "titanxp", 1, 32, "float", 300.0)])
    est = TagEstimator(perf)
    tag = JobTag(model="mymodel.py:net", ref="resnet50", flops=2.0, iters=1000, bs=16)
    # 1000 iterations x 100 ms x (16/32 batch) x 2 (FLOPs) = 100 s on a100
    assert est(SlurmJob("1", PENDING, num_gpus=1), tag) == {"a100": pytest.approx(100.0),
                                                            "titanxp": pytest.approx(300.0)}
    # no iterations: the whole time limit on the slowest type fixes the work
    no_iters = JobTag(model="mymodel.py:net", ref="resnet50", flops=2.0, bs=16)
    got = est(SlurmJob("1", PENDING, num_gpus=1, time_limit_s=600.0), no_iters)
    assert got == {"a100": pytest.approx(200.0), "titanxp": pytest.approx(600.0)}
    # a reference model uses its own rows, whatever the tag's flops says
    own = JobTag(model="resnet50", ref="resnet50", flops=5.0, iters=10, bs=32)
    assert est(SlurmJob("1", PENDING, num_gpus=1), own)["a100"] == pytest.approx(1.0)


def test_truth_estimator_uses_the_models_own_rows_and_msched_s_work():
    knowledge = PerfTable([PerfRow("resnet50", "a100", 1, 32, "float", 100.0),
                           PerfRow("resnet50", "titanxp", 1, 32, "float", 300.0)])
    truth = PerfTable([*knowledge.rows, PerfRow("resnet101", "a100", 1, 32, "float", 150.0),
                       PerfRow("resnet101", "titanxp", 1, 32, "float", 700.0)])
    tag = JobTag(model="resnet101", ref="resnet50", flops=2.0, bs=32)
    sj = SlurmJob("1", PENDING, num_gpus=1, time_limit_s=3000.0)
    work = TagEstimator(knowledge).work(sj, tag)          # 3000 s / (0.3 s x 2) = 5000 iterations
    assert work == pytest.approx(5000.0)
    got = TruthEstimator(truth, knowledge=knowledge)(sj, tag)
    # 5000 x 0.15 s; on titanxp the truth (5000 x 0.7 s = 3500 s) overruns the limit: infeasible
    assert got == {"a100": pytest.approx(750.0)}
    with_iters = JobTag(model="resnet101", ref="resnet50", iters=100, bs=32)
    assert TruthEstimator(truth)(SlurmJob("1", PENDING, num_gpus=1), with_iters) == {
        "a100": pytest.approx(15.0), "titanxp": pytest.approx(70.0)}


# ----------------------------------------------------------------------------------------- submit time
def test_submit_choice_ors_the_types_within_slack_of_the_best_completion():
    p = get_policy("msched-once", slack=1.25)
    est = {"a100": 100.0, "titanv": 120.0, "titanxp": 300.0}
    assert p.submit_choice(est, {}, 0.0) == ("a100", "titanv")
    # a100 busy for 1000 s: titanv (120) and titanxp (300) are the best two; 300 > 1.25 x 120
    assert p.submit_choice(est, {"a100": 1000.0, "titanv": 0.0, "titanxp": 0.0}, 0.0) == ("titanv",)
    assert get_policy("fifo").submit_choice(est, {}, 0.0) == ()


def test_informed_slack_narrows_the_choice_only_when_a_type_is_busy():
    """msched's submit choice: `slack` (1.25) while every type looks free, `informed_slack` (1.1) once the
    round's free times show a busy type; msub's decide_submit the same, for a fresh view only."""
    est = {"a100": 100.0, "titanv": 120.0, "rtx": 108.0, "titanxp": 300.0}
    p = get_policy("msched", informed_slack=1.1)
    assert get_policy("msched").informed_slack is None                       # off by default (measured)
    assert p.submit_choice(est, dict.fromkeys(est, 0.0), 0.0) == ("a100", "rtx", "titanv")     # all free: 1.25
    busy = {"a100": 10.0, "titanv": 0.0, "rtx": 0.0, "titanxp": 0.0}      # a100 done at 110, rtx 108, titanv 120
    assert p.submit_choice(est, busy, 0.0) == ("rtx", "a100")                 # 120 > 1.1 x 108
    assert get_policy("msched").submit_choice(est, busy, 0.0) == ("rtx", "a100", "titanv")
    assert get_policy("msched-once").submit_choice(est, busy, 0.0) == ("rtx", "a100", "titanv")
    with pytest.raises(ValueError):
        get_policy("msched", informed_slack=0.9)
    tag = JobTag(model="m", ref="m", iters=1)

    class Est:
        def estimates(self, job, tag):  # noqa: ANN001, ANN202
            return {t: Estimate(v, "table") for t, v in est.items()}

    # stale: a100's one GPU taken (done at 200), so 1.25 x rtx's 108 keeps titanv (a fresh view would not)
    for fresh, want in ((True, ("rtx", "a100")), (False, ("rtx", "titanv"))):
        view = ClusterView(free_at=busy, fresh=fresh, free_gpus=None, pending_gpus=None)
        if not fresh:
            view = view._replace(free_gpus={"a100": 0, "titanv": 1, "rtx": 1, "titanxp": 1},
                                 pending_gpus={}, node_gpus={t: (1,) for t in est})
        d = decide_submit(tag, SubmitJob(1), view, Est(), now=0.0, slack=1.25, informed_slack=1.1)
        assert d.types == want, fresh


def test_config_refuses_a_slack_below_one():
    from msched.config import Config, ConfigError
    assert Config()._checked().constraint_informed_slack == 1.25             # = constraint_slack: off
    for key in ("constraint_slack", "constraint_informed_slack"):
        with pytest.raises(ConfigError, match=f"{key} must be a number >= 1"):
            Config(**{key: 0.8})._checked()


def test_fastest_ranks_types_by_average_speed():
    perf = PerfTable([PerfRow("m1", "a100", 1, 8, "float", 10.0), PerfRow("m1", "titanxp", 1, 8, "float", 30.0),
                      PerfRow("m2", "a100", 1, 8, "float", 20.0), PerfRow("m2", "titanxp", 1, 8, "float", 25.0)])
    assert rank_types(perf) == ["a100", "titanxp"]
    p = get_policy("fastest", perf=perf)
    assert p.submit_choice({"a100": 5.0, "titanxp": 1.0}, {}, 0.0) == ("a100",)
    assert p.submit_choice({"titanxp": 1.0}, {}, 0.0) == ("titanxp",)   # a100 over its limit


# ----------------------------------------------------------------------------------------- priorities
def test_priorities_already_in_order_need_no_change():
    cur = {"a": 30, "b": 20, "c": 10}
    assert assign_priorities(["a", "b", "c"], cur) == cur


def test_one_insertion_moves_one_job_when_there_is_room():
    cur = {"a": 4000, "b": 3000, "c": 2000, "new": 1000}
    new = assign_priorities(["new", "a", "b", "c"], cur)
    assert changed(new, cur) == 1 == fewest_moves(["new", "a", "b", "c"], cur)
    assert new["new"] > 4000 and new["new"] <= MAX_PRIORITY
    mid = assign_priorities(["a", "b", "new", "c"], cur)
    assert changed(mid, cur) == 1 and 3000 > mid["new"] > 2000


def test_swap_reuses_the_freed_values_when_values_are_tight():
    cur = {"a": 3, "b": 2, "c": 1}
    new = assign_priorities(["b", "a", "c"], cur)
    assert new["b"] > new["a"] > new["c"]
    assert changed(new, cur) == 1 == fewest_moves(["b", "a", "c"], cur)
    tight = {"a": 5, "b": 4, "c": 3, "d": 2, "e": 1}
    new = assign_priorities(["a", "c", "b", "d", "e"], tight)   # b and c swap between a and d: no room
    assert new["a"] > new["c"] > new["b"] > new["d"] > new["e"] >= 1
    assert sorted(new.values()) == [1, 2, 3, 4, 5]            # the freed values, a permutation


def test_packed_values_are_respaced_once_then_moves_stay_local():
    n = 200
    cur = {str(i): 4_000_000 - i for i in range(n)}          # priority/basic: one less per job
    order = [str(i) for i in reversed(range(n))]              # the whole queue reversed
    new = assign_priorities(order, cur)
    vals = [new[j] for j in order]
    assert vals == sorted(vals, reverse=True) and len(set(vals)) == n and min(vals) >= 1
    assert min(a - b for a, b in zip(vals, vals[1:], strict=False)) >= SPACING // 2
    # next round: one job moves to the top; only it is written
    order2 = [order[-1], *order[:-1]]
    again = assign_priorities(order2, new)
    assert changed(again, new) == 1


def test_priorities_stay_valid_at_the_edges():
    top = {"a": MAX_PRIORITY, "b": MAX_PRIORITY - 1}
    new = assign_priorities(["b", "a"], top)
    assert all(1 <= v <= MAX_PRIORITY for v in new.values()) and new["b"] > new["a"]
    low = {"a": 2, "b": 1}
    new = assign_priorities(["b", "a"], low)
    assert all(v >= 1 for v in new.values()) and new["b"] > new["a"]
    tied = {"a": 1, "b": 1, "c": 1}                             # multifactor with zero weights
    new = assign_priorities(["c", "a", "b"], tied)
    assert new["c"] > new["a"] > new["b"] >= 1
    assert changed(assign_priorities(["b", "c", "a"], new), new) == 1   # now there is room


def test_plan_reverses_a_queue_with_few_writes_and_keeps_values_in_range():
    nodes = [node("n1", "a100")]
    pend = [job(str(i), {"a100": (i + 1) * H}, prio=10_000 * (5 - i)) for i in range(5)]   # shortest on top
    plan = get_policy("msched", objective="makespan", planner="greedy").plan(snap(nodes, pend))
    assert order_of(plan) == ["4", "3", "2", "1", "0"]
    cur = {p.job_id: p.priority for p in pend}
    new = {d.job_id: d.priority for d in plan.decisions}
    assert changed(new, cur) == fewest_moves(order_of(plan), cur) == 4     # one job keeps its value
    assert all(1 <= v <= MAX_PRIORITY for v in new.values())


# ----------------------------------------------------------------------------------------- constraints
def is_gpu(name: str) -> str | None:
    return name.lower() if name.lower() in {"a100", "titanv", "titanxp"} else None


@pytest.mark.parametrize(("user", "types", "expected"), [
    ("", ["a100"], "a100"),
    ("", ["a100", "titanv"], "a100|titanv"),
    ("ib", ["a100", "titanv"], "ib&(a100|titanv)"),
    ("ib&ssd", ["a100"], "ib&ssd&a100"),
    ("ib|opa", ["a100", "titanv"], "(ib|opa)&(a100|titanv)"),
    ("[rack1*2&rack2*1]", ["a100"], None),
    ("ib", [], "ib"),
])
def test_combine_forms(user, types, expected):
    assert combine(user, types) == expected


@pytest.mark.parametrize("user", ["", "ib", "ib&ssd", "ib|opa"])
def test_split_reads_back_what_combine_wrote(user):
    written = combine(user, ["a100", "titanv"])
    back_user, back_types = split(written, is_gpu)
    assert back_types == ("a100", "titanv")
    assert combine(back_user, ["titanxp"]) == combine(user, ["titanxp"])


def test_constraint_helpers():
    assert top_level_terms("ib&(a|b),ssd") == ["ib", "(a|b)", "ssd"]
    assert names_gpu_type("ib&(A100|titanv)", is_gpu) == ("a100", "titanv")
    assert split("ib", is_gpu) == ("ib", ())
    assert split("a100&titanv|a100", is_gpu)[1] == ("a100",)


@pytest.mark.parametrize(("expr", "features", "expected"), [
    ("", {"a100"}, True),
    ("ib&(a100|titanv)", {"titanv", "ib"}, True),
    ("ib&(a100|titanv)", {"titanv"}, False),
    ("(titanv|rtx2080ti)&(a100|titanxp)", {"titanxp"}, False),
    ("titanv|rtx2080ti&a100|titanxp", {"titanxp"}, True),        # left to right, as slurmctld reads it
    ("[a100|titanv]", {"titanv"}, True),
    ("ib,ssd", {"ib"}, False),
])
def test_matches_reads_expressions_like_slurm(expr, features, expected):
    from msched.slurm.feature_expr import matches
    assert matches(expr, features) is expected
