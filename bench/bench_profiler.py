"""Profiler speed: time to profile each torchvision classification model on the meta device.

    python bench/bench_profiler.py [--quick] [--json FILE]

Each model is built on PyTorch's meta device and walked layer by layer by `msched.models.profiler.profile_in_process`,
in this one process (torch imported once, before the clock starts: what a long-lived profiler or
`scripts/build_reference_profiles.py` pays per model). One cold `python -m msched.models.profiler resnet50`
subprocess is timed too: what a first-time profile at submit time costs, interpreter and torch import
included. `--quick` profiles every 8th model (sorted by name) and still prints median and max.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="every 8th model only")
    ap.add_argument("--full", action="store_true", help="every model (the default)")
    ap.add_argument("--json", type=Path, help="write the raw timings here")
    ap.add_argument("--top", type=int, default=8, help="how many of the slowest models to list")
    args = ap.parse_args(argv)
    console = Console(width=110)

    try:
        from msched.models import profiler
    except ImportError as exc:
        print(f"msched.models.profiler is not available: {exc}", file=sys.stderr)
        return 1
    t0 = time.perf_counter()
    import torch  # noqa: F401  (timed separately: one-off)
    import torchvision  # noqa: F401

    import_s = time.perf_counter() - t0
    names = profiler.torchvision_names()
    if args.quick:
        names = names[::8]

    timings: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name in names:
        start = time.perf_counter()
        try:
            prof = profiler.profile_in_process(name)
        except Exception as exc:  # a benchmark reports a failing model and goes on
            errors[name] = " ".join(str(exc).split())[:200] or type(exc).__name__
            continue
        timings[name] = time.perf_counter() - start
        if not prof.flops > 0:
            errors[name] = "profile without FLOPs"

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "msched.models.profiler", "resnet50", "--json"],
                          capture_output=True, text=True, timeout=300)
    cold_s = time.perf_counter() - start
    cold_ok = proc.returncode == 0

    if not timings:
        print("no model could be profiled: " + "; ".join(f"{k}: {v}" for k, v in list(errors.items())[:3]),
              file=sys.stderr)
        return 1
    vals = sorted(timings.values())
    table = Table(title=f"Profiler: {len(timings)} torchvision classification models on the meta device"
                        + (" (--quick: every 8th)" if args.quick else ""))
    for col in ("models", "median s", "mean s", "p90 s", "max s", "max model", "total s"):
        table.add_column(col, justify="right")
    slowest = max(timings, key=timings.get)
    table.add_row(str(len(vals)), f"{statistics.median(vals):.3f}", f"{statistics.fmean(vals):.3f}",
                  f"{vals[int(0.9 * (len(vals) - 1))]:.3f}", f"{vals[-1]:.3f}", slowest, f"{sum(vals):.1f}")
    console.print(table)

    top = Table(title=f"Slowest {min(args.top, len(vals))} models")
    top.add_column("model")
    top.add_column("seconds", justify="right")
    top.add_column("x median", justify="right")
    for name in sorted(timings, key=timings.get, reverse=True)[: args.top]:
        top.add_row(name, f"{timings[name]:.3f}", f"{timings[name] / statistics.median(vals):.1f}")
    console.print(top)
    console.print(f"one-off import of torch+torchvision in this process: {import_s:.2f} s")
    console.print(f"cold `python -m msched.models.profiler resnet50` (interpreter + torch import + profile): "
                  f"{cold_s:.2f} s = {cold_s / max(timings.get('resnet50', statistics.median(vals)), 1e-9):.0f}x "
                  f"the in-process profile{'' if cold_ok else ' (FAILED: ' + proc.stderr.strip()[-200:] + ')'}")
    if errors:
        console.print(f"[bold red]{len(errors)} model(s) failed:[/] "
                      + "; ".join(f"{k}: {v}" for k, v in errors.items()))

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"timings_s": timings, "errors": errors, "import_s": import_s,
                                         "cold_subprocess_s": cold_s, "quick": args.quick}, indent=1))
    return 0 if not errors and cold_ok else 1


if __name__ == "__main__":
    sys.exit(main())
