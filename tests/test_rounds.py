"""The round core against the simulator's SlurmClient (slurm_sim.client.SimClient, the same interface the
real backends implement), plus the constraint forms checked on the real local Slurm (slurm-marked)."""

from __future__ import annotations

import pytest

from msched.estimate.estimators import TagEstimator
from msched.estimate.perf_table import PerfRow, PerfTable
from msched.policy import get_policy
from msched.policy.snapshot import JobDecision, Plan
from msched.rounds.core import JobView, Update, diff_plan, expand_hostlist, release, run_round
from msched.slurm.base import JobRequest, SlurmError, SlurmUnavailable
from msched.tag import JobTag, with_tag
from slurm_sim.client import SimClient

# vgg-like: 4x faster on a100; mobilenet-like: as fast on titanv as on a100 (ms per iteration)
TRUTH = PerfTable([
    PerfRow("vgg16", "a100", 1, 12, "float", 25.0), PerfRow("vgg16", "titanv", 1, 12, "float", 100.0),
    PerfRow("mobilenet_v2", "a100", 1, 12, "float", 30.0), PerfRow("mobilenet_v2", "titanv", 1, 12, "float", 30.0),
])


def client(spec: str = "a100:1x1,titanv:1x1") -> SimClient:
    return SimClient.from_spec(spec, truth=TRUTH)


def submit(c: SimClient, model: str | None, iters: int = 36_000, *, gpu_type=None, constraint="", tag=True,
           pinned="", added="", runtime_s=None, limit=None) -> str:
    comment = with_tag(JobTag(model=model, ref=model, iters=iters, bs=12, pinned=pinned, added=added), None) \
        if tag and model else ""
    extra = {"model": model, "iterations": iters, "batch_size": 12} if model else {"runtime_s": runtime_s}
    return c.submit(JobRequest(name=model or "other", num_gpus=1, gpu_type=gpu_type, constraint=constraint,
                               comment=comment, extra=extra, time_limit_s=limit or runtime_s))


def blockers(c: SimClient, seconds: float = 3600.0) -> list[str]:
    """Unmanaged jobs filling every GPU now, so the queue behind them waits for a round."""
    ids = [submit(c, None, runtime_s=seconds, constraint=t) for t in ("a100", "titanv")]
    c.advance(0)
    assert all(j.is_running for j in c.jobs() if j.job_id in ids)
    return ids


def by_id(c: SimClient):
    return {j.job_id: j for j in c.jobs()}


def test_round_retypes_and_orders_then_a_second_round_writes_nothing():
    c = client()
    blockers(c)
    vgg = submit(c, "vgg16")               # 900 s on a100, 3600 s on titanv
    mob = submit(c, "mobilenet_v2")        # 1080 s on either
    c.advance(0)
    est = TagEstimator(TRUTH)
    res = run_round(c, get_policy("msched"), est)
    d = res.plan.by_job()
    assert d[vgg].gpu_types == ("a100",) and d[mob].gpu_types == ("titanv",)
    jobs = by_id(c)
    assert jobs[vgg].features == "a100" and jobs[mob].features == "titanv"
    assert {u.field for u in res.updates} <= {"features", "priority"}
    assert res.update_calls == len(res.updates) and not res.skipped
    again = run_round(c, get_policy("msched"), est)
    assert again.update_calls == 0 and again.updates == []
    c.run_until(3600 + 1)                  # blockers end: each job starts on its planned type
    jobs = by_id(c)
    assert jobs[vgg].gpu_type == "a100" and jobs[mob].gpu_type == "titanv"


def test_job_that_started_between_read_and_write_is_skipped():
    c = client("a100:1x1")
    blockers_a100 = submit(c, None, runtime_s=100.0)
    c.advance(0)
    first = submit(c, "mobilenet_v2", iters=1000)     # 30 s
    second = submit(c, "vgg16", iters=36_000)         # 900 s: LPT wants it first
    c.advance(0)
    jobs, nodes = c.jobs(), c.nodes()                  # the round reads...
    c.run_until(101)                                   # ...the blocker ends, `first` starts meanwhile
    assert by_id(c)[first].is_running and blockers_a100 not in by_id(c)
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH), jobs=jobs, nodes=nodes, now=c.now())
    assert first in res.skipped
    assert second in res.plan.by_job() and not by_id(c)[second].is_running
    assert all(u.job_id != first for u in res.updates)
    assert res.update_calls >= 1


class DiesAfter(SimClient):
    """The simulator's client, losing the controller after `n` writes (a round that dies mid-batch)."""

    writes_left: int | None = None

    def _write(self) -> None:
        if self.writes_left is not None:
            if self.writes_left <= 0:
                raise SlurmUnavailable("Unable to contact slurm controller (connect failure)")
            self.writes_left -= 1

    def set_priority(self, job_id: str, priority: int) -> None:
        self._write()
        super().set_priority(job_id, priority)

    def set_features(self, job_id: str, features: str) -> None:
        self._write()
        super().set_features(job_id, features)


def test_round_that_dies_mid_batch_leaves_a_valid_queue_and_the_next_round_finishes_it():
    c = DiesAfter.from_spec("a100:1x1,titanv:1x1", truth=TRUTH)
    blockers(c)
    ids = [submit(c, m, iters=i) for m, i in (("vgg16", 36_000), ("mobilenet_v2", 20_000), ("vgg16", 9_000),
                                               ("mobilenet_v2", 50_000))]
    c.advance(0)
    before = {j.job_id: (j.priority, j.features) for j in c.jobs() if j.job_id in ids}
    est = TagEstimator(TRUTH)
    plan = run_round(c, get_policy("msched"), est, dry_run=True)
    assert len(plan.updates) > 3
    c.writes_left = 3
    with pytest.raises(SlurmUnavailable):
        run_round(c, get_policy("msched"), est)
    planned = {u.job_id: {} for u in plan.updates}
    for u in plan.updates:
        planned[u.job_id][u.field] = u.value
    for j in c.jobs():
        if j.job_id in ids:     # every job pending, each field either as it was or as planned
            assert j.is_pending
            assert j.priority in (before[j.job_id][0], planned.get(j.job_id, {}).get("priority"))
            assert j.features in (before[j.job_id][1], planned.get(j.job_id, {}).get("features"))
    c.writes_left = None
    res = run_round(c, get_policy("msched"), est)
    assert not res.skipped
    now = {j.job_id: j for j in c.jobs()}
    for job_id, fields in planned.items():
        assert now[job_id].features == fields.get("features", before[job_id][1])
    assert run_round(c, get_policy("msched"), est).updates == []


class RefusesFeaturesOf(SimClient):
    """The simulator's client, with Slurm refusing one job's new features (as scontrol does with
    "Invalid feature specification" when a node feature went away after the round read the nodes)."""

    refused: str | None = None

    def set_features(self, job_id: str, features: str) -> None:
        if job_id == self.refused:
            raise SlurmError(f"scontrol: error: Invalid feature specification for job {job_id}")
        super().set_features(job_id, features)


def test_a_refused_job_is_skipped_and_the_round_goes_on(caplog):
    c = RefusesFeaturesOf.from_spec("a100:1x1,titanv:1x1", truth=TRUTH)
    blockers(c)
    ids = [submit(c, m, iters=i) for m, i in (("vgg16", 36_000), ("mobilenet_v2", 20_000), ("vgg16", 9_000))]
    c.advance(0)
    est = TagEstimator(TRUTH)
    plan = run_round(c, get_policy("msched"), est, dry_run=True)
    retyped = [u.job_id for u in plan.updates if u.field == "features"]
    assert retyped
    c.refused = retyped[0]
    before = {j.job_id: (j.priority, j.features) for j in c.jobs()}
    res = run_round(c, get_policy("msched"), est)
    assert res.skipped == [c.refused] and "Invalid feature specification" in caplog.text
    now = {j.job_id: j for j in c.jobs()}
    assert (now[c.refused].priority, now[c.refused].features) == before[c.refused]   # none of its updates
    others = {u.job_id for u in plan.updates} - {c.refused}
    assert others
    for u in plan.updates:
        if u.job_id in others:
            assert getattr(now[u.job_id], u.field) == u.value                        # the rest is written
    assert set(ids) >= others


def test_dry_run_computes_the_plan_and_changes_nothing():
    c = client()
    blockers(c)
    vgg = submit(c, "vgg16")
    mob = submit(c, "mobilenet_v2")
    c.advance(0)
    before = {j.job_id: (j.priority, j.features) for j in c.jobs()}
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH), dry_run=True)
    assert res.dry_run and res.update_calls == 0 and res.updates
    assert {j.job_id: (j.priority, j.features) for j in c.jobs()} == before
    assert set(res.plan.by_job()) == {vgg, mob}


def test_pinned_and_unmanaged_jobs_keep_their_constraints_and_priorities():
    c = client()
    blockers(c)
    pinned = submit(c, "vgg16", gpu_type="titanv", pinned="titanv")     # typed gres: pinned
    by_constraint = submit(c, "vgg16", constraint="titanv", pinned="titanv")
    other = submit(c, None, runtime_s=50.0, limit=60.0)                   # not msub's
    mine = submit(c, "vgg16")
    c.advance(0)
    before = by_id(c)
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH))
    after = by_id(c)
    for jid in (pinned, by_constraint):
        assert after[jid].features == before[jid].features
        assert all(not (u.job_id == jid and u.field == "features") for u in res.updates)
    assert after[other].priority == before[other].priority and after[other].features == ""
    assert all(u.job_id != other for u in res.updates)
    assert after[mine].features == "a100"
    # the pinned jobs' GPUs count: the plan has them on titanv
    assert res.plan.by_job()[pinned].est_start is not None


def test_user_constraint_is_kept_and_anded_with_the_type(tmp_path):
    spec = tmp_path / "cluster.toml"
    spec.write_text('[[nodes]]\ntype = "a100"\ngpus = 1\ncount = 2\n\n'
                    '[[nodes]]\ntype = "titanv"\ngpus = 1\nfeatures = ["ib"]\n')
    c = SimClient.from_spec(str(spec), truth=TRUTH)
    jid = submit(c, "mobilenet_v2", constraint="ib&(a100|titanv)", added="a100|titanv")
    c.advance(0)
    assert by_id(c)[jid].is_running                   # titanv-1 is the one ib node
    jid2 = submit(c, "vgg16", constraint="ib")
    c.advance(0)
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH))
    assert res.views[jid2].user_features == "ib"
    # only titanv has ib: the plan keeps it there, and writes the type ANDed with the user's own feature
    assert by_id(c)[jid2].features == "ib&titanv"


def test_release_drops_msched_types_and_keeps_the_users(tmp_path):
    c = client()
    blockers(c)
    a = submit(c, "vgg16", constraint="titanv", added="titanv")
    b = submit(c, "mobilenet_v2")
    c.advance(0)
    run_round(c, get_policy("msched"), TagEstimator(TRUTH))
    assert by_id(c)[a].features == "a100"
    done = release(c)
    jobs = by_id(c)
    assert set(done) == {a, b}
    assert jobs[a].features == "" and jobs[b].features == ""
    assert jobs[a].priority > 0 and jobs[b].priority > 0      # released, not left held


def test_diff_plan_writes_features_before_priorities_and_only_changes():
    views = [JobView("1", 10, "a100", "", ("a100",), True),
             JobView("2", 20, "ib&a100", "ib", ("a100",), True),
             JobView("3", 30, "titanv", "titanv", (), True, pinned=True),
             JobView("4", 40, "", "", (), False)]
    plan = Plan("msched", [JobDecision("1", 10, ("a100",)), JobDecision("2", 25, ("titanv",)),
                           JobDecision("3", 5, ("a100",)), JobDecision("4", 1, ("a100",))])
    assert diff_plan(views, plan) == [Update("2", "features", "ib&titanv", "ib&a100"),
                                      Update("2", "priority", 25, 20), Update("3", "priority", 5, 30)]


def test_expand_hostlist():
    assert expand_hostlist("n[1-3,5],gpu07") == ["n1", "n2", "n3", "n5", "gpu07"]
    assert expand_hostlist("a100-[08-10]") == ["a100-08", "a100-09", "a100-10"]
    assert expand_hostlist("") == []


@pytest.mark.slurm
def test_constraint_forms_are_parsed_by_real_slurm(slurm_cluster):
    """What `combine` writes means what it says to slurmctld 22.05: (x|y)&(a|b) is an AND of two ORs
    (read flat, left to right, the first expression below would match titanxp's node)."""
    def test_only(constraint: str):
        return slurm_cluster.run(["sbatch", "--test-only", "-N1", f"--constraint={constraint}",
                                  "--wrap", "true"], timeout=60)

    none = test_only("(titanv|rtx2080ti)&(a100|titanxp)")
    assert none.returncode != 0, none.stderr
    one = test_only("(titanv|rtx2080ti)&(titanv|titanxp)")
    assert one.returncode == 0, one.stderr
    assert "n2" in (one.stdout + one.stderr)
    chain = test_only("titanv&(a100|titanv)")
    assert chain.returncode == 0 and "n2" in (chain.stdout + chain.stderr), chain.stderr


def test_starving_job_is_widened_to_every_feasible_type_and_put_first():
    c = client()
    blockers(c, seconds=7200.0)
    old = submit(c, "vgg16")
    c.advance(500)
    new = submit(c, "vgg16", iters=72_000)             # longer: LPT would put it first
    c.advance(0)
    # the greedy plan widens to every feasible type (the optimizing planner only to near-fastest ones:
    # test_planner); the round writes the widened constraint
    res = run_round(c, get_policy("msched", planner="greedy"), TagEstimator(TRUTH), starvation_age_s=300.0)
    d = res.plan.by_job()
    assert d[old].gpu_types == ("a100", "titanv") and d[old].priority > d[new].priority
    assert by_id(c)[old].features == "a100|titanv"
    calm = run_round(c, get_policy("msched", objective="makespan", planner="greedy"), TagEstimator(TRUTH),
                     starvation_age_s=None, dry_run=True)
    assert calm.plan.by_job()[new].priority > calm.plan.by_job()[old].priority


def test_build_snapshot_reads_pins_user_parts_holds_and_running_ends():
    from msched.rounds.core import build_snapshot
    from msched.slurm.base import PENDING, RUNNING, SlurmJob, SlurmNode

    def tagged(**kw) -> str:
        return with_tag(JobTag(model="vgg16", ref="vgg16", iters=36_000, bs=12, **kw), None)

    nodes = [SlurmNode("n1", "A100", 1, 1, ("a100", "ib"), "ALLOCATED"), SlurmNode("n2", "titanv", 1, 0, ("titanv",)),
             SlurmNode("n3", "titanv", 1, 0, ("titanv",), "DOWN+DRAIN")]
    jobs = [
        SlurmJob("1", RUNNING, num_gpus=1, start_time=0.0, nodes="n1", comment=tagged(), time_limit_s=10_000.0),
        SlurmJob("2", PENDING, priority=50, num_gpus=1, gres_gpu_type="titanv", comment=tagged(pinned="titanv")),
        SlurmJob("3", PENDING, priority=40, num_gpus=1, features="ib&(a100|titanv)", comment=tagged(added="a100|titanv")),
        SlurmJob("4", PENDING, priority=0, num_gpus=1, comment=tagged(), reason="JobHeldUser"),
        SlurmJob("5", PENDING, priority=30, num_gpus=1, features="titanv"),
        SlurmJob("6", PENDING, priority=20, num_gpus=0, comment=tagged()),
    ]
    snap, views = build_snapshot(jobs, nodes, TagEstimator(TRUTH), 2000.0, gpu_type_of=str.lower)
    assert [n.name for n in snap.nodes] == ["n1", "n2"]                 # the drained node is left out
    (run,) = snap.running
    assert run.gpu_type == "a100" and run.est_end == 2000.0 + 0.25 * 2000.0   # 900 s estimate, overdue
    pend = {p.job_id: p for p in snap.pending}
    assert set(pend) == {"2", "3", "5"}                                  # held and GPU-less jobs left out
    assert pend["2"].pinned_type == "titanv" and views["2"].pinned
    assert pend["3"].current_types == ("a100", "titanv") and views["3"].user_features == "ib"
    assert pend["3"].allowed_types == ("a100",)                          # only a100 nodes have ib
    assert not pend["5"].managed and pend["5"].allowed_types == ("titanv",)


def test_build_snapshot_leaves_jobs_with_unreadable_constraints_alone(caplog):
    """A constraint msched's parser refuses stops neither the round nor the other jobs: a managed job is
    left unwritable (never rewritten on a guess), and the reason is logged on one line."""
    from msched.rounds.core import build_snapshot
    from msched.slurm.base import PENDING, SlurmJob, SlurmNode

    tag = with_tag(JobTag(model="vgg16", ref="vgg16", iters=36_000, bs=12), None)
    nodes = [SlurmNode("n1", "a100", 1, 1, ("a100", "ib")), SlurmNode("n2", "titanv", 1, 1, ("titanv",))]
    jobs = [SlurmJob("1", PENDING, priority=50, num_gpus=1, features="ib&|opa", comment=tag),
            SlurmJob("2", PENDING, priority=40, num_gpus=1, features="(titanv", comment=None),
            SlurmJob("3", PENDING, priority=30, num_gpus=1, features="ib&(a100|titanv)", comment=tag)]
    with caplog.at_level("WARNING", logger="msched.rounds.core"):
        snap, views = build_snapshot(jobs, nodes, TagEstimator(TRUTH), 0.0, gpu_type_of=str.lower)
    assert {p.job_id for p in snap.pending} == {"1", "2", "3"}
    assert not views["1"].writable and views["3"].writable
    warned = [r.getMessage() for r in caplog.records if "bad constraint" in r.getMessage()]
    assert len(warned) == 2 and all("\n" not in m for m in warned)


# ----------------------------------------------------------------------------------- the shared entry point
def test_a_round_says_until_when_its_plan_holds_and_what_to_publish():
    """stable_until: the earliest time the clock alone changes the plan (hand-computed below); free_time
    is the plan's projection clamped to now, every type present."""
    c = client()
    vgg = submit(c, "vgg16", iters=36_000)           # runs at once on one type: 900 s on a100, 3600 s on titanv
    c.advance(0)
    started = by_id(c)[vgg]
    assert started.is_running
    blocker = submit(c, None, runtime_s=7200.0, constraint="titanv" if started.gpu_type == "a100" else "a100")
    c.advance(0)
    waiting = submit(c, "mobilenet_v2")
    c.advance(10.0)
    est_end = started.start_time + (900.0 if started.gpu_type == "a100" else 3600.0)
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH), starvation_age_s=100.0)
    # the waiting job (submitted at 0) starves at 100 s, before the running job's estimated end
    assert res.stable_until == pytest.approx(100.0)
    res = run_round(c, get_policy("msched"), TagEstimator(TRUTH), starvation_age_s=None)
    assert res.stable_until == pytest.approx(est_end)
    assert set(res.free_time) == {"a100", "titanv"} and min(res.free_time.values()) >= c.now()
    assert waiting in {p.job_id for p in res.snapshot.pending} and blocker in {r.job_id for r in res.snapshot.running}


def test_an_overdue_running_job_makes_every_round_due():
    """A running job past its estimate is expected to end later as the clock moves: no round is skipped."""
    from msched.rounds.core import round_due

    c = client("a100:1x1")
    short = PerfTable([PerfRow("vgg16", "a100", 1, 12, "float", 1.0)])     # msched believes 36 s
    jid = submit(c, "vgg16")                                               # truly 900 s
    submit(c, "mobilenet_v2")
    c.advance(100.0)
    assert by_id(c)[jid].is_running
    res = run_round(c, get_policy("msched"), TagEstimator(short), starvation_age_s=None)
    assert res.stable_until == pytest.approx(c.now())
    assert round_due(res.stable_until, c.now() + 60.0, changed=False)
    assert not round_due(float("inf"), c.now() + 60.0, changed=False)


# ----------------------------------------------------------------------------------- Slurm's scheduler
def test_scheduler_settings_read_as_scontrol_prints_them():
    from msched.slurm.base import SchedulerSettings

    s = SchedulerSettings.parse("sched/backfill", "bf_interval=1,bf_window=2880,bf_continue")
    assert s.backfill and s.parameter("bf_window") == "2880" and s.parameter("bf_continue") == ""
    assert s.parameter("bf_max_job_test", "500") == "500"
    builtin = SchedulerSettings.parse("sched/builtin", "(null)")
    assert not builtin.backfill and builtin.parameters == ()


@pytest.mark.parametrize("backfill", [True, False])
def test_the_reorderer_plans_for_the_scheduler_slurm_runs(backfill):
    from msched.config import Config
    from msched.rounds.reorder import Reorderer

    c = SimClient.from_spec("a100:1x1", truth=TRUTH, backfill=backfill)
    assert c.scheduler().backfill is backfill
    assert Reorderer(Config(), c, store=None).policy.backfill is backfill


@pytest.mark.slurm
def test_the_cli_backend_reads_the_scheduler_of_the_real_slurm(slurm_cluster):
    from msched.config import Config
    from msched.slurm.cli.client import CliClient

    s = CliClient(Config()).scheduler()
    assert s.scheduler_type == "sched/backfill" and s.backfill     # the dev cluster runs Slurm's default
    assert s.parameter("bf_interval") == "1"                        # set by scripts/slurm-dev-cluster.sh
