"""The four benchmark workloads of issue 8, built from the measured public data in ../shared/data.

Why our own builders and not only `msched trace synth`: the benchmark needs things the general synth
command does not promise — arrival times from Philly timestamps compressed to a target offered load on
the benchmark's own cluster, GPU counts capped at that cluster's node size, a cluster whose type mix
comes from the Alibaba 2023 node list, and Gavel's job types with Gavel's size/duration distributions
and Gavel's own measurements as both truth and knowledge. Every builder is a pure function of
(data, seed, size), so a figure in BENCHMARKS.md can be reproduced exactly.

Every job carries a time limit as users set them (`slurm_sim.trace.user_time_limit`: an overestimate of
its runtime on the slowest type that can hold it, heavy-tailed, rounded up to popular values), and its
model always has truth rows on every type of the cluster that can hold it (a model without is redrawn),
so `msched sim` never refuses a workload for truth gaps and never loses a job.

Workloads (see BENCHMARKS.md for the reasons behind each choice):
- `philly`  (a): the 32 torchvision models of the shared table (references excluded) on its 6 GPU types,
  Philly sizes, durations and arrivals.
- `static`  (b): Philly jobs up to 4 h, all submitted at time 0 (the papers' makespan setting), on a
  smaller cluster of the same 6 types so that the batch is a real backlog.
- `alibaba` (c): Philly-shaped jobs, Alibaba pod GPU counts, on a 256-GPU cluster with the GPU-type mix
  of the Alibaba 2023 node list mapped onto the shared table's types (`ALIBABA_TYPE_MAP`).
- `gavel`   (d): Gavel's job types and K80/P100/V100 throughputs; every Gavel model is a reference.

The shared data directory is the repository's sibling `../shared/data`, or `MSCHED_SHARED_DATA`.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from msched.estimate.perf_table import PerfTable
from slurm_sim.cluster import ClusterSpec
from slurm_sim.cluster import parse_cluster as parse_cluster_spec
from slurm_sim.trace import TraceJob, gap_free, user_time_limit, write_trace

REPO = Path(__file__).resolve().parent.parent

# Philly jobs shorter than a minute are mostly failed launches (9% of the trace); longer than a
# day (3%) they make the makespan one job's length whatever the policy does. Both are dropped.
PHILLY_MIN_S = 60.0
PHILLY_MAX_S = 86400.0
# The static batch (makespan setting) keeps jobs up to 4 h (94% of the rest), so that a batch of a few
# hundred jobs is several times longer than its longest job and the makespan measures the schedule.
STATIC_MAX_S = 4 * 3600.0
# Philly's GPUs were Pascal-generation (P100/P40, 12-24 GB): a Philly duration is read as the job's
# runtime on the shared table's Pascal card, titanxp, which fixes the job's iterations.
PHILLY_GPU_TYPE = "titanxp"
SHARED_BATCH = 12            # the only per-GPU batch size the shared table measures

# (a): the shared table's 6 GPU types, 2 nodes of 4 GPUs each (4-GPU nodes like the dev cluster's; the
# table measures up to 4 GPUs). (b): one such node per type, so a few hundred jobs make a real backlog.
SHARED_CLUSTER = "a100:4x2,titanrtx:4x2,rtx2080ti:4x2,titanxp:4x2,titanv:4x2,gtx1080ti:4x2"
STATIC_CLUSTER = "a100:4x1,titanrtx:4x1,rtx2080ti:4x1,titanxp:4x1,titanv:4x1,gtx1080ti:4x1"

# (c): Alibaba 2023 GPU model -> shared-table type, by architecture generation / class. The reasons are
# printed into BENCHMARKS.md; G2 and G3 are undisclosed in the source, so their mapping is a judgement.
ALIBABA_MAPPING = {
    "V100M16": ("titanv", "Volta GV100: the same chip as the Titan V"),
    "V100M32": ("titanv", "Volta GV100 with 32 GB; memory size is not what the table measures"),
    "P100": ("titanxp", "Pascal, the table's Pascal card with full multi-GPU rows (gtx1080ti has 15 models only)"),
    "T4": ("rtx2080ti", "Turing: the table's Turing consumer card"),
    "A10": ("a100", "Ampere (2 GPUs in the whole list: none left at 256)"),
    "G3": ("a100", "undisclosed; 8-GPU hosts with 128 cores / 768 GB, the list's largest: read as the "
                   "newest class"),
    "G2": ("titanrtx", "undisclosed; 8-GPU hosts with 96 cores / 384 GB: read as a mid-range 24 GB class. "
                       "Mapping it to a100 would make 70% of the cluster the fastest type and hide the "
                       "heterogeneity the workload is meant to test; to gtx1080ti, 70% of the GPUs could run "
                       "only 15 of the 32 models"),
}
ALIBABA_TYPE_MAP = {k: v[0] for k, v in ALIBABA_MAPPING.items()}
ALIBABA_GPUS = 256

# (d): Gavel's cluster: the three types, 4 nodes of 8 GPUs each (Gavel jobs use up to 8 GPUs).
GAVEL_CLUSTER = "v100:8x4,p100:8x4,k80:8x4"
GAVEL_SIZES = ((1, 0.7), (2, 0.1), (4, 0.15), (8, 0.05))


class WorkloadError(RuntimeError):
    """The data a workload needs is missing or unusable; one line naming what and where."""


# --------------------------------------------------------------------------- data locations
def shared_data_dir() -> Path:
    env = os.environ.get("MSCHED_SHARED_DATA")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    if not path.is_dir():
        raise WorkloadError(f"shared data directory {path} not found (set MSCHED_SHARED_DATA)")
    return path


def shared_perf_path() -> Path:
    return shared_data_dir() / "gpu-train-benchmarks" / "perf_table.csv"


def gavel_perf_path() -> Path:
    return shared_data_dir() / "gavel" / "perf_table.csv"


@lru_cache(maxsize=4)
def _perf(path: str) -> PerfTable:
    return PerfTable.load(path)


def default_references() -> tuple[str, ...]:
    """msched's default reference set, read as msched reads it (the jobs of (a)-(c) must avoid it)."""
    try:
        from msched.models.classify import load_references

        return tuple(load_references().names)
    except ImportError as exc:
        raise WorkloadError(f"msched's reference set is not available: {exc}") from exc


# --------------------------------------------------------------------------- traces and workloads
@dataclass(frozen=True)
class Workload:
    """One benchmark case: a trace on a cluster, what is true and what the policy may know."""

    name: str
    seed: int
    cluster: str                      # DESIGN's cluster spec
    jobs: tuple[TraceJob, ...]
    truth: Path                       # what really happens
    perf: Path | None = None          # what the policy may know (None: msched's shipped default)
    references: tuple[str, ...] | None = None   # None: msched's default reference set
    notes: dict = field(default_factory=dict, compare=False)

    def write_trace(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trace(path, self.jobs)
        return path

    def sim_args(self, trace: str | os.PathLike) -> list[str]:
        """Arguments for `msched sim` (without --policy/--json) that replay this workload."""
        args = ["--cluster", self.cluster, "--trace", str(trace), "--truth", str(self.truth)]
        if self.perf is not None:
            args += ["--perf", str(self.perf)]
        if self.references is not None:
            args += ["--references", ",".join(self.references)]
        return args

    @property
    def total_gpus(self) -> int:
        return cluster_gpus(self.cluster)


def parse_cluster(spec: str) -> dict[str, tuple[int, int]]:
    """`a100:4x2,...` -> {type: (gpus per node, nodes)} (types summed when repeated with the same shape)."""
    out: dict[str, tuple[int, int]] = {}
    for part in spec.split(","):
        gpu_type, _, shape = part.strip().partition(":")
        per_node, _, nodes = shape.partition("x")
        out[gpu_type] = (int(per_node), int(nodes) + out.get(gpu_type, (0, 0))[1])
    return out


def cluster_gpus(spec: str) -> int:
    return sum(g * n for g, n in parse_cluster(spec).values())


# --------------------------------------------------------------------------- Philly
@dataclass(frozen=True)
class PhillyJob:
    t: float            # epoch seconds
    duration: float
    num_gpus: int


@lru_cache(maxsize=1)
def philly_jobs() -> tuple[PhillyJob, ...]:
    """Philly jobs with a usable duration, in submit order."""
    path = shared_data_dir() / "philly" / "philly_jobs.csv"
    out = []
    try:
        with open(path, newline="") as fh:
            for rec in csv.DictReader(fh):
                d = float(rec["duration"])
                if not PHILLY_MIN_S <= d <= PHILLY_MAX_S:
                    continue
                t = datetime.strptime(rec["timestamp"], "%Y-%m-%d %H:%M:%S").timestamp()
                out.append(PhillyJob(t, d, int(float(rec["num_gpus"]))))
    except (OSError, KeyError, ValueError) as exc:
        raise WorkloadError(f"cannot read Philly jobs {path}: {exc}") from exc
    out.sort(key=lambda j: j.t)
    return tuple(out)


def _philly_window(n: int, rng: random.Random, max_s: float = PHILLY_MAX_S) -> list[PhillyJob]:
    jobs = philly_jobs() if max_s >= PHILLY_MAX_S else tuple(j for j in philly_jobs() if j.duration <= max_s)
    if n > len(jobs):
        raise WorkloadError(f"asked for {n} jobs, Philly has {len(jobs)} usable ones")
    start = rng.randrange(0, len(jobs) - n + 1)
    return list(jobs[start:start + n])


def non_reference_models(truth: PerfTable, references: Sequence[str]) -> list[str]:
    refs = set(references)
    return sorted(m for m in truth.models() if m not in refs)


def _iterations(truth: PerfTable, model: str, num_gpus: int, batch: int, duration_s: float, gpu_type: str) -> int:
    """Iterations that take `duration_s` on `gpu_type` (or, without data there, the median type)."""
    ms = truth.iter_ms(model, gpu_type, num_gpus, batch)
    if ms is None:
        speeds = sorted(v for t in truth.types_for(model) if (v := truth.iter_ms(model, t, num_gpus, batch)))
        if not speeds:
            raise WorkloadError(f"model {model} has no measurement in the truth table")
        ms = speeds[len(speeds) // 2]
    return max(1, round(duration_s * 1000.0 / ms))


def mean_runtime_s(truth: PerfTable, job: TraceJob, types: Sequence[str]) -> float:
    """The job's runtime averaged over the cluster's types that can run it (for offered-load scaling)."""
    vals = [r for t in types if (r := truth.runtime_s(job.model, t, job.num_gpus, job.batch_size, job.iterations))]
    return sum(vals) / len(vals) if vals else 0.0


def _scale_arrivals(raw: list[float], jobs: list[TraceJob], truth: PerfTable, cluster: str, load: float) -> list[float]:
    """Arrival offsets compressed so that offered work / (GPUs x span) = `load`; order and gaps' shape kept."""
    types = list(parse_cluster(cluster))
    work = sum(j.num_gpus * mean_runtime_s(truth, j, types) for j in jobs)
    t0 = min(raw)
    span = max(raw) - t0
    if span <= 0:
        return [0.0] * len(raw)
    target_span = work / (load * cluster_gpus(cluster))
    return [(t - t0) * target_span / span for t in raw]


def _users(rng: random.Random, n: int, pool: int = 16) -> list[str]:
    return [f"u{rng.randrange(pool):02d}" for _ in range(n)]


def philly_workload(n_jobs: int, seed: int, *, static: bool = False, load: float = 0.9,
                    cluster: str = SHARED_CLUSTER, references: Sequence[str] | None = None,
                    size_sampler=None, name: str | None = None) -> Workload:
    """(a)/(b)/(c): shared-table models (not references) with Philly sizes, durations and arrivals.

    A window of `n_jobs` consecutive Philly jobs (random start) gives arrivals, GPU counts (capped at the
    cluster's largest node) and durations (read as runtime on titanxp -> iterations). `size_sampler`
    (rng -> GPUs) replaces Philly's GPU counts (the Alibaba workload draws Alibaba's).
    """
    rng = random.Random(seed)
    truth_path = shared_perf_path()
    truth = _perf(str(truth_path))
    refs = tuple(references) if references is not None else default_references()
    models = non_reference_models(truth, refs)
    if not models:
        raise WorkloadError("every model of the shared table is a reference: no job models left")
    node_max = max(g for g, _ in parse_cluster(cluster).values())
    spec = parse_cluster_spec(cluster)
    window = _philly_window(n_jobs, rng, STATIC_MAX_S if static else PHILLY_MAX_S)
    users = _users(rng, n_jobs)
    limit_rng = random.Random(seed * 7919 + 17)     # limits from their own stream: the jobs stay as before
    jobs: list[TraceJob] = []
    capped = redrawn = 0
    for i, pj in enumerate(window):
        gpus = size_sampler(rng) if size_sampler else pj.num_gpus
        if gpus > node_max:
            capped += 1
            gpus = node_max
        model = rng.choice(models)
        if not gap_free(truth, spec, model, gpus, SHARED_BATCH):
            # the truth has no rows for it on a type that could hold it: draw among the models it has
            redrawn += 1
            model = rng.choice([m for m in models if gap_free(truth, spec, m, gpus, SHARED_BATCH)])
        iters = _iterations(truth, model, gpus, SHARED_BATCH, pj.duration, PHILLY_GPU_TYPE)
        jobs.append(TraceJob(f"j{i:05d}", 0.0, users[i], model, gpus, SHARED_BATCH, iters,
                             time_limit_s=_user_limit(limit_rng, truth, spec, model, gpus, SHARED_BATCH, iters)))
    if static:
        times = [0.0] * n_jobs
    else:
        times = _scale_arrivals([pj.t for pj in window], jobs, truth, cluster, load)
    jobs = [replace(j, submit_time=t) for j, t in zip(jobs, times, strict=True)]
    kind = name or ("static" if static else "philly")
    return Workload(kind, seed, cluster, tuple(jobs), truth_path, None, None if references is None else refs,
                    notes={"capped_gpu_counts": capped, "models": len(models), "load": None if static else load,
                           "redrawn_for_truth_gaps": redrawn})


def _user_limit(rng: random.Random, truth: PerfTable, spec: ClusterSpec, model: str, gpus: int, batch: int,
                iters: int) -> float:
    """The job's time limit as a user sets it (slurm_sim.trace.user_time_limit), from its slowest type."""
    slowest = max(truth.runtime_s(model, t, gpus, batch, iters) for t in spec.gpu_types if spec.fits(t, gpus))
    return user_time_limit(rng, slowest)


# --------------------------------------------------------------------------- Alibaba
@lru_cache(maxsize=1)
def alibaba_nodes() -> dict[str, Counter]:
    """GPU model -> Counter(GPUs per node -> GPUs on such nodes), from the Alibaba 2023 node list."""
    path = shared_data_dir() / "alibaba-gpu-v2023" / "openb_node_list_gpu_node.csv"
    out: dict[str, Counter] = {}
    try:
        with open(path, newline="") as fh:
            for rec in csv.DictReader(fh):
                n = int(rec["gpu"])
                if n > 0:
                    out.setdefault(rec["model"], Counter())[n] += n
    except (OSError, KeyError, ValueError) as exc:
        raise WorkloadError(f"cannot read Alibaba node list {path}: {exc}") from exc
    return out


def alibaba_cluster(total: int = ALIBABA_GPUS, type_map: dict[str, str] | None = None) -> str:
    """A cluster spec with the Alibaba 2023 GPU-type mix, scaled to `total` GPUs.

    GPUs per mapped type are proportional to the node list; each type keeps its most common node size
    (GPU-weighted); node counts are chosen (search over floor/ceil +-1) to hit `total` exactly while
    staying closest to the proportional share.
    """
    type_map = type_map or ALIBABA_TYPE_MAP
    gpus: Counter = Counter()
    shapes: dict[str, Counter] = {}
    for model, sizes in alibaba_nodes().items():
        if model not in type_map:
            raise WorkloadError(f"Alibaba GPU model {model} has no mapping; known: {', '.join(type_map)}")
        t = type_map[model]
        gpus[t] += sum(sizes.values())
        shapes.setdefault(t, Counter()).update(sizes)
    all_gpus = sum(gpus.values())
    ideal = {t: total * g / all_gpus for t, g in gpus.items()}
    size = {t: shapes[t].most_common(1)[0][0] for t in gpus}
    options = {}
    for t in gpus:
        base = ideal[t] / size[t]
        options[t] = sorted({max(0, c) for c in (math.floor(base) - 1, math.floor(base), math.ceil(base),
                                                 math.ceil(base) + 1)})
    types = sorted(gpus, key=lambda t: -ideal[t])
    best = None
    for combo in itertools.product(*(options[t] for t in types)):
        if sum(c * size[t] for c, t in zip(combo, types, strict=True)) != total:
            continue
        err = sum((c * size[t] - ideal[t]) ** 2 / max(ideal[t], 1.0) for c, t in zip(combo, types, strict=True))
        if best is None or err < best[0]:
            best = (err, combo)
    if best is None:
        raise WorkloadError(f"cannot build a {total}-GPU cluster from node sizes {size}")
    return ",".join(f"{t}:{size[t]}x{c}" for c, t in zip(best[1], types, strict=True) if c > 0)


@lru_cache(maxsize=1)
def alibaba_gpu_counts() -> tuple[tuple[int, float], ...]:
    """GPUs per pod in the Alibaba 2023 pod list (GPU pods only; a shared fraction counts as 1 GPU)."""
    path = shared_data_dir() / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    counts: Counter = Counter()
    try:
        with open(path, newline="") as fh:
            for rec in csv.DictReader(fh):
                n = int(rec["num_gpu"])
                if n > 0:
                    counts[n] += 1
    except (OSError, KeyError, ValueError) as exc:
        raise WorkloadError(f"cannot read Alibaba pod list {path}: {exc}") from exc
    total = sum(counts.values())
    return tuple((n, c / total) for n, c in sorted(counts.items()))


def _draw(rng: random.Random, dist: Sequence[tuple[int, float]]) -> int:
    x = rng.random()
    acc = 0.0
    for value, p in dist:
        acc += p
        if x < acc:
            return value
    return dist[-1][0]


def alibaba_workload(n_jobs: int, seed: int, *, load: float = 0.9, references: Sequence[str] | None = None) -> Workload:
    """(c): Philly arrivals and durations, Alibaba pod GPU counts, on the Alibaba-mix 256-GPU cluster."""
    dist = alibaba_gpu_counts()
    return philly_workload(n_jobs, seed, load=load, cluster=alibaba_cluster(), references=references,
                           size_sampler=lambda rng: _draw(rng, dist), name="alibaba")


# --------------------------------------------------------------------------- Gavel
def gavel_duration_s(rng: random.Random) -> float:
    """Gavel's synthetic durations: 60*10^U(1.5,3) s with probability 0.8, else 60*10^U(3,4) s."""
    if rng.random() < 0.8:
        return 60.0 * 10 ** rng.uniform(1.5, 3.0)
    return 60.0 * 10 ** rng.uniform(3.0, 4.0)


def gavel_workload(n_jobs: int, seed: int, *, static: bool = False, load: float = 0.9,
                   cluster: str = GAVEL_CLUSTER) -> Workload:
    """(d): Gavel's job types (model, batch) with its size and duration laws; Poisson arrivals.

    As in Gavel, a duration is the job's runtime on a V100 at its scale, which fixes its steps; a job type is
    drawn uniformly among those Gavel measured on the V100 at the drawn scale. Gavel's table is both truth
    and knowledge, and every Gavel model is a reference (the job's model is its own reference).
    """
    rng = random.Random(seed)
    truth_path = gavel_perf_path()
    truth = _perf(str(truth_path))
    by_scale: dict[int, list[tuple[str, int]]] = {}
    for r in truth.rows:
        if r.gpu_type == "v100":
            by_scale.setdefault(r.num_gpus, []).append((r.model, r.batch_size))
    for v in by_scale.values():
        v.sort()
    node_max = max(g for g, _ in parse_cluster(cluster).values())
    sizes = [(s, p) for s, p in GAVEL_SIZES if s <= node_max and s in by_scale]
    norm = sum(p for _, p in sizes)
    sizes = [(s, p / norm) for s, p in sizes]
    users = _users(rng, n_jobs)
    spec = parse_cluster_spec(cluster)
    limit_rng = random.Random(seed * 7919 + 17)
    jobs = []
    redrawn = 0
    for i in range(n_jobs):
        scale = _draw(rng, sizes)
        model, batch = rng.choice(by_scale[scale])
        if not gap_free(truth, spec, model, scale, batch):
            redrawn += 1
            model, batch = rng.choice([(m, b) for m, b in by_scale[scale] if gap_free(truth, spec, m, scale, b)])
        ms = truth.iter_ms(model, "v100", scale, batch)
        iters = max(1, round(gavel_duration_s(rng) * 1000.0 / ms))
        jobs.append(TraceJob(f"g{i:05d}", 0.0, users[i], model, scale, batch, iters,
                             time_limit_s=_user_limit(limit_rng, truth, spec, model, scale, batch, iters)))
    if not static:
        raw = list(itertools.accumulate(rng.expovariate(1.0) for _ in range(n_jobs)))
        times = _scale_arrivals(raw, jobs, truth, cluster, load)
        jobs = [replace(j, submit_time=t) for j, t in zip(jobs, times, strict=True)]
    refs = tuple(sorted(truth.models()))
    return Workload("gavel", seed, cluster, tuple(jobs), truth_path, truth_path, refs,
                    notes={"load": None if static else load, "job_types": len({(j.model, j.batch_size) for j in jobs}),
                           "redrawn_for_truth_gaps": redrawn})


# --------------------------------------------------------------------------- registry
WORKLOADS = {
    "philly": lambda n, seed: philly_workload(n, seed),
    "static": lambda n, seed: philly_workload(n, seed, static=True, cluster=STATIC_CLUSTER),
    "alibaba": lambda n, seed: alibaba_workload(n, seed),
    "gavel": lambda n, seed: gavel_workload(n, seed),
}

DESCRIPTIONS = {
    "philly": "(a) shared table, 6 GPU types, 48 GPUs; Philly sizes/durations/arrivals (load 0.9)",
    "static": "(b) static batch at time 0 on 24 GPUs of the 6 types, Philly jobs up to 4 h (makespan setting)",
    "alibaba": "(c) Alibaba 2023 GPU-type mix scaled to 256 GPUs; Alibaba pod GPU counts (load 0.9)",
    "gavel": "(d) Gavel job types, K80/P100/V100 throughputs (truth = knowledge), 96 GPUs (load 0.9)",
}


def build(name: str, n_jobs: int, seed: int) -> Workload:
    try:
        builder = WORKLOADS[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None
    return builder(n_jobs, seed)


def describe(w: Workload) -> dict:
    """A short summary (for BENCHMARKS.md and a quick sanity check)."""
    sizes = Counter(j.num_gpus for j in w.jobs)
    return {
        "workload": w.name, "seed": w.seed, "jobs": len(w.jobs), "cluster": w.cluster, "gpus": w.total_gpus,
        "models": len({j.model for j in w.jobs}), "gpus_per_job": dict(sorted(sizes.items())),
        "arrival_span_h": round(max(j.submit_time for j in w.jobs) / 3600.0, 2), **w.notes,
    }


if __name__ == "__main__":   # python bench/workloads.py [N] [SEED]: print a summary of each workload
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    s = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for key in WORKLOADS:
        print(json.dumps(describe(build(key, n, s))))
