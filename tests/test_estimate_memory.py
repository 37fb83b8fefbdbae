"""Memory as a feasibility condition (msched.policy.feasibility.memory_fits): a type whose usable memory the
job's predicted training step does not fit is never chosen, by msub's submit decision or by the round and
its planner, whatever iteration-time source the site runs (the default measured table here).

The model is real: torchvision's ResNet-50, its shipped layer profile, at batch 192 per GPU (~18 GB by
msched.estimate.memory; the 25%-accuracy check of that figure against torch.profiler is in
tests/test_estimate.py), against the 11-12 GB cards of the measured table."""

from __future__ import annotations

import os

import pytest

from msched.estimate.estimators import TagEstimator
from msched.estimate.memory import job_peak_gb, usable_by_type
from msched.estimate.perf_table import PerfTable
from msched.policy import get_policy
from msched.policy.choice import ClusterView, SubmitJob, decide_submit
from msched.policy.feasibility import feasible_types, memory_fits
from msched.rounds.core import build_snapshot
from msched.slurm.base import PENDING, RUNNING, SlurmJob, SlurmNode
from msched.tag import JobTag, parse_tag, with_tag

MEASURED_TABLE = os.path.join(os.path.dirname(__file__), "..", "msched", "data", "measured_perf.csv")
SMALL = {"gtx1080ti", "rtx2080ti", "titanxp", "titanv"}      # 11-12 GB
BIG_BATCH = 192


@pytest.fixture(scope="module")
def perf() -> PerfTable:
    return PerfTable.load(MEASURED_TABLE)


def test_memory_rule():
    assert memory_fits(None, 10.0) and memory_fits(12.0, None) and memory_fits(10.0, 10.0)
    assert not memory_fits(10.5, 10.0)
    usable = {"a": 10.0, "b": 30.0}
    job = SubmitJob(1)
    assert feasible_types(job, {"a": (4,), "b": (4,)}, peak_gb=20.0, usable_gb=usable) == ("b",)
    assert feasible_types(job, None, ("a", "b", "c"), peak_gb=20.0, usable_gb=usable) == ("b", "c")  # c: unknown
    assert feasible_types(job, {"a": (4,), "b": (4,)}, usable_gb=usable) == ("a", "b")             # no peak said


def test_msub_computes_the_peak_and_the_tag_carries_it():
    mem = job_peak_gb("resnet50", BIG_BATCH, "float")
    usable = usable_by_type(sorted(SMALL | {"titanrtx", "a100"}))
    assert all(mem > usable[t] for t in SMALL) and mem < usable["titanrtx"] < usable["a100"]
    assert job_peak_gb("resnet50", BIG_BATCH, "half") < mem          # half keeps half the activations
    assert job_peak_gb("resnet50", None, "float") is None             # no batch size said: unknown
    back = parse_tag(with_tag(JobTag(model="resnet50", bs=BIG_BATCH, mem=mem), None))[0]
    assert back.mem == pytest.approx(mem, rel=1e-5)
    assert parse_tag("msched:v1;model=resnet50;mem=-1")[0] is None       # bounded


def test_msubs_decision_never_chooses_a_card_the_step_does_not_fit(perf):
    types = perf.gpu_types()
    assert SMALL < set(types)
    mem = job_peak_gb("resnet50", BIG_BATCH, "float")
    tag = JobTag(model="resnet50", ref="resnet50", iters=1000, bs=BIG_BATCH, mem=mem)
    now = 1000.0
    sizes = {t: (4,) for t in types}
    view = ClusterView(node_gpus=sizes, free_at=dict.fromkeys(sizes, now), fresh=True, usable_gb=usable_by_type(types))
    est = TagEstimator(perf)                  # the default estimator: it knows nothing of memory
    job = SubmitJob(1, time_limit_s=10 * 86400.0, peak_memory_gb=mem)
    decision = decide_submit(tag, job, view, est, now=now)
    assert decision.types and not SMALL & set(decision.types)
    assert set(decision.estimates) == set(types) - SMALL
    # the same job without a memory figure may go anywhere: memory is what ruled the small cards out
    blind = decide_submit(tag._replace(mem=None), job._replace(peak_memory_gb=None), view, est, now=now)
    assert SMALL <= set(blind.estimates)
    # and without node sizes (msub saw no nodes), memory still rules them out
    no_nodes = decide_submit(tag, job, view._replace(node_gpus=None), est, now=now)
    assert not SMALL & set(no_nodes.estimates) and no_nodes.estimates


def test_the_round_and_planner_never_choose_a_card_the_step_does_not_fit(perf):
    """gtx1080ti is free and a100 busy for days: a job that fits goes to gtx1080ti at once, the same
    model at a batch that does not fit waits for the a100."""
    mem_big = job_peak_gb("resnet50", BIG_BATCH, "float")
    mem_small = job_peak_gb("resnet50", 32, "float")

    def tagged(bs: int, mem: float) -> str:
        return with_tag(JobTag(model="resnet50", ref="resnet50", iters=2000, bs=bs, mem=mem), None)

    nodes = [SlurmNode("n1", "a100", 1, 1, ("a100",), "ALLOCATED"), SlurmNode("n2", "gtx1080ti", 1, 0, ("gtx1080ti",))]
    jobs = [SlurmJob("1", RUNNING, num_gpus=1, start_time=0.0, nodes="n1", time_limit_s=500_000.0),
            SlurmJob("2", PENDING, priority=50, num_gpus=1, comment=tagged(BIG_BATCH, mem_big), time_limit_s=86400.0),
            SlurmJob("3", PENDING, priority=40, num_gpus=1, comment=tagged(32, mem_small), time_limit_s=86400.0)]
    snap, _views = build_snapshot(jobs, nodes, TagEstimator(perf), 1000.0, gpu_type_of=str.lower)
    pending = {p.job_id: p for p in snap.pending}
    assert set(pending["2"].est_runtime_s) == {"a100"}
    assert set(pending["3"].est_runtime_s) == {"a100", "gtx1080ti"}
    plan = get_policy("msched").plan(snap).by_job()
    assert plan["2"].gpu_types == ("a100",)
    assert plan["3"].gpu_types == ("gtx1080ti",)


SITE_SPEC_HEADER = ("gpu_type,aliases,name,generation,compute_capability,form_factor,sm_count,boost_clock_mhz,"
                    "fp32_tflops,tf32_tflops,fp16_tflops,fp64_tflops,memory_gb,memory_bw_gbs,interconnect,"
                    "interconnect_gbs,source\n")


def test_a_type_the_site_added_is_held_back_for_memory(perf, tmp_path, monkeypatch):
    """A type only the site's config knows (its `gpu_specs` rows: an 8 GB card, never measured): the round's
    feasibility reads its memory from the site's spec table, so the big-batch job never goes there."""
    from msched.estimate.gpu_specs import site_specs
    from msched.estimate.predictor import PredictorTimes

    specs_csv = tmp_path / "site_gpu_specs.csv"
    specs_csv.write_text(SITE_SPEC_HEADER + "sitecard8,,Site card 8 GB,turing,7.5,pcie,40,1600,10,0,40,0.3,8,448,"
                         "pcie3,15.75,site's own datasheet\n")
    config = tmp_path / "msched.toml"
    config.write_text(f'gpu_specs = "{specs_csv}"\n')
    monkeypatch.setenv("MSCHED_CONFIG", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    usable = usable_by_type(["sitecard8", "a100"])
    assert 5.0 < usable["sitecard8"] < 8.0                       # from the site's row, not the shipped table
    mem_big = job_peak_gb("resnet50", 96, "float")
    mem_small = job_peak_gb("resnet50", 16, "float")
    assert mem_small < usable["sitecard8"] < mem_big < usable["a100"]

    def tagged(bs: int, mem: float) -> str:
        return with_tag(JobTag(model="resnet50", ref="resnet50", iters=2000, bs=bs, mem=mem), None)

    nodes = [SlurmNode("n1", "a100", 1, 1, ("a100",), "ALLOCATED"), SlurmNode("n2", "sitecard8", 1, 0, ("sitecard8",))]
    jobs = [SlurmJob("1", RUNNING, num_gpus=1, start_time=0.0, nodes="n1", time_limit_s=500_000.0),
            SlurmJob("2", PENDING, priority=50, num_gpus=1, comment=tagged(96, mem_big), time_limit_s=86400.0),
            SlurmJob("3", PENDING, priority=40, num_gpus=1, comment=tagged(16, mem_small), time_limit_s=86400.0)]
    # the cost model estimates the new type from its spec row; its own memory check is off, so what holds
    # the big job back is the round's feasibility
    times = PredictorTimes(perf, types=["sitecard8"], specs=site_specs(), memory_check=False)
    snap, _views = build_snapshot(jobs, nodes, TagEstimator(times), 1000.0, gpu_type_of=str.lower)
    pending = {p.job_id: p for p in snap.pending}
    assert set(pending["2"].est_runtime_s) == {"a100"}
    assert set(pending["3"].est_runtime_s) == {"a100", "sitecard8"}
    plan = get_policy("msched").plan(snap).by_job()
    assert plan["2"].gpu_types == ("a100",)
    assert plan["3"].gpu_types == ("sitecard8",)
