"""The begin-time lever (issue 17 point 3): the pure decision (msched.policy.reservations), the
simulator honouring begin times as Slurm does, the round writing them through the hold journal, and
`--release` / the next round undoing them. The real-cluster side is tests/test_levers_slurm.py.

The scenario used throughout (times in hours, one a100 node of 4 GPUs):
  X runs on 2 GPUs, ends at 1 h (the estimate; its time limit says 10 h);
  B (4 GPUs, 1 h) is planned first, at 1 h (when X ends): backfill reserves it for 10 h (X's limit);
  C (2 GPUs, 9 h, limit 9.5 h) is planned after B, at 2 h; by the limits it ends before B's
  reservation, so backfill starts it now, and B then waits for C until 9 h.
"""

from __future__ import annotations

import pytest

from msched.policy.reservations import BeginTimeChange, BeginTimeOptions, begin_time_changes
from msched.policy.snapshot import ClusterSnapshot, JobDecision, NodeState, PendingJob, Plan, RunningJob
from msched.rounds.core import round_policy, run_round
from msched.rounds.holds import apply_begin_times, begin_time_owners, replay
from msched.slurm.base import JobRequest
from msched.store.db import Store
from msched.store.holds import HoldJournal
from msched.tag import JobTag, with_tag
from slurm_sim.client import SimClient

H = 3600.0
ON = BeginTimeOptions(enabled=True)


def snapshot(c_runtime_h: float = 9.0, c_managed: bool = True) -> ClusterSnapshot:
    return ClusterSnapshot(
        now=0.0, nodes=(NodeState("n1", "a100", 4, 2),),
        running=(RunningJob("X", "a100", 2, 1 * H, ("n1",)),),
        pending=(PendingJob("B", 0.0, 4, 10, {"a100": 1 * H}, time_limit_s=2 * H),
                 PendingJob("C", 1.0, 2, 5, {"a100": c_runtime_h * H} if c_managed else {},
                            time_limit_s=9.5 * H, managed=c_managed)))


def plan(c_start_h: float = 2.0) -> Plan:
    """The plan the round holds: B at 1 h (X's estimated end), C after it."""
    return Plan("msched", [JobDecision("B", 10, ("a100",), 1 * H, 2 * H, {"a100": 1 * H}),
                           JobDecision("C", 5, ("a100",), c_start_h * H, (c_start_h + 9) * H, {"a100": 9 * H})])


# ----------------------------------------------------------------------------- the decision
def test_a_job_backfill_would_start_on_the_planned_gpus_waits_until_its_planned_start():
    (change,) = begin_time_changes(snapshot(), plan(), ours={}, options=ON)
    assert change.job_id == "C" and change.when == 2 * H and change.old is None
    # started now, C would hold 2 GPUs until 9 h: B (needing all 4) 8 h later than planned
    assert "job B" in change.reason and "28800s later" in change.reason


def test_no_write_when_the_job_would_not_delay_anyone_or_is_not_msched_s():
    # C ending (by its estimate) before X does delays nobody: backfill may start it
    assert begin_time_changes(snapshot(c_runtime_h=0.5), plan(), ours={}, options=ON) == []
    assert begin_time_changes(snapshot(c_managed=False), plan(), ours={}, options=ON) == []   # plain job
    assert begin_time_changes(snapshot(), plan(), ours={}, foreign={"C"}, options=ON) == []    # the user's begin
    assert begin_time_changes(snapshot(), plan(), ours={}, options=BeginTimeOptions()) == []  # off by default
    assert begin_time_changes(snapshot(), plan(), ours={}, options=BeginTimeOptions(True, max_jobs=0)) == []


def test_the_begin_time_is_never_beyond_the_planned_start_nor_the_horizon():
    (far,) = begin_time_changes(snapshot(), plan(c_start_h=2.0), ours={},
                                options=BeginTimeOptions(True, horizon_s=1.5 * H))
    assert far.when == 1.5 * H            # bounded by the horizon, below the planned start (2 h)


def test_msched_s_own_begin_time_is_left_moved_or_cleared_as_the_plan_moves():
    assert begin_time_changes(snapshot(), plan(), ours={"C": 2 * H + 60}, options=ON) == []   # within tolerance
    (earlier,) = begin_time_changes(snapshot(), plan(c_start_h=2.0), ours={"C": 5 * H}, options=ON)
    assert earlier == BeginTimeChange("C", 2 * H, 5 * H, "the plan starts it earlier")
    (cleared,) = begin_time_changes(snapshot(), plan(c_start_h=0.0), ours={"C": 2 * H}, options=ON)
    assert cleared.when is None and cleared.old == 2 * H


def test_at_most_max_jobs_writes_a_round():
    pend = [PendingJob("B", 0.0, 4, 100, {"a100": 1 * H})]
    decisions = [JobDecision("B", 100, ("a100",), 1 * H, 2 * H)]
    for k in range(6):                    # six 1-GPU jobs planned after B, each of which would delay it
        pend.append(PendingJob(f"C{k}", 1.0 + k, 1, 50 - k, {"a100": 5 * H}, time_limit_s=9 * H))
        decisions.append(JobDecision(f"C{k}", 50 - k, ("a100",), (2 + 5 * (k // 4)) * H, (7 + 5 * (k // 4)) * H))
    snap = ClusterSnapshot(0.0, (NodeState("n1", "a100", 4, 2),), (RunningJob("X", "a100", 2, 1 * H, ("n1",)),),
                           tuple(pend))
    changes = begin_time_changes(snap, Plan("msched", decisions), ours={}, options=BeginTimeOptions(True, max_jobs=3))
    assert [c.job_id for c in changes] == ["C0", "C1", "C2"]     # Slurm's order: the ones backfill tries first


# ----------------------------------------------------------------------------- the simulator
def sim_scenario(lever: bool):
    """The module's scenario on the simulator with Slurm's backfill, one round at t=0 (msched, jct)."""
    c = SimClient.from_spec("a100:4x1")
    est = {"X": 1 * H, "B": 1 * H, "C": 9 * H}

    def submit(name: str, gpus: int, runtime_h: float, limit_h: float) -> str:
        tag = with_tag(JobTag(model="vgg16", ref="vgg16", iters=1000, bs=12), None)
        return c.submit(JobRequest(name=name, num_gpus=gpus, time_limit_s=limit_h * H, comment=tag,
                                   extra={"runtime_s": runtime_h * H}))
    x = submit("X", 2, 1, 10)
    c.advance(0)
    b, cj = submit("B", 4, 1, 2), submit("C", 2, 9, 9.5)
    policy = round_policy("msched", objective="jct", backfill=True, planner="greedy")
    result = run_round(c, policy, lambda job, tag: {"a100": est[job.name]}, now=c.now(),
                       begin_times=BeginTimeOptions(enabled=lever))
    c.sim.run()
    jobs = {j.job_id: j for j in c.finished_jobs()}
    return result, jobs[x], jobs[b], jobs[cj]


def test_simulator_without_the_lever_backfill_starts_c_and_b_waits():
    _, _, b, cj = sim_scenario(lever=False)
    assert cj.start_time == 0.0 and b.start_time == 9 * H


def test_simulator_with_the_lever_b_starts_as_planned_and_c_at_its_begin_time():
    result, x, b, cj = sim_scenario(lever=True)
    assert [(ch.job_id, ch.when) for ch in result.begin_times] == [(cj.job_id, 2 * H)]
    assert x.end_time == 1 * H and b.start_time == 1 * H and cj.start_time == 2 * H
    # the trade: mean completion 19 h -> 13 h... and the last job ends 1 h later (11 h, not 10 h)
    assert cj.end_time == 11 * H


def test_simulator_job_with_a_begin_time_neither_starts_nor_blocks_until_then():
    c = SimClient.from_spec("a100:1x1", backfill=False)
    first = c.submit(JobRequest(name="a", num_gpus=1, time_limit_s=600, extra={"runtime_s": 100}))
    second = c.submit(JobRequest(name="b", num_gpus=1, time_limit_s=600, extra={"runtime_s": 100}))
    c.set_begin_time(first, 500)
    c.advance(0)
    view = {j.job_id: j for j in c.jobs()}
    assert view[first].reason == "BeginTime" and view[first].begin_time == 500
    assert view[second].is_running          # the strict scheduler passed over the first job
    c.advance(500)
    assert {j.job_id: j for j in c.jobs()}[first].is_running    # at its begin time, by itself
    assert c.sim.jobs[first].start_time == 500


# ----------------------------------------------------------------------------- the journal
def test_round_records_each_begin_time_before_writing_and_release_clears_it(tmp_path):
    c = SimClient.from_spec("a100:4x1")
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    job = c.submit(JobRequest(name="j", num_gpus=1, time_limit_s=600, extra={"runtime_s": 100}))
    calls = []

    class Watching(SimClient):
        def set_begin_time(self, job_id, when):  # noqa: ANN001, ANN202
            calls.append([(e.job_id, e.value) for e in journal.open_entries()])   # what is on disk already
            super().set_begin_time(job_id, when)
    w = Watching(c.sim)
    written, skipped = apply_begin_times(w, [BeginTimeChange(job, 300.0, None, "test")], journal)
    assert calls == [[(job, "300")]] and len(written) == 1 and skipped == []
    assert begin_time_owners(c.jobs(), journal, c.now()) == ({job: 300.0}, set())
    # the owner moves it (their right): no longer msched's, and --release leaves it alone
    c.sim.set_begin_time(c.sim.jobs[job], 400.0)
    assert begin_time_owners(c.jobs(), journal, c.now()) == ({}, {job})
    assert replay(c, journal, everything=True) == [] and journal.open_entries() == []
    assert c.jobs()[0].begin_time == 400.0
    # msched's own: --release clears it, the job starts at once
    apply_begin_times(c, [BeginTimeChange(job, 900.0, None, "again")], journal)
    assert replay(c, journal, everything=False) == []           # a round's replay leaves a future one
    assert replay(c, journal, everything=True) == [job] and journal.open_entries() == []
    c.advance(0)
    assert c.jobs()[0].is_running


@pytest.mark.parametrize("died", ["before the call", "after the call"])
def test_an_interrupted_write_leaves_nothing_that_release_does_not_undo(tmp_path, died):
    c = SimClient.from_spec("a100:4x1")
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    job = c.submit(JobRequest(name="j", num_gpus=1, time_limit_s=600, extra={"runtime_s": 100}))

    class Dying(SimClient):
        def set_begin_time(self, job_id, when):  # noqa: ANN001, ANN202
            if died == "after the call":
                super().set_begin_time(job_id, when)
            raise KeyboardInterrupt              # SIGTERM
    with pytest.raises(KeyboardInterrupt):
        apply_begin_times(Dying(c.sim), [BeginTimeChange(job, 300.0, None, "test")], journal)
    assert len(journal.open_entries()) == 1      # on disk before the call
    replay(c, journal, everything=True)          # msched reorder --release
    assert journal.open_entries() == []
    c.advance(0)
    assert c.jobs()[0].is_running                # nothing holds it
