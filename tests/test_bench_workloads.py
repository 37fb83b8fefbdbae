"""Smoke test of the benchmark workload builders (bench/workloads.py): each builds a trace that DESIGN's
trace format and the simulator's rules accept — models known to the truth table, references kept out
of the jobs, GPU counts that fit a node, positive work, arrivals in order."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from msched.estimate.perf_table import PerfTable
from slurm_sim.trace import REQUIRED

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import workloads as wl  # noqa: E402
from helpers import SHARED_SAMPLE  # noqa: E402

REFS = ("resnet50", "resnet18", "vgg16", "densenet121", "mobilenet_v2", "squeezenet1_0")


@pytest.fixture(autouse=True)
def shared_data(monkeypatch):
    """The workloads read the tests' small copy of the shared data, with or without ../shared."""
    monkeypatch.setenv("MSCHED_SHARED_DATA", str(SHARED_SAMPLE))
    return wl.shared_data_dir()


def _check_trace(w: wl.Workload, tmp_path: Path) -> list[dict]:
    truth = PerfTable.load(w.truth)
    shape = wl.parse_cluster(w.cluster)
    node_max = max(g for g, _ in shape.values())
    path = w.write_trace(tmp_path / f"{w.name}.csv")
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == (*REQUIRED, "time_limit_s")
        rows = list(reader)
    assert len(rows) == len(w.jobs)
    assert len({r["job_id"] for r in rows}) == len(rows)
    times = [float(r["submit_time"]) for r in rows]
    assert times == sorted(times) and times[0] >= 0
    for r in rows:
        assert r["model"] in truth.models()
        gpus = int(r["num_gpus"])
        assert 1 <= gpus <= node_max
        assert int(r["iterations"]) >= 1
        # the truth has the job's model on every type that can hold it (no job is refused or lost), and the
        # user's limit is at least its runtime on the slowest of them
        fitting = [t for t, (per_node, nodes) in shape.items() if gpus <= per_node]
        runtimes = [truth.runtime_s(r["model"], t, gpus, int(r["batch_size"]), int(r["iterations"])) for t in fitting]
        assert None not in runtimes and float(r["time_limit_s"]) >= max(runtimes) - 1e-6
    # and the simulator's own trace reader accepts it on this cluster (when the simulator is installed)
    try:
        from slurm_sim.cluster import parse_cluster
        from slurm_sim.trace import load_trace
    except ImportError:
        return rows
    assert len(load_trace(path, truth, parse_cluster(w.cluster))) == len(rows)
    return rows


@pytest.mark.parametrize("static", [False, True])
def test_philly_workload_is_a_valid_trace_without_references(tmp_path, static):
    w = wl.philly_workload(120, seed=3, static=static, references=REFS)
    rows = _check_trace(w, tmp_path)
    assert not {r["model"] for r in rows} & set(REFS)
    assert w.total_gpus == wl.cluster_gpus(wl.SHARED_CLUSTER) and len(wl.parse_cluster(w.cluster)) == 6
    if static:
        assert all(float(r["submit_time"]) == 0 for r in rows)
    else:
        assert float(rows[-1]["submit_time"]) > 0
    # same seed, same trace; another seed, another one
    assert wl.philly_workload(120, seed=3, static=static, references=REFS).jobs == w.jobs
    assert wl.philly_workload(120, seed=4, static=static, references=REFS).jobs != w.jobs


def test_static_batch_is_a_backlog_of_short_jobs_with_the_default_references(tmp_path):
    w = wl.build("static", 200, 1)
    rows = _check_trace(w, tmp_path)
    assert w.cluster == wl.STATIC_CLUSTER and w.references is None   # msched's own default set
    assert not {r["model"] for r in rows} & set(wl.default_references())
    truth = PerfTable.load(w.truth)
    on_titanxp = [truth.runtime_s(r["model"], "titanxp", int(r["num_gpus"]), int(r["batch_size"]),
                                  int(r["iterations"])) for r in rows]
    assert max(on_titanxp) <= wl.STATIC_MAX_S * 1.001
    # the batch's work is several times what its longest job takes on the whole cluster
    assert sum(int(r["num_gpus"]) * t for r, t in zip(rows, on_titanxp, strict=True)) / w.total_gpus > 2 * max(on_titanxp)


def test_alibaba_cluster_has_256_gpus_in_the_mapped_types(tmp_path):
    spec = wl.alibaba_cluster()
    assert wl.cluster_gpus(spec) == 256
    shared_types = set(PerfTable.load(wl.shared_perf_path()).gpu_types())
    assert set(wl.parse_cluster(spec)) <= shared_types
    w = wl.alibaba_workload(150, seed=1, references=REFS)
    rows = _check_trace(w, tmp_path)
    assert not {r["model"] for r in rows} & set(REFS)


def test_gavel_workload_uses_measured_job_types(tmp_path):
    w = wl.gavel_workload(200, seed=2)
    rows = _check_trace(w, tmp_path)
    truth = PerfTable.load(w.truth)
    assert w.perf == w.truth and set(w.references) == truth.models()
    measured = {(r.model, r.num_gpus, r.batch_size) for r in truth.rows if r.gpu_type == "v100"}
    for r in rows:
        assert (r["model"], int(r["num_gpus"]), int(r["batch_size"])) in measured
    sizes = {int(r["num_gpus"]) for r in rows}
    assert sizes <= {1, 2, 4, 8} and 1 in sizes


def test_unknown_workload_names_the_choices():
    with pytest.raises(wl.WorkloadError, match="choose from philly, static, alibaba, gavel"):
        wl.build("nope", 10, 1)
