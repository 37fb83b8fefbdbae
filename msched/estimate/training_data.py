"""The measured rows the cost model is fitted and evaluated on, from both public data sets.

- the torchvision benchmark (../shared/data/gpu-train-benchmarks/perf_table.csv,
  github.com/ryujaehun/pytorch-gpu-benchmark, MIT): random 224 x 224 images already on the GPU, forward +
  backward, no optimizer step, batch 12 per GPU, float/half/double, 1-4 GPUs;
- Gavel's throughputs (../shared/data/gavel/perf_table.csv, github.com/stanford-futuredata/gavel
  simulation_throughputs.json, MIT): whole training loops (data loader, optimizer step) of seven job
  types on K80/P100/V100, 1 GPU (its multi-GPU rows count steps summed over GPUs: another unit).

Gavel's job types other than ResNet-50 (torchvision's) are model files written from their published
architectures, shipped in msched/data/gavel_models/ and named here `gavel:<type>`. Profiling them
imports torch (once per user: msched.models.profile_cache): scripts and benchmarks only, never msub.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from msched.config import DATA_DIR
from msched.estimate.cost_fit import FitRow, rows_from_perf

GAVEL_MODELS_DIR = os.path.join(DATA_DIR, "gavel_models")
# Gavel's job type -> (model file stem = factory name, the family it is held out with)
GAVEL_MODEL_FILES = {
    "resnet18": ("resnet18_cifar", "resnet"),   # the CIFAR-10 ResNet-18, not torchvision's
    "transformer": ("transformer", "transformer"),
    "lm": ("lm", "lm"),
    "recommendation": ("recommendation", "recommendation"),
    "a3c": ("a3c", "a3c"),
    "cyclegan": ("cyclegan", "cyclegan"),
}
GAVEL_TORCHVISION = ("resnet50",)   # Gavel's job types that are the torchvision model of the same name
TORCHVISION, GAVEL = "torchvision", "gavel"
# Gavel job types whose step is bound by host work (recommendation: its batches built on the CPU, measured
# slower on V100 than on K80; A3C: the Atari emulator's 20 steps per update): predicted and reported
# separately in bench/bench_estimate.py
CPU_BOUND = ("gavel:recommendation", "gavel:a3c")
# Both are kept out of the fit. A3C's time is its emulator's (no profile term sees it). Recommendation's is
# its input (a dense 20,108-item vector per sample, built and copied on the host), which the cost model's
# input term (`c_in`, ms per MB) sees; fitted (NOT_FITTED = A3C alone: predict8's first variant) it is
# predicted in-sample at 0.134, but it moves shared parameters every held-out fold inherits (c_step
# 0.128 -> 0.023, the Gavel machines' per-call cost 0.36 -> 0.21 ms): titanxp left out 0.257 -> 0.266,
# A3C held out 0.773 -> 1.170, Gavel's GPU-bound job types 0.253 -> 0.258 (BENCHMARKS.md, predict8)
NOT_FITTED = CPU_BOUND
# measurement runs (cost_fit.FitRow.run: one machine setup and software stack each). The torchvision
# table's README: its older single-GPU files (gtx1080ti, titanv) timed 20 iterations, the rest 50; they
# come from another setup (both fit a ~4x faster host). Gavel measured its three types on its own cluster.
TV_RUN, TV_OLDER_RUN, GAVEL_RUN = "pytorch-gpu-benchmark", "pytorch-gpu-benchmark:older", "gavel"
TV_OLDER_TYPES = ("gtx1080ti", "titanv")


def torchvision_run(row: object) -> str:
    """The measurement run of a torchvision-table row (a PerfRow or FitRow)."""
    return TV_OLDER_RUN if getattr(row, "gpu_type", "") in TV_OLDER_TYPES else TV_RUN


def gavel_key(job_type: str) -> str:
    return f"gavel:{job_type}"


def gavel_model_spec(job_type: str) -> str:
    """The `file.py:factory` spec of a Gavel job type's model file."""
    stem, _family = GAVEL_MODEL_FILES[job_type]
    return f"{os.path.join(GAVEL_MODELS_DIR, stem + '.py')}:{stem}"


def gavel_family(model: str) -> str | None:
    """The family a `gavel:<type>` model is held out with (None for other names)."""
    if model.startswith("gavel:"):
        entry = GAVEL_MODEL_FILES.get(model.partition(":")[2])
        return entry[1] if entry else None
    return None


def gavel_profiles() -> dict[str, dict]:
    """Profiles (as dicts) of Gavel's model files, keyed `gavel:<type>` (profiled once, then cached)."""
    from msched.models.profile_cache import get_profile

    return {gavel_key(t): get_profile(gavel_model_spec(t)).to_dict() for t in GAVEL_MODEL_FILES}


def load_rows(data: Path, profiles: Mapping[str, object], gavel: bool = True) -> tuple[list[FitRow], dict[FitRow, str]]:
    """Both data sets' rows whose model has a profile in `profiles`, and the data set of each row.
    Gavel's rows carry `optimizer=True` (its loops step an optimizer and load real data)."""
    rows = rows_from_perf(_load(data / "gpu-train-benchmarks" / "perf_table.csv"), run=torchvision_run)
    origin = dict.fromkeys(rows, TORCHVISION)
    path = data / "gavel" / "perf_table.csv"
    if gavel and path.exists():
        for r in rows_from_perf(_load(path), optimizer=True, run=GAVEL_RUN):
            if r.num_gpus != 1:
                continue
            if r.model in GAVEL_MODEL_FILES:
                r = r._replace(model=gavel_key(r.model))
            elif r.model not in GAVEL_TORCHVISION:
                continue
            rows.append(r)
            origin[r] = GAVEL
    kept = [r for r in rows if r.model in profiles]
    return kept, {r: origin[r] for r in kept}


# a measurement file whose models' median log(p90 / p10) of the timed iterations exceeds this is noisy (the
# machine was shared or throttled while it ran): the table's files sit at 0.001-0.19, titanxp's 4-GPU float
# file at 0.55 (ResNet-50 285 ms on 4 GPUs, 126 ms on 3; its half and double files grow 3-17%)
NOISY_SPREAD = 0.3


def noisy_measurements(data: Path) -> set[tuple[str, int, str]]:
    """(gpu_type, num_gpus, precision) of the torchvision table's noisy measurement files (NOISY_SPREAD), from
    the per-iteration percentiles in gpu-train-benchmarks/train_iter_ms.csv; empty without that file.
    Reported apart by bench/bench_estimate.py; still fitted and evaluated (the rule was not tuned)."""
    import csv
    import math
    import statistics

    path = data / "gpu-train-benchmarks" / "train_iter_ms.csv"
    if not path.exists():
        return set()
    spreads: dict[tuple[str, int, str], list[float]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            p10, p90 = float(row["iter_ms_p10"]), float(row["iter_ms_p90"])
            if p10 > 0 and p90 > 0:
                key = (row["gpu_type"], int(row["num_gpus"]), row["precision"])
                spreads.setdefault(key, []).append(math.log(p90 / p10))
    return {k for k, v in spreads.items() if statistics.median(v) > NOISY_SPREAD}


def gpu_count_growth(data: Path, gpu_type: str, num_gpus: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Per precision and model: the median iteration time of `gpu_type`'s `num_gpus - 1` and `num_gpus` GPU
    files (gpu-train-benchmarks/train_iter_ms.csv; models measured in both). What tells a noisy file from an
    interconnect effect: an all-reduce's added time grows with the gradient bytes (so with the precision's
    element size, and with each model's parameters), a throttled or shared machine's with the model's compute."""
    import csv

    path = data / "gpu-train-benchmarks" / "train_iter_ms.csv"
    times: dict[tuple[str, int, str], float] = {}
    if path.exists():
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row["gpu_type"] == gpu_type and int(row["num_gpus"]) in (num_gpus - 1, num_gpus):
                    times[(row["precision"], int(row["num_gpus"]), row["model"])] = float(row["iter_ms_median"])
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for (prec, n, model), ms in sorted(times.items()):
        after = times.get((prec, num_gpus, model))
        if n == num_gpus - 1 and after:
            out.setdefault(prec, {})[model] = (ms, after)
    return out


def fit_rows(rows: list[FitRow]) -> list[FitRow]:
    """The rows a fit uses: all but those of the job types bound by work no profile term sees (NOT_FITTED)."""
    return [r for r in rows if r.model not in NOT_FITTED]


def _load(path: Path) -> list:
    from msched.estimate.perf_table import PerfTable

    return PerfTable.load(path).rows
