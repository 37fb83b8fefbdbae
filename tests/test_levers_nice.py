"""The nice priority lever (config `priority_lever = "nice"`, issue 13's leftover): the plan's order
written as nice offsets, which multifactor keeps applying as jobs age (an explicit priority freezes the
job's age and fair-share). The dev-cluster test with multifactor's age weight on is in
tests/test_levers_slurm.py."""

from __future__ import annotations

from msched.config import Config, ConfigError
from msched.policy import get_policy
from msched.policy.snapshot import JobDecision, Plan
from msched.rounds.core import JobView, diff_plan, nice_for, run_round
from msched.rounds.holds import replay
from msched.slurm.base import NICE_LIMIT, JobRequest
from msched.slurm.cli.parsers import job_from_json
from msched.store.db import Store
from msched.store.holds import HoldJournal
from msched.tag import JobTag, with_tag
from slurm_sim.client import SimClient


def test_nice_for_moves_the_job_to_the_target_and_stays_in_slurm_s_range():
    # Slurm shows plugin value - nice: 1000 with nice 0 is plugin 1000; to show 1500, nice -500
    assert nice_for(1000, 0, 1500) == -500
    assert nice_for(1500, -500, 900) == 100          # plugin value 1000 -> nice 100 shows 900
    assert nice_for(1, 0, 4_000_000_000) == -NICE_LIMIT
    assert nice_for(4_000_000_000, 0, 1) == NICE_LIMIT


def test_diff_writes_nice_offsets_only_for_managed_jobs_that_move():
    views = {"1": JobView("1", 1000, "", managed=True), "2": JobView("2", 900, "", managed=True, nice=100),
             "3": JobView("3", 950, "", managed=False), "4": JobView("4", 800, "", managed=True, nice=-5)}
    plan = Plan("msched", [JobDecision("1", 900, ()), JobDecision("2", 1000, ()), JobDecision("3", 2000, ()),
                           JobDecision("4", 800, ())])
    got = [(u.job_id, u.field, u.value, u.old) for u in diff_plan(views, plan, priority_lever="nice")]
    assert got == [("1", "nice", 100, 0), ("2", "nice", 0, 100)]      # plain 3 never, unmoved 4 not written
    assert [u.field for u in diff_plan(views, plan)] == ["priority", "priority"]   # the default lever


def test_config_refuses_an_unknown_priority_lever():
    import pytest
    with pytest.raises(ConfigError, match="priority_lever 'age' is not one of priority, nice"):
        Config(priority_lever="age")._checked()


def test_squeue_json_nice_is_read_as_signed():
    # squeue --json (22.05.8) prints nice as its unsigned 32-bit pattern: -7 as 4294967289, 0 as null
    base = {"job_id": 5, "job_state": "PENDING"}
    read = [job_from_json({**base, "nice": v}, Config(), {}).nice for v in (4294967289, None, 500, 2147483645)]
    assert read == [-7, 0, 500, 2147483645]


def _sim_round(lever: str, tmp_path=None):  # noqa: ANN001, ANN202
    c = SimClient.from_spec("a100:1x1")
    blocker = c.submit(JobRequest(name="b", num_gpus=1, time_limit_s=600, extra={"runtime_s": 600}))
    c.advance(0)
    tag = with_tag(JobTag(model="vgg16", ref="vgg16", iters=1000, bs=12), None)
    est = {"long": 3000.0, "short": 100.0}
    ids = {name: c.submit(JobRequest(name=name, num_gpus=1, time_limit_s=4000, comment=tag,
                                     extra={"runtime_s": est[name]})) for name in ("long", "short")}
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db")) if tmp_path else None
    result = run_round(c, get_policy("msched", objective="jct", planner="greedy"),
                       lambda job, _tag: {"a100": est[job.name]}, priority_lever=lever, journal=journal)
    c.sim.run()
    starts = {name: c.sim.jobs[j].start_time for name, j in ids.items()}
    return c, blocker, ids, result, starts, journal


def test_the_simulator_starts_jobs_in_the_same_order_under_either_lever():
    by_priority = _sim_round("priority")[4]
    _, _, _, result, by_nice, _ = _sim_round("nice")
    assert "nice" in {u.field for u in result.updates} and "priority" not in {u.field for u in result.updates}
    assert by_nice == by_priority and by_nice["short"] < by_nice["long"]    # jct: the short job first


def test_release_puts_back_the_job_s_own_nice(tmp_path):
    c = SimClient.from_spec("a100:1x1")
    c.submit(JobRequest(name="b", num_gpus=1, time_limit_s=600, extra={"runtime_s": 600}))
    c.advance(0)
    tag = with_tag(JobTag(model="vgg16", ref="vgg16", iters=1000, bs=12), None)
    est = {"long": 3000.0, "short": 100.0}
    ids = {n: c.submit(JobRequest(name=n, num_gpus=1, time_limit_s=4000, comment=tag, extra={"runtime_s": est[n]}))
           for n in ("long", "short")}
    c.sim.set_nice(c.sim.jobs[ids["short"]], 30)         # its owner's own --nice
    journal = HoldJournal(Store(f"sqlite:///{tmp_path}/msched.db"))
    result = run_round(c, get_policy("msched", objective="jct", planner="greedy"),
                       lambda job, _tag: {"a100": est[job.name]}, priority_lever="nice", journal=journal)
    written = {u.job_id: u.value for u in result.updates if u.field == "nice"}
    assert ids["short"] in written                       # raised above the long job: a negative offset
    assert written[ids["short"]] < 0
    own = {e.job_id: e.value for e in journal.open_entries("nice")}
    assert own == {j: ("30" if j == ids["short"] else "0") for j in written}    # recorded before the writes
    assert replay(c, journal, everything=False) == [] and journal.open_entries("nice")   # a round keeps them
    replay(c, journal, everything=True)                    # msched reorder --release
    assert {j.job_id: j.nice for j in c.jobs() if j.job_id in ids.values()} == {ids["long"]: 0, ids["short"]: 30}
    assert journal.open_entries() == []
