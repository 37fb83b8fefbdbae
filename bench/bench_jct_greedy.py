"""An idealized online greedy on a bench workload: a feasible non-preemptive schedule, so its mean JCT is
an upper bound on the best any scheduler reaches (beside msched.policy.bound.lp_flow_bound's lower bound).

    MSCHED_SHARED_DATA=... .venv/bin/python bench/bench_jct_greedy.py [--workloads philly,alibaba]
                                                                     [--seeds 5] [--first-seed 1]

An event simulation on the workload's real node list with the true runtimes: no Slurm, no rounds, every
decision the instant a job arrives or a GPU frees. Pending jobs in order (`spt`: shortest fastest runtime
first; `fifo`: by submission), each started on a node of a type that has its GPUs free now whose end is
within theta x its fastest runtime of the earliest end any type could give it (from the running jobs'
known ends), the fastest such type, the fullest node of it; otherwise it waits. Printed: each rule's mean
JCT (and makespan) over backfill fifo's in the simulator (bench_planner's (c) setup). Written for the
jct12 section of BENCHMARKS.md ("Online mean JCT, a lower bound").
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RULES = [(order, theta) for order in ("spt", "fifo") for theta in (0.0, 0.25, 1.0, 100.0)]
SIZES = {"static": 200, "philly": 120, "alibaba": 300, "gavel": 80}


def greedy(jobs: list[tuple[float, int, dict[str, float]]], nodes: list[tuple[str, int]], theta: float,
           order: str) -> tuple[float, float]:
    """(mean JCT, makespan) of the rule on jobs (submit, GPUs, runtime per type) and nodes (type, GPUs)."""
    n = len(jobs)
    free = [g for _, g in nodes]
    running: list[tuple[float, int, int]] = []            # (end, node, GPUs)
    rel = sorted(range(n), key=lambda i: jobs[i][0])
    ends: list[float] = [0.0] * n
    pending: list[int] = []
    ri = 0
    t = jobs[rel[0]][0]

    def free_at(k: int, g: int) -> float:
        have = free[k]
        if have >= g:
            return t
        for e, _k, gg in sorted(x for x in running if x[1] == k):
            have += gg
            if have >= g:
                return e
        return float("inf")

    def key(i: int) -> float:
        return min(jobs[i][2].values()) if order == "spt" else jobs[i][0]

    while ri < n or pending or running:
        while ri < n and jobs[rel[ri]][0] <= t:
            pending.append(rel[ri])
            ri += 1
        while running and running[0][0] <= t:
            _, k, g = heapq.heappop(running)
            free[k] += g
        waiting = []
        for i in sorted(pending, key=key):
            _, g, rt = jobs[i]
            best = min(free_at(k, g) + rt[typ] for k, (typ, tot) in enumerate(nodes) if typ in rt and tot >= g)
            fits = [k for k, (typ, _) in enumerate(nodes)
                    if typ in rt and free[k] >= g and t + rt[typ] <= best + theta * min(rt.values()) + 1e-9]
            if not fits:
                waiting.append(i)
                continue
            k = min(fits, key=lambda k: (rt[nodes[k][0]], free[k]))
            free[k] -= g
            ends[i] = t + rt[nodes[k][0]]
            heapq.heappush(running, (ends[i], k, g))
        pending = waiting
        nxt = ([jobs[rel[ri]][0]] if ri < n else []) + ([running[0][0]] if running else [])
        if not nxt:
            if pending:
                raise RuntimeError("a pending job fits no node")
            break
        t = max(t, min(nxt))
    return sum(ends[i] - jobs[i][0] for i in range(n)) / n, max(ends) - min(j[0] for j in jobs)


def main() -> None:
    import workloads as wl

    from msched.estimate.perf_table import PerfTable
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.metrics import true_runtimes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="philly,alibaba")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=1)
    a = ap.parse_args()
    print("mean JCT / makespan x backfill fifo per rule (order/theta)")
    for name in a.workloads.split(","):
        per: dict[tuple[str, float], list[float]] = {r: [] for r in RULES}
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            w = wl.build(name, SIZES[name], seed)
            cluster = parse_cluster(w.cluster)
            truth = PerfTable.load(w.truth)
            perf = PerfTable.load(w.perf) if w.perf is not None else truth
            refs = list(w.references) if w.references is not None else None
            trace = list(w.jobs)
            fifo = replay(trace, "fifo", SimSetup(cluster, truth, perf, Classifier(refs, perf),
                                                  scheduler="backfill")).metrics
            jobs = [(j.submit_time, j.num_gpus, true_runtimes(j, truth, cluster)) for j in trace]
            nodes = [(nd.gpu_type, nd.gpus) for nd in cluster.nodes]
            cells = []
            for rule in RULES:
                jct, ms = greedy(jobs, nodes, rule[1], rule[0])
                per[rule].append(jct / fifo["mean_jct_s"])
                cells.append(f"{rule[0]}/{rule[1]:g} {jct / fifo['mean_jct_s']:.3f}/{ms / fifo['makespan_s']:.3f}")
            print(f"{name:>8} {seed:3d} | " + "  ".join(cells), flush=True)
        print(f"{name:>8} mean | " + "  ".join(f"{r[0]}/{r[1]:g} {statistics.mean(v):.3f}" for r, v in per.items()))


if __name__ == "__main__":
    main()
