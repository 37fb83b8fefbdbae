"""Draining a GPU type for the whole-node jobs that wait on it (msched.policy.drain, policy option
`drain_wide`): hand-worked snapshots, the re-planned types, and settle writing the drain's moves."""

from __future__ import annotations

from msched.policy import get_policy
from msched.policy.drain import drained_snapshot, waiting_wide
from msched.policy.msched import MschedPolicy
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob
from msched.rounds.settle import Incumbent, settle

H = 3600.0


def cluster(wide_free_at_h: float = 2.0, extra_pending: tuple[PendingJob, ...] = ()) -> ClusterSnapshot:
    """Three 4-GPU nodes: `fast` f1 runs a 1-GPU job until `wide_free_at_h` and f2 one until 5 h (3 GPUs free on
    each), `slow` s1 is idle. W (4 GPUs) runs 10 h on fast, 30 h on slow: its earliest completion is on f1 once
    its job ends (2 h + 10 h = 12 h against 30 h). n1-n3 (1 GPU) run 1 h on fast, 2 h on slow: each fits now
    in f2's free GPUs and ends there first (1 h against 2 h). (Slurm may as well start them on f1, where no
    reservation holds W's node when the running jobs' limits lie past bf_window: what the drain is for.)"""
    nodes = (NodeState("f1", "fast", 4, 3), NodeState("f2", "fast", 4, 3), NodeState("s1", "slow", 4, 4))
    running = (RunningJob("r1", "fast", 1, wide_free_at_h * H, ("f1",)), RunningJob("r2", "fast", 1, 5 * H, ("f2",)))
    pending = (PendingJob("W", -10.0, 4, 100, {"fast": 10 * H, "slow": 30 * H}),
               *(PendingJob(f"n{k}", float(-k), 1, 100, {"fast": 1 * H, "slow": 2 * H}) for k in (1, 2, 3)),
               *extra_pending)
    return ClusterSnapshot(0.0, nodes, running, pending, None)


def types(plan) -> dict[str, tuple[str, ...]]:
    return {d.job_id: tuple(d.gpu_types) for d in plan.decisions}


def test_without_drain_the_plan_backfills_narrow_jobs_onto_the_wide_jobs_type():
    s = cluster()
    plan = MschedPolicy(objective="makespan", backfill=True).plan(s)
    t = types(plan)
    assert t["W"] == ("fast",) and all(t[j] == ("fast",) for j in ("n1", "n2", "n3"))
    start = {d.job_id: d.est_start for d in plan.decisions}
    assert start["W"] == 2 * H                     # the running job's estimated end: the node whole by then
    assert waiting_wide(s, plan) == {"fast": ("W",)}


def test_drain_keeps_narrow_jobs_off_the_type_the_wide_job_waits_on():
    s = cluster()
    plan = MschedPolicy(objective="makespan", backfill=True, drain_wide=True).plan(s)
    t = types(plan)
    assert t["W"] == ("fast",)
    assert all(t[j] == ("slow",) for j in ("n1", "n2", "n3"))     # 2 h each on the idle slow node
    start = {d.job_id: d.est_start for d in plan.decisions}
    assert start["W"] == 2 * H and all(start[j] == 0.0 for j in ("n1", "n2", "n3"))
    assert plan.obliged == frozenset({"n1", "n2", "n3"})
    assert plan.free_time["fast"] >= 2 * H          # msub's arrivals see fast busy until W's planned start
    # the optimizing planner (the registry's msched) takes the option and drains the same way
    opt = get_policy("msched", objective="makespan", backfill=True, drain_wide=True).plan(s)
    assert {j: v for j, v in types(opt).items() if j != "W"} == dict.fromkeys(("n1", "n2", "n3"), ("slow",))


def test_nothing_drains_when_the_wide_job_starts_now():
    s = cluster()
    s = ClusterSnapshot(0.0, (NodeState("f1", "fast", 4, 4), *s.nodes[1:]), s.running[1:], s.pending, None)  # f1 idle
    plain = MschedPolicy(objective="makespan", backfill=True).plan(s)
    drained = MschedPolicy(objective="makespan", backfill=True, drain_wide=True).plan(s)
    assert waiting_wide(s, plain) == {}
    assert types(drained) == types(plain) and drained.obliged == frozenset()


def test_pinned_unmanaged_and_single_type_jobs_are_not_narrowed():
    extra = (PendingJob("pin", -20.0, 1, 100, {"fast": 1 * H}, pinned_type="fast"),
             PendingJob("only", -21.0, 1, 100, {"fast": 1 * H}),              # no other feasible type
             PendingJob("plain", -22.0, 1, 100, {"fast": 1 * H, "slow": 2 * H}, managed=False),
             PendingJob("user", -23.0, 1, 100, {"fast": 1 * H, "slow": 2 * H}, allowed_types=("fast",)))
    s = cluster(extra_pending=extra)
    plan = MschedPolicy(objective="makespan", backfill=True).plan(s)
    out = drained_snapshot(s, plan)
    assert out is not None
    snap, drain = out
    assert drain.waiting == {"fast": ("W",)}
    assert drain.narrowed == dict.fromkeys(("n1", "n2", "n3"), ("slow",))
    by_id = {j.job_id: j for j in snap.pending}
    for jid in ("pin", "only", "plain", "user", "W"):
        assert by_id[jid] is next(j for j in s.pending if j.job_id == jid)      # untouched
    assert by_id["n1"].allowed_types == ("slow",)


def test_settle_writes_the_drains_moves_though_its_model_says_they_lose():
    s = cluster()
    incumbent = Incumbent(types={"W": ("fast",), "n1": ("fast",), "n2": ("fast",), "n3": ("fast",)},
                          priority={"W": 400, "n1": 300, "n2": 200, "n3": 100})
    plain = MschedPolicy(objective="makespan", backfill=True).plan(s)
    held, _ = settle(s, plain, incumbent, objective="makespan", backfill=True)
    assert types(held)["n1"] == ("fast",)          # nothing to move without the drain
    drained = MschedPolicy(objective="makespan", backfill=True, drain_wide=True).plan(s)
    held, report = settle(s, drained, incumbent, objective="makespan", backfill=True)
    # by the evaluation's model each narrow job ends 1 h later on slow (2 h against 1 h): no own gain, yet moved
    assert all(report.gain[j] < 0 for j in ("n1", "n2", "n3"))
    assert all(types(held)[j] == ("slow",) for j in ("n1", "n2", "n3"))
    # the held plan (settle's own evaluation) still publishes fast as taken until W's planned start
    assert held.free_time["fast"] >= 2 * H and held.free_floor == {"fast": 2 * H}


def test_one_type_drains_at_a_time_for_the_first_waiting_wide_job():
    """A second whole-node job V (8 h on slow only) waits for s1 (busy until 3 h) below W in the plan's order
    (planned starts 2 h and 3 h): only fast drains (W's), so the narrow jobs keep slow to go to; with both
    types drained they would have had no type left and none would have been narrowed."""
    s = cluster()
    s = ClusterSnapshot(0.0, (*s.nodes[:2], NodeState("s1", "slow", 4, 3)),
                        (*s.running, RunningJob("r3", "slow", 1, 3 * H, ("s1",))),
                        (*s.pending, PendingJob("V", -5.0, 4, 100, {"slow": 8 * H})), None)
    plan = MschedPolicy(objective="makespan", backfill=True).plan(s)
    start = {d.job_id: d.est_start for d in plan.decisions}
    prio = {d.job_id: d.priority for d in plan.decisions}
    assert (start["W"], start["V"]) == (2 * H, 3 * H) and prio["W"] > prio["V"]     # W first: planned first
    assert waiting_wide(s, plan) == {"fast": ("W",)}
    drained = MschedPolicy(objective="makespan", backfill=True, drain_wide=True).plan(s)
    assert all(types(drained)[j] == ("slow",) for j in ("n1", "n2", "n3"))
    assert drained.free_floor == {"fast": 2 * H}
