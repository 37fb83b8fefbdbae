#!/usr/bin/env python3
"""Fit the per-layer cost model on the measured tables and write msched/data/cost_model.json.

Rows (msched.estimate.training_data): every row of ../shared/data/gpu-train-benchmarks/perf_table.csv
(github.com/ryujaehun/pytorch-gpu-benchmark, MIT: torchvision models, forward + backward, no optimizer
step, batch 12 per GPU, float/half/double, 1-4 GPUs) and the 1-GPU rows of ../shared/data/gavel/perf_table.csv
(github.com/stanford-futuredata/gavel simulation_throughputs.json, MIT: whole training loops on
K80/P100/V100) of ResNet-50 and of the job types shipped as model files in msched/data/gavel_models/
(ResNet-18 on CIFAR-10, Transformer, LSTM language model, CycleGAN; recommendation, bound by its input on
the host, and A3C, bound by its Atari emulator, are kept out: training_data.NOT_FITTED). Gavel's types are read as the spec rows its aliases name (k80,
p100 = P100 PCIe, v100 = V100 SXM2 16 GB). Profiles: msched/data/torchvision_features.json and the model
files (profiled on the meta device, cached per user).

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

from msched.estimate import training_data  # noqa: E402
from msched.estimate.cost_fit import fit  # noqa: E402
from msched.estimate.cost_model import SHIPPED_PARAMS  # noqa: E402
from msched.estimate.gpu_specs import load_specs  # noqa: E402
from msched.models.shipped import load_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("MSCHED_SHARED_DATA") or ROOT.parent / "shared" / "data"),
                    help="folder holding gpu-train-benchmarks/ and gavel/ (default: MSCHED_SHARED_DATA or ../shared/data)")
    ap.add_argument("--out", type=Path, default=Path(SHIPPED_PARAMS))
    args = ap.parse_args(argv)
    profiles = dict(load_table()["models"])
    profiles.update(training_data.gavel_profiles())
    rows, _origin = training_data.load_rows(args.data, profiles)
    params = fit(training_data.fit_rows(rows), profiles, load_specs())
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
