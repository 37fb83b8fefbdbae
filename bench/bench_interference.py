"""Packing's interference predictor, judged leave-one-job-type-out on Gavel's pair measurements.

    python bench/bench_interference.py [--gavel PATH] [--json FILE]

Two hold-outs (msched.estimate.interference.leave_one_out): the issue's, leave-one-job-type-out (each
of Gavel's 26 single-GPU job types, a model at one batch size: every pair holding it is removed from the
fit and predicted by a model fitted on the rest), and a stricter one, leave-one-family-out (each of the
seven models, ResNet-18, ResNet-50, Transformer, LM, Recommendation, A3C, CycleGAN, with all its batch
sizes at once: a model msched never saw measured). Printed for each: mean absolute error of the pair's
combined normalized throughput per held-out group and over all pairs, against a model-blind baseline
(the training pairs' mean), and how often a pair predicted above a threshold measured below 0.8 (a bad
packing); for the family hold-out also the slower job's own-speed forest. For both hold-outs, what each
packing guard passes (`pack_guard`: the mean forest's slower job >= 0.5x, or the quantile guard's
bound >= 0.5x with both jobs inside the data; predicted combined >= 1.0 for both): how many held-out
pairs, how many of them with a job measured below 0.5x solo, and the slowest measured job among them.
Source: github.com/stanford-futuredata/gavel `scheduler/simulation_throughputs.json` (MIT).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from msched.estimate.interference import family_of, job_type_of, leave_one_out, read_gavel

ROOT = Path(__file__).resolve().parent.parent


def _hold_out(console: Console, jobs: dict, pairs: list, key, what: str) -> tuple[dict, list]:  # noqa: ANN001
    """One hold-out's table and figures: MAE per held-out group and over all pairs, a model-blind
    baseline, and the bad packings (predicted above a threshold, measured below 0.8)."""
    results = leave_one_out(jobs, pairs, key)
    table = Table(title=f"Interference predictor, leave-one-{what.replace(' ', '-')}-out (Gavel, K80/P100/V100)")
    for col in (f"held-out {what}", "pairs", "MAE", "baseline MAE"):
        table.add_column(col, justify="right")
    out: dict = {"held_out": {}}
    all_pred, all_meas, all_base = [], [], []
    for r in results:
        train_mean = statistics.fmean(p.combined for p in pairs if r.held_out not in (key(p.a), key(p.b)))
        base = statistics.fmean(abs(m - train_mean) for m in r.measured)
        table.add_row(r.held_out, str(r.pairs), f"{r.mean_abs_error:.3f}", f"{base:.3f}")
        out["held_out"][r.held_out] = {"pairs": r.pairs, "mae": r.mean_abs_error, "baseline_mae": base}
        all_pred += r.predicted
        all_meas += r.measured
        all_base += [abs(m - train_mean) for m in r.measured]
    mae = statistics.fmean(abs(p - m) for p, m in zip(all_pred, all_meas, strict=True))
    table.add_row("all", str(len(all_meas)), f"{mae:.3f}", f"{statistics.fmean(all_base):.3f}")
    out.update(mae=mae, baseline_mae=statistics.fmean(all_base), bad_packings={})
    console.print(table)
    out["guards"] = _guards(console, results, what)
    for threshold in (1.0, 1.1, 1.2):
        chosen = [m for p, m in zip(all_pred, all_meas, strict=True) if p > threshold]
        bad = sum(m < 0.8 for m in chosen)
        share = bad / len(chosen) if chosen else 0.0
        out["bad_packings"][str(threshold)] = {"packed": len(chosen), "measured_below_0.8": bad, "share": share}
        console.print(f"by {what}: predicted > {threshold}: {len(chosen)} pairs, {bad} measured below 0.8 ({share:.1%})")
    return out, results


def _guards(console: Console, results: list, what: str) -> dict:
    """What each packing guard passes among the held-out pairs (predicted combined >= 1.0 and the slower
    job >= 0.5x solo by the guard), and how those pairs measured."""
    rows = [(p, sp, sb, sm) for r in results for p, sp, sb, sm in
            zip(r.predicted, r.slower_predicted, r.slower_bound or [0.0] * r.pairs, r.slower_measured, strict=True)]
    out = {}
    for guard, idx in (("mean", 1), ("bound", 2)):
        passed = [row[3] for row in rows if row[0] >= 1.0 and (row[idx] or 0.0) >= 0.5]
        crawl = sum(m < 0.5 for m in passed)
        out[guard] = {"held_out_pairs": len(rows), "passed": len(passed), "a_job_below_0.5": crawl,
                      "slowest_job": min(passed, default=None)}
        slowest = f"{min(passed):.2f}x" if passed else "-"
        console.print(f"by {what}, guard {guard}: {len(passed)} of {len(rows)} held-out pairs passed, {crawl} with a "
                      f"job measured below 0.5x solo, slowest job {slowest}")
    out["bound"]["outside_data"] = sum(row[2] == 0.0 for row in rows)
    console.print(f"by {what}: {out['bound']['outside_data']} held-out pairs with a job outside the data "
                  f"(farther than SEEN_RADIUS from every job type of the fit)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gavel", type=Path, default=ROOT.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    if not args.gavel.exists():
        print(f"Gavel's throughputs not found at {args.gavel} (give --gavel)", file=sys.stderr)
        return 1
    jobs, pairs = read_gavel(args.gavel)
    console = Console(width=110)
    out = {"pairs": len(pairs), "job_types": len(jobs)}
    out["by_job_type"], _ = _hold_out(console, jobs, pairs, job_type_of, "job type")
    out["by_family"], results = _hold_out(console, jobs, pairs, family_of, "family")
    out.update(mae=out["by_family"]["mae"], bad_packings=out["by_family"]["bad_packings"])  # the stricter one
    all_pred = [x for r in results for x in r.predicted]
    all_meas = [x for r in results for x in r.measured]
    # the second forest: the slower job's own speed; a pair is packed only when it is predicted >= 0.5 too
    slow_pred = [x for r in results for x in r.slower_predicted]
    slow_meas = [x for r in results for x in r.slower_measured]
    slow_mae = statistics.fmean(abs(p - m) for p, m in zip(slow_pred, slow_meas, strict=True))
    console.print(f"slower job's own speed: MAE {slow_mae:.3f}")
    out["slower_speed_mae"] = slow_mae
    for threshold in (1.0, 1.1):
        chosen = [(m, sm) for p, m, sp, sm in zip(all_pred, all_meas, slow_pred, slow_meas, strict=True)
                  if p > threshold and sp >= 0.5]
        bad = sum(m < 0.8 for m, _ in chosen)
        crawl = sum(sm < 0.5 for _, sm in chosen)
        share = bad / len(chosen) if chosen else 0.0
        out["bad_packings"][f"{threshold}+slower>=0.5"] = {"packed": len(chosen), "measured_below_0.8": bad,
                                                           "share": share, "a_job_below_0.5": crawl}
        console.print(f"predicted > {threshold} and slower job >= 0.5: {len(chosen)} pairs, {bad} measured "
                      f"below 0.8 ({share:.1%}), {crawl} with a job measured below 0.5x solo")
    # a calibrated margin on the slower job's speed: does asking for more than 0.5 keep crawling jobs out?
    out["own_speed_margin"] = {}
    for margin in (0.0, 0.1, 0.2):
        kept = [sm for p, sp, sm in zip(all_pred, slow_pred, slow_meas, strict=True) if p > 1.0 and sp >= 0.5 + margin]
        crawl = sum(sm < 0.5 for sm in kept) / len(kept) if kept else 0.0
        out["own_speed_margin"][str(margin)] = {"packed": len(kept), "a_job_below_0.5_share": crawl}
        console.print(f"slower job predicted >= {0.5 + margin:.1f}: {len(kept)} pairs, {crawl:.1%} with a job "
                      f"measured below 0.5x solo")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
