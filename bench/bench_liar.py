"""What lying about a job's size buys (issue 13, point 4: "Report, not gate").

A job's tag is its owner's claim: msub writes the iterations the user gives, and nothing checks them
against the truth before the job runs. This benchmark replays one online workload in the simulator
(Poisson arrivals at a given offered load, Philly-shaped sizes and durations, users' time limits,
`msched sim`'s cluster and tables) with a few users who each submit a few hundred jobs, three times per
objective:
- everyone honest (tags state the true iterations);
- one user (the liar) inflating every claim 10x;
- the same user deflating every claim 10x;
and reports, against the honest run, the liar's change in mean JCT (their gain) and the other users'
change (their loss). Only the claims differ: the same jobs, the same true work, the same seed.

Slurm bounds a claim only by the time limit (rounds.core.bounded_claim: a job is never planned longer
than its limit), so the figures show what lying still buys inside that bound.

    .venv/bin/python bench/bench_liar.py [--jobs 1200] [--users 4] [--factor 10] [--load 0.9]
                                         [--objective jct,makespan] [--policy msched] [--seeds 1,2,3,4,5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sim import knowledge, online_trace  # noqa: E402

from msched.estimate.perf_table import PerfTable  # noqa: E402
from slurm_sim.cluster import parse_cluster  # noqa: E402
from slurm_sim.commands import default_truth_path  # noqa: E402
from slurm_sim.compare import Classifier, SimSetup, replay  # noqa: E402
from slurm_sim.trace import TraceJob  # noqa: E402

# 64 GPUs of the shared table's four most measured types: small enough that jobs queue at 90% load
CLUSTER = "a100:8x2,titanv:8x2,rtx2080ti:8x2,titanxp:8x2"
LIAR = "u01"


def mean_jct_by_user(trace: Sequence[TraceJob], outcomes) -> dict[str, float]:  # noqa: ANN001
    """Mean (end - submit) per user over the jobs that finished."""
    user_of = {j.job_id: j.user for j in trace}
    by_user: dict[str, list[float]] = {}
    for o in outcomes:
        if o.end is not None:
            by_user.setdefault(user_of[o.job_id], []).append(o.end - o.submit)
    return {u: statistics.fmean(v) for u, v in by_user.items()}


def honest_mean(jcts: Mapping[str, float], counts: Mapping[str, int], liar: str) -> float:
    """The other users' mean JCT, each job weighted equally."""
    others = [u for u in jcts if u != liar]
    return sum(jcts[u] * counts[u] for u in others) / sum(counts[u] for u in others)


def one_seed(args: argparse.Namespace, seed: int, truth: PerfTable, cluster, perf, refs) -> list[tuple]:  # noqa: ANN001
    """[(objective, lie, liar's gain, honest users' loss)] for one seed's trace, printed as it goes."""
    trace, gap = online_trace(args.jobs, truth, cluster, seed, args.load)
    # a few users with a few hundred jobs each: reassign the synthetic users round-robin by arrival
    trace = [replace(j, user=f"u{k % args.users + 1:02d}")
             for k, j in enumerate(sorted(trace, key=lambda j: j.submit_time))]
    counts: dict[str, int] = {}
    for j in trace:
        counts[j.user] = counts.get(j.user, 0) + 1
    print(f"\nseed {seed}: {len(trace)} jobs from {args.users} users ({min(counts.values())}-{max(counts.values())} "
          f"each), mean gap {gap:.1f} s")
    rows = []
    for objective in args.objective.split(","):
        base = SimSetup(cluster, truth, perf, Classifier(refs, perf), round_s=60.0, objective=objective)
        results = {}
        for label, factor in (("honest", 1.0), ("inflate", args.factor), ("deflate", 1.0 / args.factor)):
            setup = replace(base, claim_factors={} if factor == 1.0 else {LIAR: factor})
            res = replay(trace, args.policy, setup)
            results[label] = (mean_jct_by_user(trace, res.outcomes), res.metrics)
        h_jcts, h_metrics = results["honest"]
        h_liar, h_others = h_jcts[LIAR], honest_mean(h_jcts, counts, LIAR)
        line = [f"  {objective:9s} honest: liar {h_liar / 3600:.2f} h, others {h_others / 3600:.2f} h"]
        for label in ("inflate", "deflate"):
            jcts, metrics = results[label]
            liar, others = jcts[LIAR], honest_mean(jcts, counts, LIAR)
            gain, loss = (h_liar - liar) / h_liar, (others - h_others) / h_others
            rows.append((objective, label, gain, loss))
            line.append(f"{label}: liar {liar / 3600:.2f} h ({gain:+.1%}), others {others / 3600:.2f} h "
                        f"({loss:+.1%}), unfinished {metrics.get('unfinished', 0)}")
        print(" | ".join(line))
    return rows


def run(args: argparse.Namespace) -> int:
    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster(args.cluster)
    perf, refs = knowledge(truth)
    seeds = [int(s) for s in str(args.seeds).split(",")]
    print(f"{args.jobs} jobs per trace, {args.users} users, {cluster.total_gpus} GPUs ({args.cluster}), Poisson "
          f"arrivals at offered load {args.load:.0%}, users' time limits, policy {args.policy}, seeds {seeds}")
    print(f"liar: {LIAR}; claims x{args.factor:g} (inflate) and x{1 / args.factor:g} (deflate), against everyone honest")
    t0 = time.perf_counter()
    rows = [r for seed in seeds for r in one_seed(args, seed, truth, cluster, perf, refs)]
    print(f"\nsummary over {len(seeds)} seeds (gain: cut in the liar's mean JCT; loss: rise in the honest users' "
          f"mean JCT; negative = the opposite) [{time.perf_counter() - t0:.0f} s]")
    for objective in args.objective.split(","):
        for label in ("inflate", "deflate"):
            mine = [(g, v) for o, lab, g, v in rows if o == objective and lab == label]
            gains, losses = [g for g, _ in mine], [v for _, v in mine]
            print(f"  {objective:9s} {label:8s} gain mean {statistics.fmean(gains):+.1%} "
                  f"(range {min(gains):+.1%} .. {max(gains):+.1%})  loss mean {statistics.fmean(losses):+.1%} "
                  f"(range {min(losses):+.1%} .. {max(losses):+.1%})")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1200, help="jobs in the trace (default 1200)")
    ap.add_argument("--users", type=int, default=4, help="users, jobs dealt round-robin (default 4)")
    ap.add_argument("--factor", type=float, default=10.0, help="how much the liar misstates (default 10)")
    ap.add_argument("--load", type=float, default=0.9, help="offered load, fraction of the cluster (default 0.9)")
    ap.add_argument("--objective", default="jct,makespan", help="objectives to run, comma-separated: jct, makespan")
    ap.add_argument("--policy", default="msched", help="the policy under test (default msched)")
    ap.add_argument("--cluster", default=CLUSTER, help=f"cluster spec (default {CLUSTER})")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="trace seeds, comma-separated (default 1,2,3,4,5)")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
