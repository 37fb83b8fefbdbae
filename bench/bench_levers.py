"""The begin-time lever (issue 17 point 3): makespan and mean JCT with and without it, on the bench
workloads, under Slurm's backfill (the simulator honours begin times as Slurm does: docs/backfill.md).

    python bench/bench_levers.py [--workloads philly,static,alibaba,gavel] [--seeds N] [--scale F]
                                 [--policies msched,oracle] [--planner greedy|optimize]
                                 [--objective balanced|makespan|jct] [--min-gain G] [--json FILE]

Each (workload, seed) is one trace (bench/workloads.py) replayed by `msched sim` twice, once with the
site config's `begin_time_lever = false` and once with `true` (everything else the same), so each ratio
compares the same jobs. `--planner greedy` (the default here) keeps the plans independent of this
machine's load: the optimizing planner's time box is wall-clock. Times are simulated hours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as wl  # noqa: E402

JOBS = {"philly": 120, "static": 200, "alibaba": 300, "gavel": 80}     # bench_quality's --quick sizes


def run_sim(w, trace: Path, policies: str, config: Path, out: Path, timeout: float) -> list[dict]:
    argv = [sys.executable, "-m", "msched.cli", "sim", *w.sim_args(trace), "--policy", policies, "--json", str(out)]
    env = {**os.environ, "MSCHED_CONFIG": str(config)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"msched sim failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(JOBS), help="comma-separated subset of " + ",".join(JOBS))
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every trace's job count")
    ap.add_argument("--policies", default="msched,oracle", help="policies msched sim runs (each with and without)")
    ap.add_argument("--planner", choices=("greedy", "optimize"), default="greedy", help="the round's planner")
    ap.add_argument("--objective", choices=("balanced", "makespan", "jct"), default="balanced",
                    help="the round's objective (config objective)")
    ap.add_argument("--min-gain", type=float, default=1.0, help="config begin_time_min_gain for the lever's runs")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per sim call")
    ap.add_argument("--json", type=Path, help="write every run here")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    bad = [n for n in names if n not in JOBS]
    if bad:
        ap.error(f"--workloads: unknown {', '.join(bad)}; choose from {', '.join(JOBS)}")
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        configs = {}
        for lever in (False, True):
            configs[lever] = work / f"lever-{lever}.toml"
            configs[lever].write_text(f'planner = "{args.planner}"\nobjective = "{args.objective}"\n'
                                      f'begin_time_lever = {str(lever).lower()}\nbegin_time_min_gain = {args.min_gain}\n')
        for name in names:
            for seed in range(1, args.seeds + 1):
                try:
                    w = wl.build(name, max(1, round(JOBS[name] * args.scale)), seed)
                except wl.WorkloadError as exc:
                    print(f"{name}: {exc}", file=sys.stderr)
                    return 1
                trace = w.write_trace(work / f"{name}-{seed}.csv")
                got = {lever: run_sim(w, trace, args.policies, configs[lever], work / f"{name}-{seed}-{lever}.json",
                                      args.timeout) for lever in (False, True)}
                for off, on in zip(got[False], got[True], strict=True):
                    row = {"workload": name, "seed": seed, "policy": on["policy"], "jobs": on["submitted"],
                           "makespan_off_h": off["makespan_s"] / 3600, "makespan_on_h": on["makespan_s"] / 3600,
                           "jct_off_h": off["mean_jct_s"] / 3600, "jct_on_h": on["mean_jct_s"] / 3600,
                           "writes_off": off["update_calls"], "writes_on": on["update_calls"],
                           "begin_time_writes": on["begin_time_writes"]}
                    runs.append(row)
                    print(f"{name:8s} seed {seed} {row['policy']:7s} makespan {row['makespan_off_h']:7.2f} -> "
                          f"{row['makespan_on_h']:7.2f} h  mean JCT {row['jct_off_h']:6.2f} -> {row['jct_on_h']:6.2f} h  "
                          f"begin-time writes {row['begin_time_writes']} ({row['begin_time_writes'] / row['jobs']:.2f}/job)",
                          flush=True)
    print("\nwith / without the lever, mean over seeds (min-max):")
    print(f"{'workload':8s} {'policy':7s} {'makespan':>20s} {'mean JCT':>20s} {'begin writes/job':>17s}")
    for name in names:
        for pol in dict.fromkeys(r["policy"] for r in runs):
            rs = [r for r in runs if r["workload"] == name and r["policy"] == pol]
            if not rs:
                continue
            mk = [r["makespan_on_h"] / r["makespan_off_h"] for r in rs]
            jc = [r["jct_on_h"] / r["jct_off_h"] for r in rs]
            bw = statistics.mean(r["begin_time_writes"] / r["jobs"] for r in rs)
            print(f"{name:8s} {pol:7s} {statistics.mean(mk):8.3f} ({min(mk):.3f}-{max(mk):.3f}) "
                  f"{statistics.mean(jc):8.3f} ({min(jc):.3f}-{max(jc):.3f}) {bw:17.2f}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
