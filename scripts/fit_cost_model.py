#!/usr/bin/env python3
"""Fit the per-layer cost model on the measured tables and write msched/data/cost_model.json.

Rows: every row of ../shared/data/gpu-train-benchmarks/perf_table.csv (github.com/ryujaehun/pytorch-gpu-benchmark,
MIT: torchvision models, forward + backward, no optimizer step, batch 12 per GPU, float/half/double, 1-4 GPUs)
and the 1-GPU ResNet-50 rows of ../shared/data/gavel/perf_table.csv (github.com/stanford-futuredata/gavel
simulation_throughputs.json, MIT: ResNet-50 on ImageNet with its SGD step, K80/P100/V100; Gavel's multi-GPU
rows count steps summed over GPUs, a different unit, so they are left out). Gavel's types are read as the
spec rows its aliases name (k80, p100 = P100 PCIe, v100 = V100 SXM2 16 GB). Profiles: msched/data/torchvision_features.json.

    .venv/bin/python scripts/fit_cost_model.py [--data ../shared/data] [--out msched/data/cost_model.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msched.estimate.cost_fit import FitRow, fit, rows_from_perf  # noqa: E402
from msched.estimate.cost_model import SHIPPED_PARAMS  # noqa: E402
from msched.estimate.gpu_specs import load_specs  # noqa: E402
from msched.estimate.perf_table import PerfTable  # noqa: E402
from msched.models.shipped import load_table  # noqa: E402

# Gavel's job types that are the torchvision model of the same name (its "ResNet-18" is the CIFAR-10 variant,
# a different network: bench/gavel_models/resnet18_cifar.py)
GAVEL_TORCHVISION = ("resnet50",)


def training_rows(data: Path, profiles: dict) -> list[FitRow]:
    """The rows the shipped parameters are fitted on (see the module docstring)."""
    rows = rows_from_perf(PerfTable.load(data / "gpu-train-benchmarks" / "perf_table.csv").rows)
    gavel = data / "gavel" / "perf_table.csv"
    if gavel.exists():
        rows += [r for r in rows_from_perf(PerfTable.load(gavel).rows, optimizer=True)
                 if r.num_gpus == 1 and r.model in GAVEL_TORCHVISION]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("MSCHED_SHARED_DATA") or ROOT.parent / "shared" / "data"),
                    help="folder holding gpu-train-benchmarks/ and gavel/ (default: MSCHED_SHARED_DATA or ../shared/data)")
    ap.add_argument("--out", type=Path, default=Path(SHIPPED_PARAMS))
    args = ap.parse_args(argv)
    profiles = load_table()["models"]
    rows = training_rows(args.data, profiles)
    params = fit(rows, profiles, load_specs())
    params["sources"] = ["https://github.com/ryujaehun/pytorch-gpu-benchmark (MIT)",
                         "https://github.com/stanford-futuredata/gavel scheduler/simulation_throughputs.json (MIT)"]
    args.out.write_text(json.dumps(params, indent=1, sort_keys=True) + "\n")
    fit_info = params["fit"]
    print(f"wrote {args.out}: {fit_info['rows']} rows, {len(fit_info['models'])} models, "
          f"{len(fit_info['types'])} types, in-sample mean |log error| {fit_info['mean_abs_log_error']:.3f}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
