"""The guard's quantile chosen by leave-one-job-type-out (issue 18, pack9): for each candidate alpha, every
job type is held out in turn (every pair holding it left out of the fit, the mean forests and the quantile
regressor alike), and the pairs holding it are judged by the default guard (mean combined >= 1.0, both
jobs inside SEEN_RADIUS of the fit's data, each job's alpha-quantile own speed >= 0.5x). Printed per alpha:
pairs passed, of them with a job measured below 0.5x solo, the slowest such job, the good pairs passed
(measured combined > 1.2, each >= 0.5x); then in-sample (fit on every pair) the same per GPU type.

    python bench/guard_alpha.py [--alphas 0.1,0.2,0.3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as wl  # noqa: E402

import msched.estimate.interference as itf  # noqa: E402


def judge(model, jobs, test, alpha_models) -> dict:  # noqa: ANN001
    """Per alpha: (passed, below 0.5x, slowest, good passed, good total) over `test`'s pairs."""
    out = {}
    for alpha, bound in alpha_models.items():
        m = model._replace(bound_own=bound)
        passed = bad = good_passed = good = 0
        slowest = None
        for p in test:
            a, b = jobs[p.a], jobs[p.b]
            measured = min(p.own_a, p.own_b)
            is_good = p.combined > 1.2 and measured >= itf.MIN_OWN_SPEED
            good += is_good
            if m.combined_throughput(a, b, p.gpu_type) < 1.0 or m.guard_slower(a, b, p.gpu_type) < itf.MIN_OWN_SPEED:
                continue
            passed += 1
            good_passed += is_good
            bad += measured < itf.MIN_OWN_SPEED
            slowest = measured if slowest is None else min(slowest, measured)
        out[alpha] = [passed, bad, slowest, good_passed, good]
    return out


def add(total: dict, part: dict) -> None:
    for alpha, (passed, bad, slowest, gp, g) in part.items():
        t = total.setdefault(alpha, [0, 0, None, 0, 0])
        t[0] += passed
        t[1] += bad
        t[2] = slowest if t[2] is None else t[2] if slowest is None else min(t[2], slowest)
        t[3] += gp
        t[4] += g


def quantiles(jobs, pairs, alphas):  # noqa: ANN001, ANN201
    ordered = [(jobs[p.a].features(p.gpu_type) + jobs[p.b].features(p.gpu_type), p.own_a) for p in pairs] + \
              [(jobs[p.b].features(p.gpu_type) + jobs[p.a].features(p.gpu_type), p.own_b) for p in pairs]
    x, y = [r for r, _ in ordered], [v for _, v in ordered]
    return {alpha: itf.fit_quantile(x, y, alpha=alpha) for alpha in alphas}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alphas", default="0.1,0.2,0.3")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    alphas = [float(a) for a in args.alphas.split(",")]
    jobs, pairs = itf.read_gavel(wl.shared_data_dir() / "gavel" / "simulation_throughputs.json")
    held = {}
    for t in sorted({t for p in pairs for t in (p.a, p.b)}):
        train = [p for p in pairs if t not in (p.a, p.b)]
        test = [p for p in pairs if t in (p.a, p.b)]
        model = itf.fit(jobs, train)
        add(held, judge(model, jobs, test, quantiles(jobs, train, alphas)))
        print(f"held out {t}: {held}", file=sys.stderr, flush=True)
    print("held out by job type (a pair is judged once per held-out job type it holds):")
    for alpha, (passed, bad, slowest, gp, g) in held.items():
        print(f"  alpha {alpha:g}: passed {passed}, with a job below 0.5x {bad}"
              f" ({bad / passed if passed else 0:.1%}), slowest {slowest if slowest is None else round(slowest, 3)},"
              f" good pairs passed {gp} of {g}")
    model = itf.fit(jobs, pairs)
    bounds = quantiles(jobs, pairs, alphas)
    inside = {}
    for g in ("k80", "p100", "v100"):
        inside[g] = judge(model, jobs, [p for p in pairs if p.gpu_type == g], bounds)
        for alpha, (passed, bad, slowest, gp, gt) in inside[g].items():
            print(f"in-sample {g} alpha {alpha:g}: passed {passed}, below 0.5x {bad}, slowest "
                  f"{slowest if slowest is None else round(slowest, 3)}, good passed {gp} of {gt}")
    if args.json:
        args.json.write_text(json.dumps({"held_out": held, "in_sample": inside}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
