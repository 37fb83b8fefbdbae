"""Scheduling quality: fifo, fastest, msched-once, msched and oracle on the four workloads of issue 8,
under Slurm's default scheduler (sched/backfill, `msched sim`'s default), jobs with users' time limits.

    python bench/bench_quality.py [--quick|--full] [--workloads philly,static,alibaba,gavel]
                                  [--seeds N] [--jobs N] [--round 60] [--json FILE]

Each (workload, seed) is one trace (bench/workloads.py) replayed by `msched sim` under all five policies
in one call, so every ratio compares policies on the same jobs in the same run. Per workload the table
gives the mean over seeds (and the spread, as +- one standard deviation) of makespan, mean and p99 JCT,
mean wait and GPU utilisation and the makespan over the LP lower bound (`msched.policy.bound`), then the
ratios msched/fifo, msched/oracle and msched/msched-once computed per seed and averaged. Every run is
checked: every policy finishes every submitted job, and no makespan is below the lower bound; a run that
fails either check is reported as FAILED. Times are simulated hours: they do not depend on this machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as wl  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from msched.policy import POLICY_NAMES  # noqa: E402

POLICIES = POLICY_NAMES
METRICS = (("makespan_s", "makespan h", 3600.0), ("mean_jct_s", "mean JCT h", 3600.0),
           ("p99_jct_s", "p99 JCT h", 3600.0), ("mean_wait_s", "mean wait h", 3600.0),
           ("gpu_utilization", "util %", 0.01), ("ratio_to_lower_bound", "x LP bound", 1.0))
RATIOS = (("msched", "fifo"), ("msched", "oracle"), ("msched", "msched-once"), ("oracle", "fifo"))
# jobs per trace: the static batch is several times its longest job; the online traces' arrival windows
# span hours on their clusters (the 256-GPU Alibaba cluster needs more jobs for the same load to build up)
SIZES = {"quick": {"seeds": 3, "jobs": {"philly": 120, "static": 200, "alibaba": 300, "gavel": 80}},
         "full": {"seeds": 5, "jobs": {"philly": 600, "static": 600, "alibaba": 1500, "gavel": 300}}}


@dataclass(frozen=True)
class Case:
    workload: str
    seed: int
    jobs: int


def sim_command() -> list[str]:
    return [sys.executable, "-m", "msched.cli", "sim"]


def run_case(case: Case, workdir: Path, round_s: float, timeout: float, extra: list[str]) -> dict:
    """Build the trace, run `msched sim` with every policy, return {'case', 'results'|'error', 'seconds'}."""
    start = time.perf_counter()
    try:
        w = wl.build(case.workload, case.jobs, case.seed)
    except wl.WorkloadError as exc:
        return {"case": case.__dict__, "error": f"workload: {exc}", "seconds": 0.0}
    trace = w.write_trace(workdir / f"{case.workload}-s{case.seed}.csv")
    out = workdir / f"{case.workload}-s{case.seed}.json"
    sim_args = [*w.sim_args(trace), "--policy", ",".join(POLICIES), "--round", f"{round_s:g}", "--json", str(out),
                *extra]
    argv = [*sim_command(), *sim_args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case.__dict__, "error": f"msched sim ran over {timeout:g} s", "seconds": timeout,
                "argv": argv}
    seconds = time.perf_counter() - start
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    if not out.exists():
        return {"case": case.__dict__, "error": f"msched sim exit {proc.returncode}: {lines[-1] if lines else ''}",
                "seconds": seconds, "argv": argv}
    try:
        results = json.loads(out.read_text())
    except ValueError as exc:
        return {"case": case.__dict__, "error": f"unreadable sim JSON: {exc}", "seconds": seconds}
    if isinstance(results, dict):   # tolerate {"results": [...]} as well as DESIGN's list
        results = results.get("results", results.get("policies", []))
    run = {"case": case.__dict__, "results": {r["policy"]: r for r in results}, "seconds": seconds,
           "describe": wl.describe(w), "argv": argv}
    problems = check_results(results)
    if proc.returncode != 0:
        problems.insert(0, f"msched sim exit {proc.returncode}: {lines[-1] if lines else ''}")
    if problems:
        run["error"] = "; ".join(problems)
    return run


def check_results(results: list[dict]) -> list[str]:
    """What must hold in every run: every submitted job finished, no makespan below the lower bound."""
    out = []
    for r in results:
        if r.get("submitted") is None or r.get("finished") != r.get("submitted"):
            out.append(f"{r['policy']}: {r.get('finished')}/{r.get('submitted')} jobs finished")
        mk, lb = r.get("makespan_s"), r.get("lower_bound_s")
        if mk is not None and lb and mk < lb * (1 - 1e-6):
            out.append(f"{r['policy']}: makespan {mk:.0f} s below the lower bound {lb:.0f} s")
    return out


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def _fmt(mean: float, sd: float, digits: int = 2) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ±{sd:.{digits}f}" if sd else f"{mean:.{digits}f}"


def summarise(runs: list[dict]) -> dict:
    """{workload: {policy: {metric: (mean, sd)}, 'ratios': {(a,b): {metric: (mean, sd)}}, 'seeds': n}}."""
    out: dict = {}
    by_workload: dict[str, list[dict]] = {}
    for r in runs:
        if "results" in r:
            by_workload.setdefault(r["case"]["workload"], []).append(r["results"])
    for name, seeds in by_workload.items():  # runs that failed a check are kept: their numbers are shown
        entry: dict = {"seeds": len(seeds), "policies": {}, "ratios": {},
                       "lower_bound_s": _mean_sd([next(iter(s.values())).get("lower_bound_s") for s in seeds if s]),
                       "submitted": sum(r.get("submitted") or 0 for s in seeds for r in s.values()),
                       "finished": sum(r.get("finished") or 0 for s in seeds for r in s.values()),
                       "below_bound": sum(1 for s in seeds for r in s.values()
                                          if r.get("makespan_s") is not None and r.get("lower_bound_s")
                                          and r["makespan_s"] < r["lower_bound_s"] * (1 - 1e-6))}
        for pol in POLICIES:
            rows = [s[pol] for s in seeds if pol in s]
            if rows:
                entry["policies"][pol] = {m: _mean_sd([row.get(m) for row in rows]) for m, _, _ in METRICS}
        for a, b in RATIOS:
            pairs = [(s[a], s[b]) for s in seeds if a in s and b in s]
            if pairs:
                entry["ratios"][f"{a}/{b}"] = {
                    m: _mean_sd([x[m] / y[m] for x, y in pairs if x.get(m) and y.get(m)])
                    for m in ("makespan_s", "mean_jct_s", "p99_jct_s")}
        out[name] = entry
    return out


def print_tables(summary: dict, runs: list[dict], console: Console) -> None:
    for name in wl.WORKLOADS:
        if name not in summary:
            continue
        entry = summary[name]
        desc = next((r["describe"] for r in runs if r["case"]["workload"] == name and "describe" in r), {})
        lb = entry["lower_bound_s"]
        title = (f"{name}: {wl.DESCRIPTIONS[name]}\n{desc.get('jobs', '?')} jobs, {desc.get('gpus', '?')} GPUs, "
                 f"{entry['seeds']} seed(s); mean ±sd over seeds; sched/backfill; LP lower bound "
                 f"{_fmt(lb[0] / 3600, lb[1] / 3600)} h; {entry['finished']}/{entry['submitted']} jobs finished "
                 f"(all policies and seeds), {entry['below_bound']} makespan(s) below the bound")
        t = Table(title=title, title_justify="left")
        t.add_column("policy")
        for _, label, _ in METRICS:
            t.add_column(label, justify="right")
        t.add_column("makespan / fifo", justify="right")
        fifo_mk = entry["policies"].get("fifo", {}).get("makespan_s", (float("nan"),))[0]
        for pol in POLICIES:
            stats = entry["policies"].get(pol)
            if not stats:
                t.add_row(pol, *["-"] * (len(METRICS) + 1))
                continue
            cells = []
            for m, _, unit in METRICS:
                mean, sd = stats[m]
                cells.append(_fmt(mean / unit, sd / unit, 1 if unit < 1 else 2))
            mk = stats["makespan_s"][0]
            cells.append(f"{mk / fifo_mk:.3f}" if fifo_mk and not math.isnan(fifo_mk) else "-")
            t.add_row(pol, *cells)
        console.print(t)
        r = Table(title=f"{name}: ratios per seed, then mean ±sd (below 1 = the first policy is better)",
                  title_justify="left")
        r.add_column("ratio")
        for label in ("makespan", "mean JCT", "p99 JCT"):
            r.add_column(label, justify="right")
        for key, stats in entry["ratios"].items():
            r.add_row(key, *[_fmt(*stats[m], 3) for m in ("makespan_s", "mean_jct_s", "p99_jct_s")])
        console.print(r)
        console.print()


def estimate_accuracy(console: Console) -> dict | None:
    """How well msched's similarity estimates rank the GPU types for the job models of (a)-(c).

    For each non-reference model of the shared table: its classification, the type msched's estimate
    (nearest measured reference's iteration time x FLOPs ratio, 1 GPU, batch 12) calls fastest, the
    truly fastest type, and the regret = true time on msched's pick / true time on the best type (among the
    types both know). This is the "why" behind msched/oracle: the planner is the same, only these
    estimates differ.
    """
    try:
        from msched.config import load_config
        from msched.estimate.perf_table import PerfTable
        from msched.estimate.runtime import iteration_seconds, reference_for
        from msched.models.classify import classify
        from msched.policy.choice import reference_fields
        from msched.tag import JobTag
    except ImportError as exc:
        console.print(f"(estimate accuracy not measured: {exc})")
        return None
    truth = PerfTable.load(wl.shared_perf_path())
    knowledge = PerfTable.load(load_config().performance)
    rows = []
    for model in wl.non_reference_models(truth, wl.default_references()):
        try:
            c = classify(model)
        except Exception as exc:  # report and go on: one model must not hide the others
            rows.append({"model": model, "error": str(exc)[:120]})
            continue
        ref, ratio = reference_for(JobTag(model=model, **reference_fields(c)), knowledge.has_model)
        est = iteration_seconds(knowledge, ref, 1, wl.SHARED_BATCH, ratio)
        true = {t: ms / 1000.0 for t in truth.types_for(model)
                if (ms := truth.iter_ms(model, t, 1, wl.SHARED_BATCH)) is not None}
        common = sorted(set(est) & set(true))
        if not common:
            rows.append({"model": model, "error": "no GPU type known to both"})
            continue
        pick = min(common, key=est.get)
        best = min(common, key=true.get)
        signed = sorted(math.log2(est[t] / true[t]) for t in common)
        errs = sorted(abs(e) for e in signed)
        pairs = [(a, b) for i, a in enumerate(common) for b in common[i + 1:]]
        concordant = sum((est[a] - est[b]) * (true[a] - true[b]) > 0 for a, b in pairs)
        tau = (2 * concordant - len(pairs)) / len(pairs) if pairs else 1.0
        rows.append({"model": model, "ref": ref, "sim": c.similarity, "flops_ratio": ratio, "pick": pick,
                     "best": best, "regret": true[pick] / true[best], "median_abs_log2_err": errs[len(errs) // 2],
                     "median_log2_err": signed[len(signed) // 2], "kendall_tau": tau})
    ok = [r for r in rows if "error" not in r]
    t = Table(title="msched's runtime estimates for the job models of (a)-(c), 1 GPU, batch 12. pick: the type "
                    "msched thinks fastest; best: truly fastest; regret: true time on pick / on best; tau: Kendall "
                    "tau of the type order (1 = all pairs right); est/true: median estimate over truth across types",
              title_justify="left")
    for col in ("model", "reference", "sim", "FLOPs x", "pick", "best", "regret", "tau", "est/true"):
        t.add_column(col, justify="left" if col in ("model", "reference", "pick", "best") else "right")
    for r in rows:
        if "error" in r:
            t.add_row(r["model"], "-", "-", "-", "-", "-", "-", "-", r["error"])
            continue
        t.add_row(r["model"], r["ref"], f"{r['sim']:.2f}", f"{r['flops_ratio']:.2f}", r["pick"], r["best"],
                  f"{r['regret']:.2f}", f"{r['kendall_tau']:.2f}", f"{2 ** r['median_log2_err']:.2f}")
    console.print(t)
    if ok:
        hits = sum(r["pick"] == r["best"] for r in ok)
        console.print(f"fastest type right for {hits}/{len(ok)} models; mean regret "
                      f"{statistics.fmean(r['regret'] for r in ok):.3f}x, worst {max(r['regret'] for r in ok):.2f}x; "
                      f"mean Kendall tau of the type order {statistics.fmean(r['kendall_tau'] for r in ok):.2f} "
                      "(1 = every pair of types ordered right); "
                      f"absolute estimates off by a median factor "
                      f"{2 ** statistics.median(r['median_abs_log2_err'] for r in ok):.2f} (worst model "
                      f"{2 ** max(r['median_abs_log2_err'] for r in ok):.2f})", soft_wrap=True)
    console.print()
    return {"models": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help=f"{SIZES['quick']}")
    mode.add_argument("--full", action="store_true", help=f"{SIZES['full']} (default)")
    ap.add_argument("--workloads", default=",".join(wl.WORKLOADS), help="comma-separated subset")
    ap.add_argument("--seeds", type=int, help="number of seeds (1..N)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every trace's job count")
    ap.add_argument("--round", type=float, default=60.0, help="seconds between msched rounds")
    ap.add_argument("--parallel", type=int, default=min(2, os.cpu_count() or 1), help="sims at once")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per sim call")
    ap.add_argument("--workdir", type=Path, help="keep traces and sim JSON here (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="write every run and the summary here")
    ap.add_argument("--sim-arg", action="append", default=[], help="extra argument for msched sim (repeatable)")
    args = ap.parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    n_seeds = args.seeds or size["seeds"]
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in names if n not in wl.WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(wl.WORKLOADS)}")
    console = Console(width=130)
    probe = subprocess.run([*sim_command(), "--help"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        lines = (probe.stderr or probe.stdout).strip().splitlines()
        print(f"`msched sim` is not available: {lines[-1] if lines else 'exit ' + str(probe.returncode)}",
              file=sys.stderr)
        return 1

    cases = []
    for name in names:
        for seed in range(1, n_seeds + 1):
            cases.append(Case(name, seed, max(10, round(size["jobs"][name] * args.scale))))
    tmp = None
    workdir = args.workdir
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="msched-bench-quality-")
        workdir = Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = list(pool.map(lambda c: run_case(c, workdir, args.round, args.timeout, args.sim_arg), cases))
    wall = time.perf_counter() - start

    summary = summarise(runs)
    print_tables(summary, runs, console)
    accuracy = None
    if set(names) & {"philly", "static", "alibaba"}:
        accuracy = estimate_accuracy(console)
    failed = [r for r in runs if "error" in r]
    for r in failed:
        console.print(f"[bold red]FAILED[/] {r['case']['workload']} seed {r['case']['seed']}: {r['error']}",
                      soft_wrap=True)
    sim_s = sum(r["seconds"] for r in runs)
    console.print(f"{len(runs) - len(failed)}/{len(runs)} simulations ok; {sim_s:.0f} s of sim time, "
                  f"{wall:.0f} s wall ({args.parallel} at once); round {args.round:g} s; "
                  f"command: {' '.join(sim_command()[1:])} ... --policy {','.join(POLICIES)}", soft_wrap=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "summary": summary, "wall_s": wall, "accuracy": accuracy,
                                         "round_s": args.round, "seeds": n_seeds,
                                         "jobs": {n: round(size["jobs"][n] * args.scale) for n in names}},
                                        indent=1, default=str))
    if tmp is not None:
        tmp.cleanup()
    return 0 if runs and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
