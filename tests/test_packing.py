"""Packing (gres/shard): msub's opt-in and shard submission, the round's pairing of shard jobs.

msub runs its real decision (`build_submission`) against a site config and its cached `sinfo` answer
of a cluster with one shard node, as in tests/test_submit_decision.py; the configured sbatch has no
squeue beside it, so msub sees no shard jobs in the queue and predicts against the reference mix (the
real queue's partners are checked on a real cluster in tests/test_packing_slurm.py). The pairing is checked on hand-made speeds with hand-made predictions: what it must
choose is decided by the test's own numbers, not by the function.

msub's mechanism tests run under `pack_guard = "mean"` (the mean forest alone): under the default
quantile guard the shared table's torchvision models are outside Gavel's data (SEEN_RADIUS) and nothing
is packed, which the guard's own tests below check.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from msched.estimate.interference import JobSpeeds, load_model, speeds_from_tag
from msched.estimate.perf_table import PerfTable
from msched.estimate.runtime import TableTimes
from msched.msub.directives import msched_directives, settings_from_words
from msched.msub.main import build_submission
from msched.policy.packing import ShardJob, pair_shard_jobs, submit_verdict
from msched.rounds.packing import packing_round
from msched.slurm.base import SlurmJob, SlurmNode
from msched.tag import JobTag, parse_comment, with_tag

SBATCH = "/nonexistent/slurm/bin/sbatch"   # no squeue beside it: no partners, the reference mix
SLURM_CONF = "/nonexistent/slurm.conf"


def _site(tmp_path, monkeypatch, extra: str = "", busy: bool = True, guard: str = "mean") -> None:
    state = tmp_path / "state"
    state.mkdir()
    conf = tmp_path / "msched.toml"
    conf.write_text(f'sbatch = "{SBATCH}"\nstate_dir = "{state}"\npack_guard = "{guard}"\n{extra}')
    cache = tmp_path / "cache"
    cache.mkdir()
    nodes = [["n1", "gpu:a100:4,shard:8", ["a100", "shard"], ["gpu", "shared"]],
             ["n3", "gpu:rtx2080ti:4", ["rtx2080ti"], ["gpu"]],
             ["n4", "gpu:titanxp:4,shard:8", ["titanxp", "shard"], ["gpu", "shared"]]]
    (cache / "cluster_nodes.json").write_text(json.dumps({"key": f"{SLURM_CONF}|{SBATCH}", "time": time.time(),
                                                          "nodes": nodes}))
    monkeypatch.setenv("MSCHED_CONFIG", str(conf))
    monkeypatch.setenv("MSCHED_CACHE_DIR", str(cache))
    monkeypatch.setenv("SLURM_CONF", SLURM_CONF)
    if busy:        # a reorder round's published plan: every type busy for an hour, the plan ends in ten days
        from msched.rounds.reorder import publish_free_time
        now = time.time()
        publish_free_time(state / "gpu_free_time.json", now, dict.fromkeys(("a100", "rtx2080ti", "titanxp"), now + 3600),
                          now + 10 * 86400)


def _submit(argv: list[str], script: str | None = None, tmp_path=None) -> tuple[list[str], JobTag | None, list[str]]:
    if script is not None:
        path = tmp_path / "job.sh"
        path.write_text(script)
        argv = [*argv, str(path)]
    else:
        argv = [*argv, "--wrap", "python train.py"]
    sub, warnings = build_submission(argv)
    comment = [w.split("=", 1)[1] for w in sub.argv if w.startswith("--comment=")]
    return sub.argv, (parse_comment(comment[-1])[0] if comment else None), warnings


def test_pack_and_no_pack_are_flags_in_directives_and_options():
    pairs, _ = msched_directives("#!/bin/sh\n#MSCHED --model=resnet18 --pack\n")
    assert settings_from_words(pairs).pack is True
    pairs, _ = msched_directives("#!/bin/sh\n#MSCHED --no-pack --model resnet18\n")
    s = settings_from_words(pairs)
    assert s.pack is False and s.model == "resnet18"
    s = settings_from_words([("pack", "yes")])
    assert s.pack is None and any("takes no value" in p for p in s.problems)


def test_an_opted_in_small_job_goes_in_as_a_shard_job(tmp_path, monkeypatch):
    _site(tmp_path, monkeypatch)
    argv, tag, warnings = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1"])
    assert tag is not None and tag.pack is not None and tag.pack >= 1.0, (tag, warnings)
    assert "--partition=shared" in argv and "--gres=shard:1" in argv
    assert tag.added and argv[-1] == f"--constraint={tag.added}"      # msched's types that shard nodes have
    assert tag.why.startswith(f"packed on {tag.added.split('|')[0]}") and "reference mix" in tag.why
    assert set(tag.added.split("|")) <= {"a100", "titanxp"}


def test_a_packed_job_keeps_only_the_shard_types_where_it_was_judged_a_good_pair(tmp_path, monkeypatch):
    """It may land on any type its constraint names and meet a partner there, so each is judged: a
    model that predicts the pair pays on the titanxp and not on the a100 leaves the titanxp alone in
    the constraint; one that pays nowhere packs nothing and says why (the first type's reason)."""
    import msched.msub.packing as msub_packing

    class ByType:
        def __init__(self, good: set[str]) -> None:
            self.good = good

        def combined_throughput(self, a, b, t):  # noqa: ANN001, ANN201
            return 1.5 if t in self.good else 0.7

        def own_speed(self, a, b, t):  # noqa: ANN001, ANN201
            return 0.75 if t in self.good else 0.35

        slower_speed = own_speed

        def slower_for(self, guard):  # noqa: ANN001, ANN201
            return self.slower_speed

    _site(tmp_path, monkeypatch)
    monkeypatch.setattr(msub_packing, "load_model", lambda: ByType({"a100", "titanxp"}))
    argv, tag, _ = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"])
    assert set(tag.added.split("|")) == {"a100", "titanxp"}          # both pass: both kept
    monkeypatch.setattr(msub_packing, "load_model", lambda: ByType({"titanxp"}))
    argv, tag, _ = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"])
    assert tag.pack == 1.5 and tag.added == "titanxp" and argv[-1] == "--constraint=titanxp"
    assert tag.why.startswith("packed on titanxp:")
    monkeypatch.setattr(msub_packing, "load_model", lambda: ByType(set()))
    argv, tag, warnings = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"])
    assert tag.pack is None and "--gres=shard:1" not in argv
    assert any("not packed: one job predicted below 0.5x solo" in w for w in warnings), warnings


def test_a_queued_shard_job_packed_for_another_type_is_no_partner_to_check(tmp_path, monkeypatch):
    """Against the queue every shard job it may meet must be a good partner, but a shard job packed for
    the a100 only (its tag's `added`: the round keeps it there) never meets a job on a titanxp: there the
    job is judged against the reference mix, on the a100 against that job. Before pack9 one bad partner on
    any type refused every type."""
    import msched.msub.packing as msub_packing

    class BadBesideTheBig:
        """Pairs holding the batch-256 job crawl (0.35x), every other pair pays (0.75x each)."""

        def own_speed(self, a, b, t):  # noqa: ANN001, ANN201
            return 0.35 if 256 in (a.batch_size, b.batch_size) else 0.75

        slower_speed = own_speed

        def combined_throughput(self, a, b, t):  # noqa: ANN001, ANN201
            return 2 * self.own_speed(a, b, t)

        def slower_for(self, guard):  # noqa: ANN001, ANN201
            return self.slower_speed

    _site(tmp_path, monkeypatch)
    monkeypatch.setattr(msub_packing, "load_model", BadBesideTheBig)
    big = JobTag(model="resnet50", ref="resnet50", bs=256, pack=1.2, added="a100")
    monkeypatch.setattr(msub_packing, "queued_partners", lambda config, sbatch: ([big], 0, set()))
    argv, tag, _ = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"])
    assert tag.added == "titanxp" and argv[-1] == "--constraint=titanxp", tag
    assert "reference mix" in tag.why
    monkeypatch.setattr(msub_packing, "queued_partners", lambda config, sbatch: ([big._replace(added="")], 0, set()))
    argv, tag, warnings = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1", "--time=0:10:00"])
    assert tag.pack is None and "--gres=shard:1" not in argv        # packed for any type: met anywhere
    assert any("beside a queued shard job" in w for w in warnings), warnings


def test_the_site_default_packs_its_partitions_and_no_pack_opts_out(tmp_path, monkeypatch):
    _site(tmp_path, monkeypatch, 'pack_partitions = ["gpu"]\n')
    argv, tag, _ = _submit(["-p", "gpu", "--gres=gpu:1"], "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32\n",
                           tmp_path)
    assert tag.pack is not None and "--gres=shard:1" in argv
    argv, tag, _ = _submit(["-p", "gpu", "--gres=gpu:1"],
                           "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32 --no-pack\n", tmp_path)
    assert tag.pack is None and not any("shard" in w for w in argv)     # opted out: never a shard job
    argv, tag, _ = _submit(["--no-pack", "-p", "gpu", "--gres=gpu:1"],
                           "#!/bin/sh\n#MSCHED --model=resnet18 --batch-size=32\n", tmp_path)
    assert tag.pack is None and not any("shard" in w for w in argv)
    argv, tag, _ = _submit(["-p", "other", "--gres=gpu:1", "--model=resnet18"])      # not a packing partition
    assert tag.pack is None and not any("shard" in w for w in argv)


def test_a_job_whose_best_types_have_no_shard_nodes_is_not_packed(tmp_path, monkeypatch):
    _site(tmp_path, monkeypatch)
    argv, tag, warnings = _submit(["--model=resnet18", "--pack", "--gres=gpu:1", "--constraint=rtx2080ti"])
    assert tag.pack is None and not any("shard" in w for w in argv)
    assert tag.pack is None and not any("shard" in w for w in argv)


@pytest.mark.parametrize(("request_args", "reason"), [
    (["--gres=gpu:2"], "1-GPU job"),
    (["--gpus=1"], "--gres=gpu:1"),
    (["--gres=gpu:titanxp:1"], "without a GPU type"),
])
def test_a_job_that_cannot_be_a_shard_job_stays_a_gpu_job_and_says_why(tmp_path, monkeypatch, request_args, reason):
    _site(tmp_path, monkeypatch)
    argv, tag, warnings = _submit(["--model=resnet18", "--pack", *request_args])
    assert tag.pack is None and not any("shard" in w for w in argv)
    assert any(reason in w for w in warnings), warnings
    assert tag.pinned or ("not packed" in tag.why and reason in tag.why)    # the owner reads it in `msched jobs`


def test_the_users_other_gres_are_kept_beside_the_shard(tmp_path, monkeypatch):
    _site(tmp_path, monkeypatch)
    argv, tag, _ = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1,tmpfs:10G"])
    assert tag.pack is not None and "--gres=tmpfs:10G,shard:1" in argv


def test_submit_verdict_follows_the_prediction_and_memory():
    fast = JobSpeeds({"v100": 10.0}, 32)
    slow = JobSpeeds({"v100": 100.0}, 32)
    predict = lambda a, b, t: 1.5 if a.iter_ms[t] + b.iter_ms[t] < 100 else 0.7  # noqa: E731
    assert submit_verdict(fast, 1.0, [(fast, 1.0)], "v100", predict, 16.0)[0] == 1.5
    assert submit_verdict(fast, 1.0, [(slow, 1.0)], "v100", predict, 16.0)[0] is None
    # good with the partner, but the two do not fit one GPU together
    value, why = submit_verdict(fast, 10.0, [(fast, 10.0)], "v100", predict, 16.0)
    assert value is None and "too big" in why
    assert submit_verdict(fast, None, [(fast, None)], "p100", predict, 16.0)[0] is None    # no estimate there


def _job(job_id: str, ms: float, priority: int, **kw) -> ShardJob:
    return ShardJob(job_id, priority, JobSpeeds({"v100": ms}, 32), **kw)


def test_pairing_puts_good_pairs_together_and_bad_matches_last():
    # compatible = same "kind" (ms below or above 50); mixed kinds interfere
    predict = lambda a, b, t: 1.4 if (a.iter_ms[t] < 50) == (b.iter_ms[t] < 50) else 0.6  # noqa: E731
    jobs = [_job("a", 10, 100), _job("b", 90, 99), _job("c", 20, 98), _job("d", 80, 97), _job("e", 30, 96)]
    plan = pair_shard_jobs(jobs, predict, ["v100"])
    pairs = {frozenset((p.a, p.b)) for p in plan.pairs}
    assert pairs == {frozenset("ac"), frozenset("bd")} or pairs == {frozenset("ae"), frozenset("bd")} \
        or pairs == {frozenset("ce"), frozenset("bd")}
    order = sorted(plan.priorities, key=lambda j: -plan.priorities[j])
    for p in plan.pairs:                                     # each pair adjacent in the order
        assert abs(order.index(p.a) - order.index(p.b)) == 1
    assert order[-1] in plan.alone and len(plan.alone) == 1
    assert sorted(plan.priorities.values()) == [96, 97, 98, 99, 100]     # the positions they held


def test_a_running_job_alone_gets_its_best_partner_first():
    predict = lambda a, b, t: 2.0 - abs(a.iter_ms[t] - b.iter_ms[t]) / 100  # noqa: E731
    jobs = [_job("r", 50, 1, running=True, gpu_type="v100"), _job("x", 10, 100), _job("y", 52, 99),
            _job("z", 12, 98)]
    plan = pair_shard_jobs(jobs, predict, ["v100"])
    assert max(plan.priorities, key=plan.priorities.get) == "y"
    assert plan.pairs[0].a == "r" and plan.pairs[0].b == "y"


def test_a_pair_goes_to_the_type_where_it_gets_most_work_done():
    """Normalized throughput is relative to solo on that type: a job twice as slow on the V100 as on the
    P100 (Gavel's Recommendation) scores higher there (1.6 against 1.3) but gets less done: on the P100
    each job runs at 0.65 of its best speed (1.3 in all); on the V100 one at 0.8 x 1/2 and the other at
    0.8 x 1 (1.2 in all). The pair goes to the P100."""
    rec = ShardJob("rec", 100, JobSpeeds({"p100": 60.0, "v100": 120.0}, 2048), length_s=10.0)
    lm = ShardJob("lm", 99, JobSpeeds({"p100": 20.0, "v100": 20.0}, 20), length_s=10.0)
    predict = lambda a, b, t: {"p100": 1.3, "v100": 1.6}[t]  # noqa: E731
    own = lambda a, b, t: predict(a, b, t) / 2  # noqa: E731
    plan = pair_shard_jobs([rec, lm], predict, ["p100", "v100"], own=own)
    assert [(p.gpu_type, p.predicted) for p in plan.pairs] == [("p100", 1.3)]
    assert plan.gpu_types == {"rec": "p100", "lm": "p100"}
    plan = pair_shard_jobs([rec, lm], predict, ["p100", "v100"])      # without own speeds: half each
    assert plan.gpu_types == {"rec": "p100", "lm": "p100"}
    slow = lambda a, b, t: {"p100": 0.9, "v100": 1.6}[t]  # noqa: E731  (below the threshold on the P100)
    assert pair_shard_jobs([rec, lm], slow, ["p100", "v100"], own=own).gpu_types == {"rec": "v100", "lm": "v100"}


def test_a_pair_goes_only_to_a_type_both_jobs_were_packed_for():
    """pack13: msub checks a job's partners only on the types it packed it for (the tag's `added`,
    `may_meet`), so the pairing may not send a job elsewhere: the same two jobs as above, rec packed for
    the V100 only, pair on the V100 (1.6, though the P100 gets more done); packed for disjoint types,
    they do not pair, and the lone job running on the P100 is no partner for a job packed for the V100."""
    rec = ShardJob("rec", 100, JobSpeeds({"p100": 60.0, "v100": 120.0}, 2048), length_s=10.0, types=("v100",))

    def lm(**kw) -> ShardJob:  # noqa: ANN003
        return ShardJob("lm", 99, JobSpeeds({"p100": 20.0, "v100": 20.0}, 20), length_s=10.0, **kw)
    predict = lambda a, b, t: {"p100": 1.3, "v100": 1.6}[t]  # noqa: E731
    own = lambda a, b, t: predict(a, b, t) / 2  # noqa: E731
    assert pair_shard_jobs([rec, lm()], predict, ["p100", "v100"], own=own).gpu_types == {"rec": "v100", "lm": "v100"}
    plan = pair_shard_jobs([rec, lm(types=("p100",))], predict, ["p100", "v100"], own=own)
    assert (plan.pairs, plan.gpu_types) == ((), {})
    lone = lm(running=True, gpu_type="p100", types=("p100",))
    assert pair_shard_jobs([lone, rec], predict, ["p100", "v100"], own=own).pairs == ()


def test_a_pair_goes_only_to_a_type_both_jobs_requests_reach():
    """pack14's gap: the pairing writes the pair's type as each job's feature, so it may pair two jobs
    only on a type both owners' own requests reach (`ShardJob.reach`); a job whose request reaches no
    shard type (an unreadable constraint) pairs with no one. The numbers as above: the P100 gets more
    done, but rec's owner reaches only the V100."""
    predict = lambda a, b, t: {"p100": 1.3, "v100": 1.6}[t]  # noqa: E731
    own = lambda a, b, t: {"p100": 0.9, "v100": 0.6}[t]  # noqa: E731   (the P100's pair does more work)

    def job(job_id: str, prio: int, **kw) -> ShardJob:  # noqa: ANN003
        return ShardJob(job_id, prio, JobSpeeds({"p100": 20.0, "v100": 20.0}, 20), length_s=10.0, **kw)
    assert pair_shard_jobs([job("rec", 100), job("lm", 99)], predict, ["p100", "v100"], own=own).gpu_types == \
        {"rec": "p100", "lm": "p100"}
    plan = pair_shard_jobs([job("rec", 100, reach=("v100",)), job("lm", 99)], predict, ["p100", "v100"], own=own)
    assert plan.gpu_types == {"rec": "v100", "lm": "v100"}
    plan = pair_shard_jobs([job("rec", 100, reach=("v100",)), job("lm", 99, reach=("p100",))], predict,
                           ["p100", "v100"], own=own)
    assert (plan.pairs, plan.gpu_types) == ((), {})
    assert pair_shard_jobs([job("rec", 100, reach=()), job("lm", 99)], predict, ["p100", "v100"], own=own).pairs == ()
    lone = job("run", 0, running=True, gpu_type="p100")
    assert pair_shard_jobs([lone, job("rec", 100, reach=("v100",))], predict, ["p100", "v100"], own=own).pairs == ()


def test_the_round_writes_a_shard_job_only_a_type_its_owners_request_reaches():
    """The round core on Slurm's views: two shard types; the owner's own feature `bigmem` is carried only
    by the titanxp shard node, and a third job names a partition (`sx`) that holds only that node. The
    real interference model (guard "mean") would pair every job on the titanv (measured without these
    requests: `bigmem&titanv` written before this fix, a job that could never start); each type written
    on these jobs must be the titanxp, the only one their requests reach, and they are still paired."""
    from msched.estimate.estimators import TagEstimator
    from msched.rounds.packing import shard_jobs

    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))

    def shard(job_id: str, model: str, prio: int, features: str = "", partition: str = "shared") -> SlurmJob:
        tag = JobTag(model=model, ref=model, group=model, sim=1.0, bs=32, iters=1000, pack=1.2)
        return SlurmJob(job_id, "PENDING", partition=partition, priority=prio, num_gpus=0, features=features,
                        comment=with_tag(tag, None), reason="Priority")

    nodes = [SlurmNode("n4", "titanxp", 4, features=("titanxp", "shard", "bigmem"), partitions=("gpu", "shared", "sx")),
             SlurmNode("n2", "titanv", 4, features=("titanv", "shard"), partitions=("gpu", "shared"))]
    jobs = [shard("1", "resnet18", 50, "bigmem"), shard("2", "resnet18", 49, "bigmem"), shard("3", "vgg16", 48),
            shard("4", "resnet50", 47), shard("5", "resnet18", 46, partition="sx"), shard("6", "vgg16", 45)]
    assert {j.job_id: j.reach for j in shard_jobs(jobs, None, str.lower, nodes=nodes)} == \
        {"1": ("titanxp",), "2": ("titanxp",), "3": ("titanxp", "titanv"), "4": ("titanxp", "titanv"),
         "5": ("titanxp",), "6": ("titanxp", "titanv")}
    bare = [replace(j, features="", partition="shared") for j in jobs]
    _, free = packing_round(bare, nodes, est, guard="mean")
    assert {free.gpu_types[j] for j in ("1", "2", "5")} == {"titanv"}     # where they would go unconstrained
    updates, plan = packing_round(jobs, nodes, est, guard="mean")
    written = {u.job_id: u.value for u in updates if u.field == "features"}
    assert {j for p in plan.pairs for j in (p.a, p.b)} >= {"1", "2", "5"}
    assert written["1"] == written["2"] == "bigmem&titanxp" and written["5"] == "titanxp"
    for p in plan.pairs:
        assert p.gpu_type == "titanxp" or not {p.a, p.b} & {"1", "2", "5"}
    # an owner's constraint msched cannot read reaches nothing: no type written, no pair
    odd = [replace(jobs[0], features="bigmem&(("), *jobs[1:]]
    updates, plan = packing_round(odd, nodes, est, guard="mean")
    assert not [u for u in updates if u.job_id == "1" and u.field == "features"]
    assert "1" not in {j for p in plan.pairs for j in (p.a, p.b)}


def test_memory_keeps_a_pair_apart():
    predict = lambda a, b, t: 1.5  # noqa: E731
    jobs = [_job("a", 10, 100, peak_gb=12.0), _job("b", 10, 99, peak_gb=12.0)]
    assert not pair_shard_jobs(jobs, predict, ["v100"], lambda t: 15.0).pairs
    assert pair_shard_jobs(jobs, predict, ["v100"], lambda t: 30.0).pairs


def test_the_round_reorders_only_msubs_shard_jobs():
    """packing_round on Slurm's views: shard jobs msub tagged are permuted among their own priorities;
    a gpu job whose comment claims `pack` is not a shard job and is never written."""
    perf = PerfTable.load("msched/data/gpu_performance.csv")

    class Est:
        times = TableTimes(perf)

    def shard(job_id: str, model: str, prio: int, gpus: int = 0) -> SlurmJob:
        tag = JobTag(model=model, ref=model, group=model, sim=1.0, bs=32, pack=1.2)
        return SlurmJob(job_id, "PENDING", partition="shared", priority=prio, num_gpus=gpus,
                        comment=with_tag(tag, None), reason="Priority")

    jobs = [shard("1", "resnet18", 50), shard("2", "vgg16", 49), shard("3", "resnet18", 48),
            shard("4", "resnet50", 47), shard("9", "resnet18", 60, gpus=1)]
    other = shard("8", "resnet18", 70)
    jobs.append(SlurmJob(other.job_id, "PENDING", partition="cpu", priority=70, comment=other.comment,
                         reason="Priority"))     # a GPU-less job elsewhere whose comment claims `pack`
    nodes = [SlurmNode("n4", "titanxp", 4, features=("titanxp", "shard"), partitions=("gpu", "shared"))]
    updates, plan = packing_round(jobs, nodes, Est(), guard="mean")
    assert plan is not None
    assert {u.job_id for u in updates} <= {"1", "2", "3", "4"} and set(plan.priorities) == {"1", "2", "3", "4"}
    assert sorted(plan.priorities.values()) == [47, 48, 49, 50]
    model = load_model()
    for p in plan.pairs:                                   # every pair chosen is predicted above 1.0
        by_id = {j.job_id: j for j in jobs}
        a, b = (speeds_from_tag(by_id[x].tag, Est.times) for x in (p.a, p.b))
        assert model.combined_throughput(a, b, "titanxp") >= 1.0
    assert packing_round(jobs, [SlurmNode("n1", "a100", 4, features=("a100",))], Est()) == ([], None)
    # the default guard: these torchvision models are outside Gavel's data, so no pair is formed and
    # the jobs keep their planned order (the longest first, as for jobs without a partner)
    _, guarded = packing_round(jobs, nodes, Est())
    assert guarded.pairs == () and set(guarded.alone) == {"1", "2", "3", "4"}


def test_a_pair_where_one_job_would_crawl_is_never_formed():
    """Combined throughput above 1 can hide one job at a fifth of its speed: the slower job's predicted
    own speed must reach MIN_OWN_SPEED too, at submit and in the round."""
    from msched.estimate.interference import MIN_OWN_SPEED

    predict = lambda a, b, t: 1.3  # noqa: E731
    crawl = lambda a, b, t: MIN_OWN_SPEED / 2 if 10.0 in (a.iter_ms[t], b.iter_ms[t]) else 0.65  # noqa: E731
    jobs = [_job("greedy", 10, 100), _job("b", 50, 99), _job("c", 60, 98)]
    plan = pair_shard_jobs(jobs, predict, ["v100"], slower=crawl)
    assert [{p.a, p.b} for p in plan.pairs] == [{"b", "c"}] and plan.alone == ("greedy",)
    mine, other = JobSpeeds({"v100": 10.0}, 32), JobSpeeds({"v100": 50.0}, 32)
    value, why = submit_verdict(mine, None, [(other, None)], "v100", predict, None, slower=crawl)
    assert value is None and "below" in why
    assert submit_verdict(other, None, [(other, None)], "v100", predict, None, slower=crawl)[0] == 1.3


def test_the_shipped_model_predicts_each_jobs_own_speed():
    """The shipped model carries both forests; a job's own speed beside a partner is a share of solo."""
    model = load_model()
    assert model.own_trees
    a, b = JobSpeeds({"k80": 200.0, "p100": 80.0, "v100": 50.0}, 64), JobSpeeds({"k80": 30.0, "p100": 20.0, "v100": 15.0}, 5)
    for x, y in ((a, b), (b, a)):
        assert 0.0 < model.own_speed(x, y, "v100") < 1.2
    assert model.slower_speed(a, b, "v100") == min(model.own_speed(a, b, "v100"), model.own_speed(b, a, "v100"))


def test_against_the_queue_every_shard_job_must_be_a_good_partner():
    """With the queue's shard jobs as partners (`every`), one bad partner is enough to refuse: the job
    may meet any of them. Against the reference mix (no job to meet yet) a majority decides."""
    fast, slow = JobSpeeds({"v100": 10.0}, 32), JobSpeeds({"v100": 100.0}, 32)
    predict = lambda a, b, t: 1.5 if a.iter_ms[t] + b.iter_ms[t] < 100 else 0.7  # noqa: E731
    partners = [(fast, 1.0), (fast, 1.0), (slow, 1.0)]
    assert submit_verdict(fast, 1.0, partners, "v100", predict, 16.0)[0] is not None   # mean 1.23
    value, why = submit_verdict(fast, 1.0, partners, "v100", predict, 16.0, every=True)
    assert value is None and "0.70 < 1 beside a queued shard job" in why
    crawl = lambda a, b, t: 0.3 if b is slow or a is slow else 0.7  # noqa: E731
    value, why = submit_verdict(fast, 1.0, partners, "v100", lambda a, b, t: 1.5, 16.0, slower=crawl, every=True)
    assert value is None and "below 0.5x solo beside a queued shard job" in why


def test_the_looser_queue_rule_packs_when_enough_queued_shard_jobs_are_good_partners():
    """`queue_share` 2/3 with three queued shard jobs, one bad (0.7 combined): two of three good reach
    the share (ceil(2/3 x 3) = 2), and the mean is over the two good ones (1.5); a share of 0.9 needs
    all three (ceil(2.7) = 3) and refuses. Two bad of three refuse at 2/3 too; the guard's slower-job
    check counts the same way (a partner under 0.5x is a bad one)."""
    fast, slow = JobSpeeds({"v100": 10.0}, 32), JobSpeeds({"v100": 100.0}, 32)
    predict = lambda a, b, t: 1.5 if a.iter_ms[t] + b.iter_ms[t] < 100 else 0.7  # noqa: E731
    one_bad = [(fast, 1.0), (fast, 1.0), (slow, 1.0)]
    assert submit_verdict(fast, 1.0, one_bad, "v100", predict, 16.0, every=True, queue_share=2 / 3)[0] == 1.5
    value, why = submit_verdict(fast, 1.0, one_bad, "v100", predict, 16.0, every=True, queue_share=0.9)
    assert value is None and "beside 1 of 3 queued shard jobs (needs 90% good)" in why
    two_bad = [(fast, 1.0), (slow, 1.0), (slow, 1.0)]
    assert submit_verdict(fast, 1.0, two_bad, "v100", predict, 16.0, every=True, queue_share=2 / 3)[0] is None
    crawl = lambda a, b, t: 0.3 if b is slow or a is slow else 0.7  # noqa: E731
    flat = lambda a, b, t: 1.5  # noqa: E731
    assert submit_verdict(fast, 1.0, one_bad, "v100", flat, 16.0, slower=crawl, every=True, queue_share=2 / 3)[0] == 1.5
    value, why = submit_verdict(fast, 1.0, two_bad, "v100", flat, 16.0, slower=crawl, every=True, queue_share=2 / 3)
    assert value is None and "below 0.5x solo beside a queued shard job" in why


def test_a_job_is_packed_only_when_sharing_ends_it_no_later_than_waiting():
    """Own speed 0.8 beside its partner: a 1000 s job shared takes 1250 s, 250 s more; it is packed only
    when a GPU of its own is 250 s or more away."""
    job = JobSpeeds({"v100": 10.0}, 32)
    own = lambda a, b, t: 0.8  # noqa: E731
    kw = dict(every=True, own=own, runtime_s=1000.0)
    args = (job, 1.0, [(job, 1.0)], "v100", lambda a, b, t: 1.6, 16.0)
    assert submit_verdict(*args, wait_s=0.0, **kw)[0] is None         # an idle cluster packs nothing
    kw["wait_share"] = 1.0
    value, why = submit_verdict(*args, wait_s=249.0, **kw)
    assert value is None and "sharing would add 4 min" in why
    assert submit_verdict(*args, wait_s=250.0, **kw)[0] == 1.6
    assert submit_verdict(*args, **kw)[0] == 1.6                      # no published free time: not judged


def test_the_snapshot_sees_the_gpus_shard_jobs_hold():
    """Slurm shows shard jobs with no GPUs (and counts no `gpu` allocation for a GPU shards use): the
    round's snapshot gets one running entry per shared GPU, ending with its last job, the node's free
    GPUs less those, and the open shard beside a job running alone."""
    from msched.estimate.estimators import TagEstimator
    from msched.rounds.core import build_snapshot

    perf = PerfTable.load("msched/data/gpu_performance.csv")
    est = TagEstimator(TableTimes(perf))

    def shard(job_id: str, start: float, node: str) -> SlurmJob:
        tag = JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000, pack=1.2)
        return SlurmJob(job_id, "RUNNING", partition="shared", num_gpus=0, comment=with_tag(tag, None),
                        start_time=start, nodes=node, gpu_type="titanxp")

    forged = shard("9", 5.0, "n4")             # a GPU-less job in another partition whose comment claims `pack`
    jobs = [shard("1", 0.0, "n4"), shard("2", 10.0, "n4"), shard("3", 20.0, "n4"),
            SlurmJob("9", "RUNNING", partition="cpu", num_gpus=0, comment=forged.comment, start_time=5.0, nodes="n4")]
    nodes = [SlurmNode("n4", "titanxp", 4, gpus_alloc=0, features=("titanxp", "shard"), partitions=("shared",))]
    snap, _ = build_snapshot(jobs, nodes, est, 30.0)
    solo = est(jobs[0], jobs[0].tag)["titanxp"]
    assert [(g.jobs, g.open_shards) for g in snap.shard_gpus] == [(("1", "2"), 0), (("3",), 1)]
    assert snap.shards_free == {"titanxp": 1}
    assert snap.nodes[0].gpus_free == 2                     # 4 GPUs, 2 held by shards, none by `gpu` jobs
    lone = next(r for r in snap.running if r.job_id == "3")
    assert lone.num_gpus == 1 and lone.est_end == pytest.approx(20.0 + solo)
    pair = [r for r in snap.running if r.job_id in ("1", "2")]
    assert len(pair) == 1 and pair[0].est_end > 10.0 + solo          # one GPU; the pair runs slower than solo
    # the simulator's view (a shared GPU counted as allocated) gives the same free count
    snap2, _ = build_snapshot(jobs, [SlurmNode("n4", "titanxp", 4, gpus_alloc=2, features=("titanxp", "shard"),
                                               partitions=("shared",))], est, 30.0)
    assert snap2.nodes[0].gpus_free == 2 and len(snap2.running) == 2


def test_the_snapshot_pairs_shard_jobs_by_the_gpu_slurm_says_they_hold():
    """After a departure two shard jobs can sit alone on two GPUs, and a third may join the later one
    (recorded on the dev cluster: tests/data/slurm/squeue_shards.json). Start order would pair the two
    lone ones; Slurm's GPU index (squeue's gres_detail) keeps them apart and pairs the right two. A job
    whose index is unknown sends its node back to start order."""
    from msched.estimate.estimators import TagEstimator
    from msched.rounds.core import build_snapshot

    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))
    tag = JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000, pack=1.2)

    def shard(job_id: str, start: float, gpu: tuple[int, ...]) -> SlurmJob:
        return SlurmJob(job_id, "RUNNING", partition="shared", num_gpus=0, comment=with_tag(tag, None),
                        start_time=start, nodes="n4", gpu_type="titanxp", gpu_index=gpu)

    nodes = [SlurmNode("n4", "titanxp", 4, gpus_alloc=0, features=("titanxp", "shard"), partitions=("shared",))]
    jobs = [shard("7", 0.0, (0,)), shard("8", 1.0, (1,)), shard("11", 2.0, (1,))]
    snap, _ = build_snapshot(jobs, nodes, est, 30.0)
    assert [(g.jobs, g.open_shards) for g in snap.shard_gpus] == [(("7",), 1), (("8", "11"), 0)]
    assert snap.nodes[0].gpus_free == 2 and snap.shards_free == {"titanxp": 1}
    unknown = [*jobs[:2], replace(jobs[2], gpu_index=())]
    snap, _ = build_snapshot(unknown, nodes, est, 30.0)
    assert [g.jobs for g in snap.shard_gpus] == [("7", "8"), ("11",)]      # start order, as before


def test_by_default_any_wait_packs():
    """The default share 0: a job that would wait at all may share (it leaves a GPU to the queue)."""
    job = JobSpeeds({"v100": 10.0}, 32)
    args = (job, 1.0, [(job, 1.0)], "v100", lambda a, b, t: 1.6, 16.0)
    kw = dict(every=True, own=lambda a, b, t: 0.8, runtime_s=1000.0)
    assert submit_verdict(*args, wait_s=1.0, **kw)[0] == 1.6
    assert submit_verdict(*args, wait_s=0.0, **kw)[0] is None


def test_pending_shard_jobs_are_planned_as_one_gpu_jobs_and_the_pairing_has_the_last_word():
    """The planner sees a pending shard job (Slurm shows it with no GPUs) as a 1-GPU job on the shard
    nodes' types; a GPU-less job elsewhere whose comment claims `pack` stays out. The round's updates
    keep the pairing's priorities for the shard jobs it ordered (a permutation of the planner's)."""
    from msched.estimate.estimators import TagEstimator
    from msched.rounds.core import Update, build_snapshot
    from msched.rounds.packing import with_pairing

    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))
    tag = JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000, pack=1.2)
    jobs = [SlurmJob("1", "PENDING", partition="shared", priority=50, num_gpus=0, comment=with_tag(tag, None),
                     reason="Priority"),
            SlurmJob("2", "PENDING", partition="cpu", priority=50, num_gpus=0, comment=with_tag(tag, None),
                     reason="Priority")]
    nodes = [SlurmNode("n4", "titanxp", 4, features=("titanxp", "shard"), partitions=("gpu", "shared")),
             SlurmNode("c1", None, 0, partitions=("cpu",))]
    snap, views = build_snapshot(jobs, nodes, est, 0.0)
    assert [(p.job_id, p.num_gpus, p.managed) for p in snap.pending] == [("1", 1, True)]
    assert set(snap.pending[0].est_runtime_s) == {"titanxp"} and set(views) == {"1"}

    planner = [Update("1", "priority", 90, 50), Update("3", "priority", 80, 60), Update("1", "features", "titanxp")]
    pairing = [Update("1", "priority", 80, 50)]
    from msched.policy.packing import PackingPlan
    merged = with_pairing(planner, pairing, PackingPlan({"1": 80, "3": 90}, {}))
    assert merged == [Update("1", "features", "titanxp"), Update("1", "priority", 80, 50)]
    assert with_pairing(planner, [], None) == planner


def test_a_pending_shard_job_is_planned_only_on_the_types_msub_packed_it_for():
    """msub judged the job (its tag's `added`) on the titanxp only; the planner must not move it to the
    other shard type, where it would meet partners no check saw (bench_packing seed 10 with the measured
    predictor: two LM jobs packed for the V100 were sent to a P100 and shared at 0.45x). A shard job whose
    tag names no types (msub kept every shard type) may go to either."""
    from msched.estimate.estimators import TagEstimator
    from msched.rounds.core import build_snapshot

    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))
    nodes = [SlurmNode("n4", "titanxp", 4, features=("titanxp", "shard"), partitions=("gpu", "shared")),
             SlurmNode("n2", "titanv", 4, features=("titanv", "shard"), partitions=("gpu", "shared"))]

    def job(job_id: str, added: str) -> SlurmJob:
        tag = JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000, pack=1.2,
                     added=added)
        return SlurmJob(job_id, "PENDING", partition="shared", priority=50, num_gpus=0, comment=with_tag(tag, None),
                        reason="Priority")

    snap, _ = build_snapshot([job("1", "titanxp"), job("2", "")], nodes, est, 0.0)
    by_id = {p.job_id: p for p in snap.pending}
    assert by_id["1"].allowed_types == ("titanxp",)
    assert by_id["2"].allowed_types == () and {"titanxp", "titanv"} <= set(by_id["2"].est_runtime_s)
    # the pairing sees the same types (pack13: it may not pair a job on another type either)
    from msched.rounds.packing import shard_jobs

    seen = shard_jobs([job("1", "TitanXp"), job("2", "")], None, str.lower)
    assert [(j.job_id, j.types) for j in seen] == [("1", ("titanxp",)), ("2", ())]


def test_a_shard_job_whose_request_reaches_none_of_its_packed_types_is_pinned_where_it_is():
    """Packed for the titanxp, but the owner's own feature (`bigmem`, set since submit) matches only the
    titanv nodes: the planner may not send it to another type (pack13: msub never checked its partners
    there), so it is pinned where its request sends it now and msched writes no type on it, whatever a
    plan wants; its priority is still msched's to write. A job whose request reaches its packed type is
    kept to it (as above) and stays writable."""
    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.policy.snapshot import JobDecision, Plan
    from msched.rounds.core import Update, build_snapshot, diff_plan

    est = TagEstimator(TableTimes(PerfTable.load("msched/data/gpu_performance.csv")))
    nodes = [SlurmNode("n4", "titanxp", 4, features=("titanxp", "shard"), partitions=("gpu", "shared")),
             SlurmNode("n2", "titanv", 4, features=("titanv", "shard", "bigmem"), partitions=("gpu", "shared"))]

    def job(job_id: str, features: str) -> SlurmJob:
        tag = JobTag(model="resnet18", ref="resnet18", group="resnet18", sim=1.0, bs=32, iters=1000, pack=1.2,
                     added="titanxp")
        return SlurmJob(job_id, "PENDING", partition="shared", priority=50, num_gpus=0, features=features,
                        comment=with_tag(tag, None), reason="Priority")

    snap, views = build_snapshot([job("1", "bigmem"), job("2", "")], nodes, est, 0.0)
    by_id = {p.job_id: p for p in snap.pending}
    assert by_id["1"].allowed_types == ("titanv",) and by_id["1"].pinned_type == "titanv"
    assert views["1"].pinned and not views["2"].pinned
    assert by_id["2"].allowed_types == ("titanxp",) and by_id["2"].pinned_type is None
    for types in (("titanxp",), ("titanv",)):
        plan = Plan("msched", [JobDecision("1", 90, types), JobDecision("2", 80, types)])
        updates = diff_plan(views, plan)
        assert [u for u in updates if u.job_id == "1"] == [Update("1", "priority", 90, 50)]
    assert diff_plan(views, Plan("msched", [JobDecision("2", 50, ("titanxp",))])) == \
        [Update("2", "features", "titanxp", "")]
    # the planner itself: job 1 is not given a type, job 2 only its packed one
    planned = get_policy("msched").plan(snap).by_job()
    assert planned["2"].gpu_types in ((), ("titanxp",))
    assert not [u for u in diff_plan(views, get_policy("msched").plan(snap)) if u.job_id == "1" and u.field == "features"]


def test_no_job_is_slowed_past_the_plans_end():
    """horizon_s: the plan ends in 10 h. A 4 h job at 0.5x (8 h) may share; a 6 h one (12 h) may not,
    and neither may a job whose queued partner would then run past the end (its 6 h solo at 0.5x)."""
    job = JobSpeeds({"v100": 10.0}, 32)
    half = lambda a, b, t: 0.5  # noqa: E731
    args = (job, 1.0, [(job, 1.0, 4 * 3600.0)], "v100", lambda a, b, t: 1.2, 16.0)
    kw = dict(every=True, own=half, wait_s=60.0, horizon_s=10 * 3600.0)
    assert submit_verdict(*args, runtime_s=4 * 3600.0, **kw)[0] == 1.2
    value, why = submit_verdict(*args, runtime_s=6 * 3600.0, **kw)
    assert value is None and "past the plan's end in 10.0 h" in why
    long_partner = (job, 1.0, [(job, 1.0, 6 * 3600.0)], "v100", lambda a, b, t: 1.2, 16.0)
    value, why = submit_verdict(*long_partner, runtime_s=3600.0, **kw)
    assert value is None and "a queued shard job beside it" in why
    assert submit_verdict(*long_partner, runtime_s=3600.0, **{**kw, "horizon_s": None})[0] == 1.2


def test_msub_reads_the_plan_end_the_round_published(tmp_path, monkeypatch):
    """The reorderer publishes its plan's end beside the free times; msub reads it back (fresh only)."""
    from msched.config import load_config
    from msched.msub.cluster_view import read_plan_end
    from msched.rounds.reorder import publish_free_time

    _site(tmp_path, monkeypatch, busy=False)
    config = load_config()
    assert read_plan_end(config) is None                     # nothing published yet
    now = time.time()
    publish_free_time(config.free_time_path, now, {"a100": now + 60}, now + 7200)
    assert read_plan_end(config) == pytest.approx(now + 7200)
    assert read_plan_end(config, now=now + 86400) is None    # stale
    publish_free_time(config.free_time_path, now, {"a100": now + 60})
    assert read_plan_end(config) is None                     # a round that knew no end


def test_without_a_fresh_plan_msub_packs_nothing(tmp_path, monkeypatch):
    """Whether a job would wait for a GPU of its own is the last round's to say: with no published plan
    (no reorderer running) an owner who asked for packing gets a whole GPU and the reason."""
    _site(tmp_path, monkeypatch, busy=False)
    argv, tag, warnings = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1"])
    assert tag.pack is None and not any("shard" in w for w in argv)
    assert any("no fresh plan from the reorderer" in w for w in warnings), warnings


# ------------------------------------------------------------------------------------------ the guard
def test_on_best_type_is_the_fastest_shard_type_within_the_slack():
    from msched.policy.packing import on_best_type

    rec = JobSpeeds({"k80": 200.0, "p100": 60.0, "v100": 120.0}, 2048)     # Gavel's Recommendation: P100 first
    assert on_best_type(rec, "p100", ["p100", "v100"]) and not on_best_type(rec, "v100", ["p100", "v100"])
    assert on_best_type(rec, "v100", ["v100", "k80"])                      # the best of the types it may use
    near = JobSpeeds({"p100": 100.0, "v100": 109.0}, 32)                   # 9% slower: within the 10% slack
    assert on_best_type(near, "v100", ["p100", "v100"]) and not on_best_type(near, "v100", ["p100", "v100"], 0.05)
    assert not on_best_type(rec, "a100", ["p100", "a100"])                 # no estimate there


def test_under_the_guard_one_safe_reference_partner_is_enough():
    """The first shard job (no queue to meet): under the guard (`some`) it packs when one reference pair
    passes every check, and its prediction is the mean over the pairs that pass; without it a majority
    of the reference mix must pass."""
    mine = JobSpeeds({"v100": 10.0}, 32)
    good, bad1, bad2 = JobSpeeds({"v100": 20.0}, 32), JobSpeeds({"v100": 30.0}, 32), JobSpeeds({"v100": 40.0}, 32)
    predict = lambda a, b, t: 1.4 if b is good else 1.1  # noqa: E731
    bound = lambda a, b, t: 0.6 if good in (a, b) else 0.2  # noqa: E731
    partners = [(good, None), (bad1, None), (bad2, None)]
    value, why = submit_verdict(mine, None, partners, "v100", predict, None, slower=bound)
    assert value is None and "most partners" in why
    value, why = submit_verdict(mine, None, partners, "v100", predict, None, slower=bound, some=True)
    assert value == 1.4 and why == "predicted combined throughput 1.40"
    value, why = submit_verdict(mine, None, [(bad1, None)], "v100", predict, None, slower=bound, some=True)
    assert value is None and "every partner" in why


def test_the_guard_packs_a_job_only_on_its_best_shard_type():
    rec = JobSpeeds({"p100": 60.0, "v100": 120.0}, 2048)
    partner = JobSpeeds({"p100": 20.0, "v100": 20.0}, 20)
    predict = lambda a, b, t: 1.5  # noqa: E731
    assert submit_verdict(rec, None, [(partner, None)], "v100", predict, None, best_types=["p100", "v100"]) == \
        (None, "v100 is not its best shard type (p100|v100)")
    assert submit_verdict(rec, None, [(partner, None)], "p100", predict, None, best_types=["p100", "v100"])[0] == 1.5
    # the round: a pair only on a type that is both jobs' best; none here (rec wants the p100, lm2 the v100)
    lm2 = JobSpeeds({"p100": 40.0, "v100": 20.0}, 20)
    jobs = [ShardJob("rec", 100, rec), ShardJob("lm2", 99, lm2)]
    assert pair_shard_jobs(jobs, predict, ["p100", "v100"]).pairs
    assert not pair_shard_jobs(jobs, predict, ["p100", "v100"], best_type=True).pairs
    same = [ShardJob("rec", 100, rec), ShardJob("p", 99, partner)]
    assert [p.gpu_type for p in pair_shard_jobs(same, predict, ["p100", "v100"], best_type=True).pairs] == ["p100"]


def test_by_default_msub_packs_no_job_outside_the_guards_data(tmp_path, monkeypatch):
    """The default guard on the shared table's types: ResNet-18 at batch 32 is farther than SEEN_RADIUS
    from every Gavel job type, so the owner who asked gets a whole GPU and the reason."""
    _site(tmp_path, monkeypatch, guard="bound")
    argv, tag, warnings = _submit(["--model=resnet18", "--batch-size=32", "--pack", "--gres=gpu:1"])
    assert tag.pack is None and not any("shard" in w for w in argv)
    assert any("outside the interference model's data" in w and "pack_guard bound" in w for w in warnings), warnings


def test_pack_guard_is_checked_in_the_config(tmp_path):
    from msched.config import ConfigError, load_config

    conf = tmp_path / "msched.toml"
    conf.write_text('cluster_name = "x"\n')
    assert load_config(conf).pack_guard == "bound"                  # the default
    conf.write_text('pack_guard = "mean"\n')
    assert load_config(conf).pack_guard == "mean"
    conf.write_text('pack_guard = "upper"\n')
    with pytest.raises(ConfigError, match="pack_guard 'upper' is not one of bound, mean"):
        load_config(conf)
