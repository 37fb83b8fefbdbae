"""The round core's snapshot caches (issue 21, fifth pass) change no snapshot.

`build_snapshot` parses each distinct constraint's GPU-type reading once (`_TypeNames`) and works out the
feasible types once per (constraint, partitions, job shape, memory) (`possible`). These tests build the
same queue with the caches and without them (`caches=False`: every job read on its own, as before) and
require equal snapshots and equal diff views: on queues hypothesis generates (constraints with GPU types,
user features, ORs, ANDs, brackets, unreadable ones; shapes; partitions; tags with memory), on the
recorded squeue of the dev cluster, and on a 2,000-job queue of the benchmark's mix.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from msched.config import Config
from msched.estimate.estimators import TagEstimator
from msched.estimate.perf_table import PerfRow, PerfTable
from msched.rounds.core import build_snapshot
from msched.slurm.base import PENDING, RUNNING, SlurmJob, SlurmNode
from msched.tag import JobTag, with_tag

sys.path.insert(0, str(Path(__file__).resolve().parent))
DATA = Path(__file__).resolve().parent / "data" / "slurm"

TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
TRUTH = PerfTable([PerfRow(m, t, 1, 12, "float", s) for m, speeds in
                   {"vgg16": (0.05, 0.08, 0.11, 0.14), "densenet169": (0.07, 0.06, 0.12, 0.16)}.items()
                   for t, s in zip(TYPES, speeds, strict=True)])
NODES = [
    SlurmNode("n1", "a100", 4, 2, ("a100", "ib"), "MIXED", partitions=("gpu", "big")),
    SlurmNode("n2", "titanv", 4, 0, ("titanv",), "IDLE", partitions=("gpu",)),
    SlurmNode("n3", "rtx2080ti", 2, 0, ("rtx2080ti", "ib", "opa"), "IDLE", partitions=("gpu",)),
    SlurmNode("n4", "titanxp", 4, 4, ("titanxp",), "ALLOCATED", partitions=("gpu", "big")),
    SlurmNode("n5", "titanxp", 8, 0, ("titanxp", "opa"), "IDLE", partitions=("big",)),
    SlurmNode("n6", "a100", 4, 0, ("a100",), "DOWN+DRAIN", partitions=("gpu",)),
    # with n3, 4 rtx2080ti GPUs on 2-GPU nodes: `--gpus=4` fits there, `--gres=gpu:4` does not
    SlurmNode("n7", "rtx2080ti", 2, 1, ("rtx2080ti",), "MIXED", partitions=("gpu",)),
]

_TERM = st.sampled_from(["a100", "titanv", "rtx2080ti", "titanxp", "ib", "opa", "A100", "a100|titanv",
                         "(titanv|titanxp)", "[ib|opa]", "ib*2", "nosuch"])
_FEATURES = st.one_of(
    st.just(""),
    _TERM,
    st.builds(lambda a, op, b: f"{a}{op}{b}", _TERM, st.sampled_from(["&", "|", ","]), _TERM),
    st.builds(lambda a, b, c: f"{a}&({b}|{c})", _TERM, _TERM, _TERM),
    st.sampled_from(["ib&|opa", "(titanv", "a100&&", "((a100))"]),          # unreadable or odd
)


@st.composite
def _job(draw, job_id: int) -> SlurmJob:
    tagged = draw(st.booleans())
    comment = ""
    if tagged:
        tag = JobTag(model=draw(st.sampled_from(["vgg16", "densenet169"])), ref="vgg16", group="vgg",
                     iters=draw(st.integers(100, 50_000)), bs=12,
                     mem=draw(st.sampled_from([None, 6.0, 11.5, 30.0])),
                     pinned=draw(st.sampled_from(["", "", "titanv", "a100|titanxp"])),
                     added=draw(st.sampled_from(["", "titanxp", "a100|titanv"])))
        comment = with_tag(tag, draw(st.sampled_from([None, "note"])))
    per_node = draw(st.sampled_from([None, 1, 2, 4]))
    nodes = draw(st.sampled_from([1, 1, 2]))
    gpus = (per_node * nodes) if per_node else draw(st.sampled_from([1, 2, 4, 8]))
    running = draw(st.integers(0, 9)) == 0
    return SlurmJob(
        str(job_id), RUNNING if running else PENDING, priority=draw(st.sampled_from([0, 1, 100, 5000])),
        submit_time=float(draw(st.integers(0, 5000))), num_gpus=gpus, num_nodes=nodes, gpus_per_node=per_node,
        gres_gpu_type=draw(st.sampled_from([None, None, None, "titanv"])),
        features=draw(_FEATURES), comment=comment, partition=draw(st.sampled_from(["", "gpu", "big", "gpu,big"])),
        time_limit_s=draw(st.sampled_from([None, 600.0, 36_000.0])),
        start_time=100.0 if running else None, nodes="n4" if running else "",
        reason=draw(st.sampled_from(["Priority", "Resources", "Dependency", "JobHeldUser"])) if not running else "")


@st.composite
def _queue(draw) -> list[SlurmJob]:
    n = draw(st.integers(1, 40))
    jobs = [draw(_job(i + 1)) for i in range(n)]
    # repeat some jobs' request under new ids, some with another shape: the caches only pay (and can
    # only go wrong) where jobs share a constraint, partitions and memory
    for k in range(draw(st.integers(0, 20))):
        src = jobs[draw(st.integers(0, n - 1))]
        shape = draw(st.sampled_from([{}, {"num_gpus": 4, "gpus_per_node": None, "num_nodes": 1},
                                      {"num_gpus": 4, "gpus_per_node": 4, "num_nodes": 1},
                                      {"num_gpus": 8, "gpus_per_node": None, "num_nodes": 2},
                                      {"num_gpus": 2, "gpus_per_node": 2, "num_nodes": 1}]))
        jobs.append(dataclasses.replace(src, job_id=str(1000 + k), **shape))
    return jobs


def _both(jobs, nodes, now: float = 2000.0, est=None):  # noqa: ANN001, ANN202
    """The snapshot and views with the caches and without them, each from fresh job objects (the round
    core's per-object memo must not hand one build's reading to the other)."""
    est = est or TagEstimator(TRUTH)
    cached = build_snapshot([copy.copy(j) for j in jobs], nodes, est, now, gpu_type_of=str.lower)
    plain = build_snapshot([copy.copy(j) for j in jobs], nodes, est, now, gpu_type_of=str.lower, caches=False)
    return cached, plain


@settings(max_examples=150, deadline=None)
@given(_queue())
def test_cached_snapshot_equals_the_uncached_one(jobs):
    (snap, views), (snap0, views0) = _both(jobs, NODES)
    assert snap == snap0
    assert views == views0


def test_cached_snapshot_equals_the_uncached_one_on_the_recorded_queue():
    from msched.slurm.cli.parsers import parse_sinfo, parse_squeue

    nodes = parse_sinfo((DATA / "sinfo.txt").read_text(), Config())
    node_types = {n.name: n.gpu_type for n in nodes}
    jobs = parse_squeue((DATA / "squeue.json").read_bytes(), Config(), node_types)
    # the recording's pending jobs were held (priority 0: left out of a snapshot); released here, so
    # that their constraints and shapes are read
    jobs = [dataclasses.replace(j, priority=max(j.priority, 1), reason="Priority") if j.is_pending else j
            for j in jobs]
    assert sum(1 for j in jobs if j.is_pending) >= 10
    (snap, views), (snap0, views0) = _both(jobs, nodes, now=max(j.submit_time for j in jobs) + 60)
    assert snap.pending and snap == snap0 and views == views0


def test_cached_snapshot_equals_the_uncached_one_on_the_benchmark_queue():
    """2,000 pending jobs of the benchmark's mix (five tagged models, 20% plain jobs, msub's constraints)
    on the dev cluster's shape: the queue the caches were measured on (BENCHMARKS.md)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_reorder as br

    from msched.estimate.runtime import times_for

    c, _blockers, perf = br.busy_sim(2000, seed=3)
    jobs, nodes = c.jobs(), c.nodes()
    est = TagEstimator(times_for(Config(performance=str(br.PERF)), perf))
    (snap, views), (snap0, views0) = _both(jobs, nodes, now=c.now(), est=est)
    assert sum(1 for p in snap.pending if p.managed and p.est_runtime_s) > 1000     # the estimates were read
    assert len(snap.pending) == 2000 and snap == snap0 and views == views0
