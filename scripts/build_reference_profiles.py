#!/usr/bin/env python3
"""Build the shipped profiles under msched/data/ (run by `make profiles`; needs torch and torchvision).

Writes
- msched/data/torchvision_features.json: the profile of every torchvision classification model at its own
  default input size, with the library versions, so that msub never needs torch for a torchvision name;
- msched/data/reference_models.json: the default reference set (name, family/group, measured or not,
  FLOPs, raw features) and its standardisation (fitted with scikit-learn), so msub classifies in pure
  Python;
- msched/data/gpu_performance.csv: the reference models' measured rows (the policy's default knowledge);
- msched/data/measured_perf.csv: every model of the measured table (the simulator's default truth);
- msched/data/README.md: where the numbers come from.
The measured figures come from ../shared/data/gpu-train-benchmarks/train_iter_ms.csv
(github.com/ryujaehun/pytorch-gpu-benchmark, MIT).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msched.models.classify import ReferenceSet  # noqa: E402
from msched.models.features import FEATURE_NAMES  # noqa: E402
from msched.models.profiler import library_versions, profile_in_process, torchvision_names  # noqa: E402

SOURCE = "pytorch-gpu-benchmark"
SOURCE_URL = "https://github.com/ryujaehun/pytorch-gpu-benchmark"

# The default references: one or two measured models per measured family (the middle-sized member,
# plus ResNet-18 for the small end of the ResNets), so that most of the 32 measured models stay
# outside the set for evaluation; and families with no public measurements, marked unknown, so
# that such jobs still get a meaningful group.
MEASURED_REFERENCES = (
    "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "vgg16", "densenet121",
    "mobilenet_v2", "mnasnet1_0", "shufflenet_v2_x1_0", "squeezenet1_0",
)
UNMEASURED_REFERENCES = ("efficientnet_b0", "regnet_y_1_6gf", "vit_b_16")


def read_benchmarks(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def perf_rows(rows: list[dict], models: set[str] | None) -> list[list]:
    out = []
    for r in rows:
        if models is not None and r["model"] not in models:
            continue
        n = int(r["num_gpus"])
        per_gpu = int(r["global_batch_size"]) // n
        out.append([r["model"], r["gpu_type"], n, per_gpu, r["precision"], r["iter_ms_median"], SOURCE])
    return sorted(out, key=lambda x: (x[0], x[1], x[4], x[2], x[3]))


def write_perf(path: Path, rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "gpu_type", "num_gpus", "batch_size", "precision", "iter_ms", "source"])
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "gpu-train-benchmarks",
                    help="folder holding train_iter_ms.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "msched" / "data")
    ap.add_argument("--skip-profiles", action="store_true",
                    help="reuse the existing torchvision_features.json (only rebuild references and tables)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    features_path = args.out / "torchvision_features.json"

    if args.skip_profiles:
        profiles = json.loads(features_path.read_text())["models"]
    else:
        profiles = {}
        start = time.perf_counter()
        for name in torchvision_names():
            profiles[name] = profile_in_process(name).to_dict()
            profiles[name].pop("versions", None)
            profiles[name].pop("seconds", None)
            print(f"{name:22s} {profiles[name]['flops'] / 1e9:9.2f} GFLOPs", file=sys.stderr)
        print(f"profiled {len(profiles)} models in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        features_path.write_text(json.dumps(
            {"versions": library_versions(), "feature_names": list(FEATURE_NAMES), "models": profiles},
            indent=1, sort_keys=True) + "\n")

    bench = read_benchmarks(args.data / "train_iter_ms.csv")
    measured_models = {r["model"] for r in bench}
    missing = [m for m in MEASURED_REFERENCES if m not in measured_models]
    if missing:
        raise SystemExit(f"references without measurements in {args.data}: {', '.join(missing)}")
    names = [*MEASURED_REFERENCES, *UNMEASURED_REFERENCES]
    refset = ReferenceSet.from_profiles(names, profiles=profiles, measured=MEASURED_REFERENCES)
    ref_doc = {
        "description": "Default msched reference models: group = family; performance measured or unknown. "
                       "Built by scripts/build_reference_profiles.py.",
        "versions": library_versions(),
        "metric": "cosine",
        **refset.to_dict(),
    }
    (args.out / "reference_models.json").write_text(json.dumps(ref_doc, indent=1) + "\n")
    write_perf(args.out / "gpu_performance.csv", perf_rows(bench, set(MEASURED_REFERENCES)))
    write_perf(args.out / "measured_perf.csv", perf_rows(bench, None))
    print(f"wrote {args.out}: {len(profiles)} profiles, {len(names)} references "
          f"({len(MEASURED_REFERENCES)} measured), {len(measured_models)} measured models", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
