"""slurm_sim's semantics on small cases whose outcome is worked out by hand in each test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msched.estimate.perf_table import PerfRow, PerfTable
from msched.slurm.base import JobNotPending, JobRequest, SlurmError
from msched.slurm.feature_expr import ConstraintError, compile_constraint
from slurm_sim.client import SimClient
from slurm_sim.cluster import ClusterSpecError, parse_cluster
from slurm_sim.compare import Classifier, SimSetup, replay
from slurm_sim.metrics import jct_floor, lower_bound, percentile_nearest_rank
from slurm_sim.simulator import SimError
from slurm_sim.trace import TraceJob


def table(*rows: tuple[str, str, float]) -> PerfTable:
    """Single-GPU rows at batch 12: (model, type, iter_ms)."""
    return PerfTable(PerfRow(m, t, 1, 12, "float", ms) for m, t, ms in rows)


def job(client: SimClient, gpus: int = 1, seconds: float = 100, **kw) -> str:
    return client.submit(JobRequest(name=kw.pop("name", "j"), num_gpus=gpus, extra={"runtime_s": seconds}, **kw))


def state(client: SimClient, jid: str):
    return client.sim.jobs[jid]


# ------------------------------------------------------------------------------ cluster specs
def test_cluster_spec_string_and_errors(tmp_path):
    c = parse_cluster("a100:8x4,rtx2080ti:4x8")
    assert c.gpus_total == {"a100": 32, "rtx2080ti": 32}
    assert [n.name for n in c.nodes[:2]] == ["a100-1", "a100-2"]
    assert c.nodes[0].features == ("a100",)
    assert c.fits("a100", 16) and not c.fits("a100", 12) and not c.fits("a100", 40)
    for bad in ("a100:8", "a100:0x2", ":4x1", "a100:4x1,,"):
        with pytest.raises(ClusterSpecError) as exc:
            parse_cluster(bad)
        assert "\n" not in str(exc.value)


def test_cluster_toml_with_features(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[partition]\ndefault_time_s = 3600\n[[nodes]]\ntype = "a100"\ngpus = 4\ncount = 2\n'
                 'features = ["ib"]\n[[nodes]]\ntype = "titanv"\ngpus = 2\n')
    c = parse_cluster(str(f))
    assert c.default_time_s == 3600
    assert [(n.name, n.gpus, n.features) for n in c.nodes] == [
        ("a100-1", 4, ("a100", "ib")), ("a100-2", 4, ("a100", "ib")), ("titanv-1", 2, ("titanv",))]
    f.write_text('[[nodes]]\ntype = "a100"\ngpus = 4\ncolour = "red"\n')
    with pytest.raises(ClusterSpecError, match="unknown key.*colour"):
        parse_cluster(str(f))


def satisfies(text: str, features: set[str]) -> bool:
    """The simulator's reading: msched's parser with counts refused."""
    pred = compile_constraint(text, counts="refuse")
    return pred is None or pred(frozenset(features))


def test_constraint_expressions_left_to_right_like_slurm():
    assert satisfies("a100|titanv", {"titanv"})
    assert not satisfies("a100&ib", {"a100"})
    assert satisfies("ib&(a100|titanv)", {"ib", "titanv"})
    assert not satisfies("a100|titanv&ib", {"a100"})       # (a100|titanv)&ib, as slurmctld reads it
    assert satisfies("[a100|titanv],ib", {"ib", "a100"})
    assert compile_constraint("", counts="refuse") is None
    with pytest.raises(ConstraintError):
        compile_constraint("a100|", counts="refuse")


@pytest.mark.parametrize(("constraint", "why"), [
    ("[a100*1&titanv*1]", "counts"), ("a100|", "ends after"), ("(a100|titanv", "missing"), ("a100 ib", "unexpected"),
])
def test_unreadable_constraints_are_refused_in_one_line_at_submit_and_update(constraint, why):
    """The simulator refuses what it cannot honour (node counts) and what cannot be read, as sbatch and
    scontrol refuse them: a one-line error, the job never queued, a queued job's constraint unchanged."""
    c = SimClient.from_spec("a100:1x1,titanv:1x1")
    with pytest.raises(SlurmError, match=why) as exc:
        job(c, constraint=constraint)
    assert "\n" not in str(exc.value) and not c.jobs()
    j = job(c, seconds=100, constraint="a100", hold=True)
    with pytest.raises(SlurmError, match=why):
        c.set_features(j, constraint)
    assert state(c, j).features == "a100"


# ------------------------------------------------------------------------------ scheduling rules
def test_job_waits_for_its_type_and_untyped_jobs_take_any():
    c = SimClient.from_spec("a100:1x1,titanv:1x1")
    a = job(c, seconds=100, constraint="a100")
    b = job(c, seconds=50, constraint="a100")          # waits for a100 although titanv is idle
    c.advance(0)
    assert state(c, a).gpu_type == "a100" and state(c, b).state == "PENDING"
    view = {j.job_id: j for j in c.jobs()}
    assert view[b].reason == "Resources"
    c.run_until(1000)
    assert (state(c, b).start_time, state(c, b).end_time, state(c, b).gpu_type) == (100, 150, "a100")

    c2 = SimClient.from_spec("a100:1x1,titanv:1x1")
    a = job(c2, seconds=100, constraint="a100")
    u = job(c2, seconds=30)                             # untyped: takes the idle titanv at once
    c2.advance(0)
    assert (state(c2, u).gpu_type, state(c2, u).start_time) == ("titanv", 0)


def test_requeue_restarts_a_running_job_from_its_beginning_and_ignores_its_old_end():
    """scontrol requeue, by hand: a (400 s on a100, 1000 s on titanxp) starts on titanxp at 0; x frees the
    a100 at 100; a is requeued and constrained to a100: it runs 100-500 (its first 100 s are lost), b gets
    the titanxp at 100 and ends at 400, and the first run's end event at 1000 changes nothing."""
    truth = table(("m", "a100", 100.0), ("m", "titanxp", 250.0))
    c = SimClient.from_spec("a100:1x1,titanxp:1x1", truth=truth)
    x = job(c, seconds=100, constraint="a100")
    a = c.submit(JobRequest(name="a", num_gpus=1, constraint="titanxp",
                            extra={"model": "m", "iterations": 4000, "batch_size": 12}))
    b = job(c, seconds=300, constraint="titanxp")
    c.run_until(100)
    assert state(c, x).state == "COMPLETED" and (state(c, a).gpu_type, state(c, a).start_time) == ("titanxp", 0)
    assert state(c, b).state == "PENDING"
    c.sim.requeue(state(c, a))
    c.sim.set_features(state(c, a), "a100")
    with pytest.raises(SimError):
        c.sim.requeue(state(c, b))                  # pending: nothing to requeue
    c.run_until(2000)
    assert (state(c, a).gpu_type, state(c, a).start_time, state(c, a).end_time) == ("a100", 100, 500)
    assert (state(c, a).state, state(c, a).requeues) == ("COMPLETED", 1)
    assert (state(c, b).gpu_type, state(c, b).start_time, state(c, b).end_time) == ("titanxp", 100, 400)
    assert c.sim.free == [1, 1] and not c.sim.active


def test_top_job_blocks_lower_ones_without_backfill():
    """Strict priority order: job 2 waits for a100 and blocks job 3, which wants the idle titanv."""
    c = SimClient.from_spec("a100:1x1,titanv:1x1", scheduler="builtin")
    job(c, seconds=100, constraint="a100")
    b = job(c, seconds=10, constraint="a100")
    d = job(c, seconds=10, constraint="titanv")
    c.advance(0)
    assert state(c, d).state == "PENDING"
    c.run_until(1000)
    assert state(c, b).start_time == 100 and state(c, d).start_time == 100


def test_priority_order_is_obeyed():
    c = SimClient.from_spec("a100:1x1")
    ids = [job(c, seconds=10, name=n) for n in ("low", "high", "mid")]
    for jid, prio in zip(ids, (10, 30, 20), strict=True):
        c.set_priority(jid, prio)
    c.run_until(100)
    starts = {state(c, j).name: state(c, j).start_time for j in ids}
    assert starts == {"high": 0, "mid": 10, "low": 20}


def test_equal_priority_goes_by_submit_time():
    c = SimClient.from_spec("a100:1x1")
    first = job(c, seconds=10)
    c.advance(5)                                        # first runs 0-10
    second = job(c, seconds=10)
    third = job(c, seconds=10)
    for jid in (first, second, third):
        if state(c, jid).state == "PENDING":
            c.set_priority(jid, 7)
    c.run_until(100)
    assert [state(c, j).start_time for j in (first, second, third)] == [0, 10, 20]


@pytest.mark.parametrize("backfill", [False, True])
def test_backfill_only_when_enabled_and_only_by_time_limits(backfill):
    """a100:4x1. j1 (2 GPUs, limit 100) runs; j2 (4 GPUs) is top and reserved at 100.
    j3 (2 GPUs, limit 50) fits before the reservation: backfilled at 0 only with backfill on.
    j4 (2 GPUs, runs 10 s but limit 150) would delay j2 by its limit: never backfilled."""
    c = SimClient.from_spec("a100:4x1", backfill=backfill)
    j1 = job(c, 2, seconds=100, time_limit_s=100)
    c.advance(0)
    j2 = job(c, 4, seconds=100, time_limit_s=100)
    j3 = job(c, 2, seconds=50, time_limit_s=50)
    j4 = job(c, 2, seconds=10, time_limit_s=150)
    for jid, prio in ((j2, 300), (j3, 200), (j4, 100)):
        c.set_priority(jid, prio)
    c.run_until(1000)
    assert state(c, j1).start_time == 0
    assert state(c, j2).start_time == 100
    assert state(c, j3).start_time == (0 if backfill else 200)
    assert state(c, j4).start_time == 200 if not backfill else state(c, j4).start_time >= 200


def test_jobs_without_limit_get_partition_default_for_backfill(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[partition]\ndefault_time_s = 40\n[[nodes]]\ntype = "a100"\ngpus = 4\n')
    c = SimClient.from_spec(str(f), backfill=True)
    job(c, 2, seconds=40)                               # limit: the default, 40
    c.advance(0)
    top = job(c, 4, seconds=10, time_limit_s=10)
    small = job(c, 2, seconds=30)                       # default limit 40 > 40 - 0? ends at 40 == reservation
    c.set_priority(top, 100)
    c.set_priority(small, 50)
    c.run_until(500)
    assert state(c, top).start_time == 40
    assert state(c, small).start_time == 0              # ends by 40, the reservation's start


def test_three_job_makespan_hand_computed():
    """a100 (100 ms/iter) and titanv (200 ms/iter), one GPU each, fifo, all at t=0:
    j1 1000 it -> a100 0-100; j2 1000 it -> titanv 0-200; j3 500 it -> a100 at 100, 100-150.
    makespan 200, mean JCT (100 + 200 + 150) / 3 = 150; simple bound max(100, (100+100+50)/2) = 125; the LP
    bound moves f a100-seconds of work to titanv (2f titanv-seconds): 250 - f = 2f, so 500/3."""
    truth = table(("resnet50", "a100", 100.0), ("resnet50", "titanv", 200.0))
    cluster = parse_cluster("a100:1x1,titanv:1x1")
    trace = [TraceJob(str(i), 0.0, "u", "resnet50", 1, 12, it) for i, it in ((1, 1000), (2, 1000), (3, 500))]
    setup = SimSetup(cluster, truth, truth, Classifier(["resnet50"], truth))
    result = replay(trace, "fifo", setup)
    got = {o.job_id: (o.gpu_type, o.start, o.end) for o in result.outcomes}
    assert got == {"1": ("a100", 0, 100), "2": ("titanv", 0, 200), "3": ("a100", 100, 150)}
    m = result.metrics
    assert m["makespan_s"] == pytest.approx(200)
    assert m["mean_jct_s"] == pytest.approx(150)
    assert m["lower_bound_s"] == pytest.approx(500 / 3, rel=1e-6)
    assert m["simple_lower_bound_s"] == pytest.approx(125)
    assert m["gpu_utilization"] == pytest.approx(350 / 400)
    assert lower_bound(trace, truth, cluster) <= m["makespan_s"]
    # the mean-JCT floor: each job at once on a100 (its fastest): (100 + 100 + 50) / 3, under fifo's 150
    assert jct_floor(trace, truth, cluster) == pytest.approx(250 / 3)


def test_multi_node_jobs_take_whole_nodes_of_one_type():
    c = SimClient.from_spec("a100:4x2,titanv:4x1")
    small = job(c, 1, seconds=10, constraint="a100")
    wide = job(c, 8, seconds=100)                       # needs both a100 nodes whole: waits for `small`
    c.advance(0)
    assert state(c, small).state == "RUNNING"
    assert state(c, wide).state == "PENDING"            # titanv has one node only: cannot hold 8
    c.run_until(10)
    w = state(c, wide)
    assert (w.state, w.start_time, w.gpu_type) == ("RUNNING", 10, "a100")
    view = next(j for j in c.jobs() if j.job_id == wide)
    assert view.num_nodes == 2 and view.nodes == "a100-1,a100-2"
    assert all(n.gpus_alloc == 4 for n in c.nodes() if n.gpu_type == "a100")
    with pytest.raises(SlurmError, match="node configuration is not available"):
        job(c, 6)                                       # not one node, not whole nodes


def test_no_data_is_refused_at_submit_never_parked_and_timeouts():
    """A job whose model has no truth on a type it may be sent to is refused in one line at submit (the
    old simulator queued it and never placed it there: a job a policy retyped to titanv was lost)."""
    truth = table(("vgg16", "a100", 10.0))              # vgg16 has no titanv data
    c = SimClient.from_spec("a100:1x1,titanv:1x1", truth=truth)
    ex = {"model": "vgg16", "iterations": 1000, "batch_size": 12}
    with pytest.raises(SlurmError, match="no data for vgg16 on titanv") as exc:
        c.submit(JobRequest(name="a", num_gpus=1, extra=ex))
    assert "\n" not in str(exc.value) and not c.sim.jobs
    a = c.submit(JobRequest(name="a", num_gpus=1, gpu_type="a100", extra=ex))      # pinned: a100 only
    b = c.submit(JobRequest(name="b", num_gpus=1, gpu_type="a100", extra=ex, time_limit_s=5))
    c.advance(0)
    assert state(c, a).gpu_type == "a100" and state(c, b).state == "PENDING"
    c.run_until(100)
    jb = state(c, b)
    assert (jb.start_time, jb.end_time, jb.state, jb.gpu_type) == (10, 15, "TIMEOUT", "a100")
    with pytest.raises(SlurmError, match="not in the truth table"):
        c.submit(JobRequest(name="x", num_gpus=1, extra={"model": "nope", "iterations": 1, "batch_size": 12}))
    with pytest.raises(SlurmError, match="no data for vgg16 on titanv"):
        c.submit(JobRequest(name="x", num_gpus=1, gpu_type="titanv", extra=ex))


def test_feature_constraints_with_other_features(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[[nodes]]\ntype = "a100"\ngpus = 1\nfeatures = ["ib"]\n[[nodes]]\ntype = "a100"\ngpus = 1\n'
                 '[[nodes]]\ntype = "titanv"\ngpus = 1\nfeatures = ["ib"]\n')
    c = SimClient.from_spec(str(f), scheduler="builtin")
    x = job(c, seconds=100, constraint="ib&(a100|titanv)")
    y = job(c, seconds=100, constraint="ib&a100")
    z = job(c, seconds=100, constraint="a100")
    c.advance(0)
    # x takes a100-1 (the first node that fits), so y (ib&a100) must wait, and z behind it (strict order)
    # although the plain a100 node is idle
    assert state(c, x).nodes == (0,)
    assert state(c, y).state == "PENDING" and state(c, z).state == "PENDING"
    c.run_until(1000)
    assert (state(c, y).start_time, state(c, y).nodes) == (100, (0,))
    assert (state(c, z).start_time, state(c, z).nodes) == (100, (1,))
    with pytest.raises(SlurmError, match="Invalid feature"):
        job(c, constraint="infiniband")


# ------------------------------------------------------------------------------ the client
def test_client_updates_hold_release_cancel():
    c = SimClient.from_spec("a100:1x1,titanv:1x1")
    run = job(c, seconds=100, constraint="a100")
    held = job(c, seconds=10, hold=True)
    waiting = job(c, seconds=10, constraint="a100")
    c.advance(0)
    with pytest.raises(JobNotPending):
        c.set_priority(run, 5)
    with pytest.raises(JobNotPending):
        c.set_features(run, "titanv")
    views = {j.job_id: j for j in c.jobs()}
    assert views[held].state == "PENDING" and views[held].priority == 0 and views[held].reason == "JobHeldUser"
    c.set_features(waiting, "titanv")                 # retype a pending job: starts at once on titanv
    c.advance(0)
    assert state(c, waiting).gpu_type == "titanv"
    c.release(held)
    c.advance(1)
    assert state(c, held).state == "PENDING"          # titanv busy until 10, a100 until 100: untyped waits
    c.run_until(10)
    assert state(c, held).start_time == 10
    c.cancel(run)
    finished = {j.job_id: j.state for j in c.finished_jobs()}
    assert finished[run] == "CANCELLED" and finished[waiting] == "COMPLETED"
    assert run not in {j.job_id for j in c.jobs()}
    with pytest.raises(SlurmError, match="Invalid job id"):
        c.hold("999")


def test_percentile_nearest_rank():
    assert percentile_nearest_rank(list(range(1, 101)), 99) == 99
    assert percentile_nearest_rank([5.0], 99) == 5.0


def test_submit_time_choice_uses_each_jobs_own_model():
    """msched-once (decided at submit): resnet50 is 4x faster on a100, vgg16 4x faster on titanv; each job
    gets its own model's fast type (a cached estimate of the previous job would send both to a100)."""
    truth = table(("resnet50", "a100", 100.0), ("resnet50", "titanv", 400.0),
                  ("vgg16", "a100", 400.0), ("vgg16", "titanv", 100.0))
    cluster = parse_cluster("a100:1x1,titanv:1x1")
    trace = [TraceJob("1", 0.0, "u", "resnet50", 1, 12, 1000), TraceJob("2", 0.0, "u", "vgg16", 1, 12, 1000)]
    setup = SimSetup(cluster, truth, truth, Classifier(["resnet50", "vgg16"], truth))
    for policy in ("msched-once", "msched", "oracle"):
        got = {o.job_id: (o.gpu_type, o.start, o.end) for o in replay(trace, policy, setup).outcomes}
        assert got == {"1": ("a100", 0, 100), "2": ("titanv", 0, 100)}, policy
    swapped = [TraceJob("2", 0.0, "u", "vgg16", 1, 12, 1000), TraceJob("1", 1.0, "u", "resnet50", 1, 12, 1000)]
    fifo = {o.job_id: o.gpu_type for o in replay(swapped, "fifo", setup).outcomes}
    assert fifo == {"2": "a100", "1": "titanv"}          # untyped: whatever is free, in node order


# ------------------------------------------------------------------------------ Slurm's scheduler settings
def toml(tmp_path, text: str):
    f = tmp_path / "cluster.toml"
    f.write_text(text)
    return str(f)


def test_default_scheduler_is_backfill_as_slurms_and_the_spec_can_say_builtin(tmp_path):
    assert SimClient.from_spec("a100:2x1").sim.scheduler == "backfill"
    spec = toml(tmp_path, '[scheduler]\ntype = "builtin"\n[[nodes]]\ntype = "a100"\ngpus = 2\n')
    assert SimClient.from_spec(spec).sim.scheduler == "builtin"
    assert SimClient.from_spec(spec, scheduler="backfill").sim.backfill
    settings = SimClient.from_spec(spec, scheduler="backfill", bf_window=7200).scheduler()
    assert settings.backfill and settings.parameter("bf_window") == "120" and settings.parameter("bf_interval") == "30"
    assert not SimClient.from_spec(spec).scheduler().backfill
    with pytest.raises(ClusterSpecError, match="choose from backfill, builtin"):
        parse_cluster(toml(tmp_path, '[scheduler]\ntype = "gang"\n[[nodes]]\ntype = "a100"\ngpus = 2\n'))


def _window_case(c: SimClient) -> tuple[str, str]:
    job(c, gpus=1, seconds=1000, time_limit_s=1000)
    b = job(c, gpus=2, seconds=10, time_limit_s=10)       # blocked until t=1000
    d = job(c, gpus=1, seconds=10, time_limit_s=5000)     # would delay b's reservation by its limit
    c.advance(0)
    return b, d


@pytest.mark.parametrize(("window", "d_start"), [(86400.0, 1010.0), (100.0, 0.0)])
def test_bf_window_no_reservation_beyond_it(window, d_start):
    """b's earliest start (t=1000) is inside a 1-day window: reserved, d waits. With bf_window 100 s, b
    gets no reservation (as Slurm: nothing planned past the window) and d starts at once."""
    c = SimClient.from_spec("a100:2x1", bf_window=window)
    b, d = _window_case(c)
    c.run_until(3000)
    assert state(c, d).start_time == d_start
    assert state(c, b).start_time == 1000.0          # d really ran 10 s: b is not delayed this time


def test_bf_max_job_test_limits_what_one_pass_looks_at():
    c = SimClient.from_spec("a100:2x1", bf_max_job_test=1, bf_window=100)
    b, d = _window_case(c)
    assert state(c, d).state == "PENDING"        # the pass tested b only


def test_partition_default_and_max_time(tmp_path):
    spec = toml(tmp_path, '[[partitions]]\nname = "short"\nnodes = ["a100"]\ndefault_time_s = 60\n'
                'max_time_s = 600\n[[partitions]]\nname = "long"\ndefault_time_s = 7200\n'
                '[[nodes]]\ntype = "a100"\ngpus = 1\n[[nodes]]\ntype = "titanv"\ngpus = 1\n')
    c = SimClient.from_spec(spec, scheduler="builtin")
    assert [p.name for p in c.sim.cluster.partitions] == ["short", "long"]
    with pytest.raises(SlurmError, match="exceeds some limit.*MaxTime 600") as exc:
        job(c, time_limit_s=601)
    assert "\n" not in str(exc.value)
    a = job(c, seconds=100)                                  # no limit: short's DefaultTime, killed at 60
    b = job(c, seconds=100, partition="long", constraint="titanv")   # long's DefaultTime 7200
    e = job(c, seconds=100, partition="short,long", time_limit_s=3600)  # above short's MaxTime: long only
    c.run_until(1000)
    assert (state(c, a).state, state(c, a).end_time, state(c, a).partition) == ("TIMEOUT", 60, "short")
    assert (state(c, b).state, state(c, b).limit_s, state(c, b).gpu_type) == ("COMPLETED", 7200, "titanv")
    assert state(c, e).partitions == ("long",)
    with pytest.raises(SlurmError, match="invalid partition name.*gpu"):
        job(c, partition="gpu")


def test_a_blocked_job_blocks_only_its_own_partitions_nodes(tmp_path):
    """Strict order is per partition: a job blocked in partition `a` stops later jobs on a's nodes only; a
    job of partition `t` starts on the idle titanv, a later `a` job on the free a100 slot does not."""
    spec = toml(tmp_path, '[[partitions]]\nname = "a"\nnodes = ["a100"]\n[[partitions]]\nname = "t"\n'
                'nodes = ["titanv"]\n[[nodes]]\ntype = "a100"\ngpus = 2\n[[nodes]]\ntype = "titanv"\ngpus = 1\n')
    c = SimClient.from_spec(spec, scheduler="builtin")
    job(c, gpus=1, seconds=100, partition="a")
    blocked = job(c, gpus=2, seconds=10, partition="a")
    small = job(c, gpus=1, seconds=10, partition="a")
    other = job(c, gpus=1, seconds=10, partition="t")
    c.advance(0)
    assert state(c, blocked).state == "PENDING" and state(c, small).state == "PENDING"
    assert state(c, other).state == "RUNNING"
    assert c.sim.job_view(state(c, blocked)).reason == "Resources"
    assert {n.name: n.partitions for n in c.nodes()} == {"a100-1": ("a",), "titanv-1": ("t",)}


def test_dependencies_wait_and_afterok_on_a_failed_job_cancels():
    c = SimClient.from_spec("a100:4x1")
    a = job(c, gpus=1, seconds=100, time_limit_s=200)
    b = c.submit(JobRequest(name="b", num_gpus=1, extra={"runtime_s": 10, "dependency": f"afterok:{a}"}))
    t = job(c, gpus=1, seconds=100, time_limit_s=50)           # will time out
    ok = c.submit(JobRequest(name="ok", num_gpus=1, extra={"runtime_s": 10, "dependency": f"afterok:{t}"}))
    anyway = c.submit(JobRequest(name="any", num_gpus=1, extra={"runtime_s": 10, "dependency": f"afterany:{t}"}))
    c.advance(0)
    assert state(c, b).state == "PENDING" and c.sim.job_view(state(c, b)).reason == "Dependency"   # GPUs idle
    c.run_until(1000)
    assert state(c, b).start_time == 100
    assert state(c, t).state == "TIMEOUT" and state(c, ok).state == "CANCELLED"
    assert state(c, anyway).start_time == 50
    with pytest.raises(SlurmError, match="dependency problem: no job 99"):
        c.submit(JobRequest(name="x", num_gpus=1, extra={"runtime_s": 1, "dependency": "afterok:99"}))


def test_metrics_count_every_submitted_job():
    """A policy that loses a job must not print the smaller makespan of the jobs that did finish."""
    from slurm_sim.metrics import JobOutcome, summarize
    done = JobOutcome("1", "p", "a100", 0.0, 0.0, 100.0, 1, "COMPLETED")
    lost = JobOutcome("2", "p", None, 0.0, None, None, 1, "PENDING")
    m = summarize("p", [done, lost], 4, 50.0)
    assert (m["submitted"], m["finished"], m["unfinished"]) == (2, 1, 1)
    assert m["makespan_s"] is None and m["ratio_to_lower_bound"] is None and m["mean_jct_s"] is None
    m = summarize("p", [done], 4, 50.0, submitted=2)          # a job never accepted counts too
    assert m["unfinished"] == 1 and m["makespan_s"] is None
    m = summarize("p", [done], 4, 50.0)
    assert m["makespan_s"] == 100.0 and m["ratio_to_lower_bound"] == 2.0


# ------------------------------------------------------------------------------ against the real dev cluster
START_ORDER = Path(__file__).resolve().parent / "data" / "start_order"


@pytest.mark.parametrize("scheduler", ["backfill", "builtin"])
def test_simulator_starts_the_recorded_queue_as_the_dev_cluster_did(scheduler):
    """tests/data/start_order: a hand-made queue run on the real dev cluster (Slurm 22.05) under
    sched/backfill and sched/builtin (record.py). The simulator, given the same cluster (cluster.toml) and
    the same submissions, starts the same jobs together in the same order, each within 3 s of the real
    start (Slurm starts a job up to ~1 s after it could)."""
    recorded = json.loads((START_ORDER / f"{scheduler}.json").read_text())
    assert recorded["scheduler_type"] == f"sched/{scheduler}"
    spec = json.loads((START_ORDER / "trace.json").read_text())
    c = SimClient.from_spec(str(START_ORDER / "cluster.toml"), scheduler=scheduler)
    ids = {j["name"]: c.submit(JobRequest(name=j["name"], num_gpus=j["gpus"], constraint=j["type"],
                                          time_limit_s=60.0 * j["limit_min"], wrap=f"sleep {j['sleep_s']}"))
           for j in spec["jobs"]}
    c.run_until(3600)
    real_t0 = min(r["start"] for r in recorded["jobs"])
    real = {r["name"]: r["start"] - real_t0 for r in recorded["jobs"]}
    sim = {n: state(c, i).start_time for n, i in ids.items()}

    def waves(starts: dict[str, float]) -> list[set[str]]:
        out: list[set[str]] = []
        last = None
        for name, t in sorted(starts.items(), key=lambda kv: kv[1]):
            if last is None or t - last > 3:
                out.append(set())
            out[-1].add(name)
            last = t
        return out

    assert waves(sim) == waves(real)
    assert all(abs(sim[n] - real[n]) <= 3 for n in real), (sim, real)
