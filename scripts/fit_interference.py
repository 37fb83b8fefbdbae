#!/usr/bin/env python3
"""Fit the packing interference model on Gavel's pair measurements and write it as package data.

    python scripts/fit_interference.py [--gavel ../shared/data/gavel/simulation_throughputs.json]
                                       [--out msched/data/interference_model.json]

Source: github.com/stanford-futuredata/gavel `scheduler/simulation_throughputs.json` (MIT), as collected in
../shared/data/gavel/. Needs scikit-learn; the written JSON is read in pure Python (msched.estimate.interference).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from msched.estimate.interference import MODEL_FILE, fit, read_gavel

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shared = Path(os.environ.get("MSCHED_SHARED_DATA") or ROOT.parent / "shared" / "data")   # as bench/workloads.py
    ap.add_argument("--gavel", type=Path, default=shared / "gavel" / "simulation_throughputs.json")
    ap.add_argument("--out", type=Path, default=Path(MODEL_FILE))
    args = ap.parse_args(argv)
    jobs, pairs = read_gavel(args.gavel)
    model = fit(jobs, pairs)
    args.out.write_text(model.to_json() + "\n")
    print(f"wrote {args.out}: {len(model.trees)} trees from {len(pairs)} pairs of {len(jobs)} job types",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
