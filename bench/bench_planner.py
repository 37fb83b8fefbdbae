"""Distance to optimal: the greedy plan, the time-boxed optimizing planner and the exact optimum (issue 17).

    .venv/bin/python bench/bench_planner.py [--seeds 5] [--jobs 16,30] [--exact-s 120] [--box-s 2]
                                            [--gavel-jobs 100] [--gavel-cp-s 60] [--no-gavel]

(a) Small static batches (every job at t=0), one plan of the snapshot each: `--jobs` one-GPU jobs of 1-5 h
    (on the middle type) with the shared table's relative speeds (a model drawn per job), on 8 one-GPU
    nodes of 4 types (a100, titanrtx, rtx2080ti, titanxp: 2 each). Per seed and size: the makespan of the
    greedy plan (msched's list schedule, longest first), of the optimizing planner (`objective=makespan`,
    time box `--box-s`), and the optimum by OR-Tools CP-SAT (one optional interval per job and type, a
    cumulative per type: exact on one-GPU nodes) with `--exact-s` per instance; when CP-SAT stops
    before proving optimality the ratio is to its best proven bound (marked), so it is still an upper
    bound on the distance. The LP bound (msched.policy.bound) is printed beside it.
(b) The Gavel-shaped static batch: `--gavel-jobs` jobs drawn as bench/workloads.py draws the Gavel
    workload, all at t=0, on Gavel's cluster k80:1x8,p100:1x8,v100:1x8, replayed by the simulator with
    backfill under fifo, msched and oracle; each makespan over the LP bound and over CP-SAT's best proven
    bound (`--gavel-cp-s` per seed). `--starvation-age 0` turns the rounds' starvation guard off (a job
    waiting longer than the age is widened to every type, k80 included, where it runs 3-5x longer).
    Needs the shared Gavel table (MSCHED_SHARED_DATA); skipped without it.

Times are simulated hours; the wall seconds of each planner are this machine's (2 shared cores).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from msched.config import DATA_DIR  # noqa: E402
from msched.estimate.perf_table import PerfTable  # noqa: E402
from msched.policy import get_policy  # noqa: E402
from msched.policy.bound import BoundJob, lp_lower_bound  # noqa: E402
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob  # noqa: E402

SMALL_TYPES = ("a100", "titanrtx", "rtx2080ti", "titanxp")
GAVEL_STATIC_CLUSTER = "k80:1x8,p100:1x8,v100:1x8"
H = 3600.0


# ----------------------------------------------------------------------------- instances
def small_instance(n_jobs: int, seed: int) -> ClusterSnapshot:
    """`n_jobs` one-GPU jobs at t=0 on 2 one-GPU nodes of each of 4 types; runtimes from the shipped
    table's relative speeds of a model drawn per job, 1-5 h on the job's median type."""
    rng = random.Random(seed)
    perf = PerfTable.load(os.path.join(DATA_DIR, "gpu_performance.csv"))
    speeds = {m: perf.speeds(m, 1) for m in sorted(perf.models())}
    models = [m for m, s in speeds.items() if all(t in s for t in SMALL_TYPES)]
    nodes = tuple(NodeState(f"{t}-{k}", t, 1, 1) for t in SMALL_TYPES for k in range(2))
    pending = []
    for i in range(n_jobs):
        ms = speeds[rng.choice(models)]
        mid = statistics.median(ms[t] for t in SMALL_TYPES)
        hours = rng.uniform(1.0, 5.0)
        est = {t: round(hours * H * ms[t] / mid) for t in SMALL_TYPES}
        pending.append(PendingJob(f"j{i:02d}", 0.0, 1, 1000, est))
    return ClusterSnapshot(0.0, nodes, (), tuple(pending), None)


# ----------------------------------------------------------------------------- CP-SAT
def cpsat_makespan(jobs: list[tuple[str, int, dict[str, int]]], capacity: dict[str, int], limit_s: float,
                   hint: dict[str, tuple[str, int]] | None = None) -> tuple[float, float, bool]:
    """Non-preemptive makespan of (id, GPUs, runtime per type) jobs released at 0 on per-type GPU pools:
    (best makespan found, best proven bound, proven optimal). Exact when every node has one GPU."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    horizon = sum(max(rt.values()) for _, _, rt in jobs)
    end = m.NewIntVar(0, horizon, "makespan")
    per_type: dict[str, tuple[list, list]] = {t: ([], []) for t in capacity}
    energy: dict[str, list] = {t: [] for t in capacity}       # GPU-seconds on each type (a redundant cut)
    for jid, g, rt in jobs:
        lits = []
        for t, p in rt.items():
            if t not in capacity or g > capacity[t]:
                continue
            lit = m.NewBoolVar(f"{jid}@{t}")
            s = m.NewIntVar(0, horizon, f"s_{jid}_{t}")
            iv = m.NewOptionalFixedSizeIntervalVar(s, int(p), lit, f"i_{jid}_{t}")
            m.Add(s + int(p) <= end).OnlyEnforceIf(lit)
            per_type[t][0].append(iv)
            per_type[t][1].append(g)
            energy[t].append(g * int(p) * lit)
            lits.append(lit)
            if hint and jid in hint:
                m.AddHint(lit, hint[jid][0] == t)
                if hint[jid][0] == t:
                    m.AddHint(s, hint[jid][1])
        m.AddExactlyOne(lits)
    for t, (ivs, dem) in per_type.items():
        if ivs:
            m.AddCumulative(ivs, dem, capacity[t])
            m.Add(sum(energy[t]) <= capacity[t] * end)
    m.Minimize(end)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit_s
    solver.parameters.num_workers = 2
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return float("nan"), float(solver.BestObjectiveBound()), False
    return float(solver.ObjectiveValue()), float(solver.BestObjectiveBound()), status == cp_model.OPTIMAL


# ----------------------------------------------------------------------------- (a)
def run_small(sizes: list[int], seeds: int, exact_s: float, box_s: float) -> None:
    print(f"(a) small static batches: one-GPU jobs on {', '.join(f'{t}:1x2' for t in SMALL_TYPES)}; "
          f"planner time box {box_s:g} s, CP-SAT {exact_s:g} s per instance")
    print(f"{'jobs':>4} {'seed':>4} | {'LP bound':>8} {'CP best':>8} {'optimum':>9} | {'greedy':>7} {'x opt':>6} | "
          f"{'planner':>7} {'x opt':>6} {'wall s':>6} | {'CP-SAT s':>8}")
    for n in sizes:
        g_ratios, p_ratios = [], []
        for seed in range(1, seeds + 1):
            snap = small_instance(n, seed)
            cap = snap.gpus_total
            lp = lp_lower_bound([BoundJob(j.job_id, 0.0, 1, j.est_runtime_s) for j in snap.pending], cap).value_s
            greedy = get_policy("msched", objective="makespan", planner="greedy").plan(snap)
            t0 = time.perf_counter()
            planner = get_policy("msched", objective="makespan", time_box_s=box_s)
            plan = planner.plan(snap)
            wall = time.perf_counter() - t0
            hint = {d.job_id: (d.gpu_types[0], int(d.est_start)) for d in plan.decisions if d.gpu_types}
            t1 = time.perf_counter()
            best, bound, optimal = cpsat_makespan([(j.job_id, 1, dict(j.est_runtime_s)) for j in snap.pending],
                                                  cap, exact_s, hint)
            cp_wall = time.perf_counter() - t1
            bound = max(bound, lp)                   # the LP bound is proven too
            ref = best if optimal else bound
            g, p = greedy.est_makespan_end / ref, plan.est_makespan_end / ref
            g_ratios.append(g)
            p_ratios.append(p)
            mark = "" if optimal else "*"
            print(f"{n:4d} {seed:4d} | {lp / H:7.2f}h {best / H:7.2f}h {ref / H:7.2f}h{mark:1s} | {greedy.est_makespan_end / H:6.2f}h "
                  f"{g:6.3f} | {plan.est_makespan_end / H:6.2f}h {p:6.3f} {wall:6.2f} | {cp_wall:8.1f}")
        print(f"{n:4d} mean | {'':8s} {'':8s} {'':9s} | {'':7s} {statistics.mean(g_ratios):6.3f} | {'':7s} "
              f"{statistics.mean(p_ratios):6.3f}   (max greedy {max(g_ratios):.3f}, planner {max(p_ratios):.3f})")
    print("  * CP-SAT did not prove optimality in its time: the ratio is to its best proven bound")


# ----------------------------------------------------------------------------- (b)
def run_gavel(n_jobs: int, seeds: int, cp_s: float, starvation_age_s: float | None) -> None:
    import workloads as wl

    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, compare
    from slurm_sim.metrics import trace_bound, true_runtimes

    try:
        truth_path = wl.gavel_perf_path()
        truth_path.stat()
    except (wl.WorkloadError, OSError) as exc:
        print(f"(b) skipped: {exc}")
        return
    guard = f"starvation guard {starvation_age_s / 3600:g} h" if starvation_age_s else "no starvation guard"
    print(f"(b) Gavel-shaped static batch: {n_jobs} jobs at t=0 on {GAVEL_STATIC_CLUSTER}, backfill for every "
          f"policy, {guard}; CP-SAT {cp_s:g} s per seed")
    print(f"{'seed':>4} | {'LP bound':>8} {'CP bound':>8} {'CP best':>8} | {'fifo':>14} | {'msched':>14} | "
          f"{'oracle':>14} | longest job")
    rows = []
    for seed in range(1, seeds + 1):
        w = wl.gavel_workload(n_jobs, seed, static=True, cluster=GAVEL_STATIC_CLUSTER)
        cluster = parse_cluster(w.cluster)
        truth = PerfTable.load(w.truth)
        setup = SimSetup(cluster, truth, truth, Classifier(list(w.references), truth), scheduler="backfill",
                         starvation_age_s=starvation_age_s)
        trace = list(w.jobs)
        lb = trace_bound(trace, truth, cluster).value_s
        results = {r.policy: r.metrics for r in compare(trace, ["fifo", "msched", "oracle"], setup)}
        jobs = [(j.job_id, j.num_gpus, {t: round(v) for t, v in true_runtimes(j, truth, cluster).items()})
                for j in trace]
        best, bound, _ = cpsat_makespan(jobs, cluster.gpus_total, cp_s)
        bound = max(bound, lb)
        longest = max(min(rt.values()) for _, _, rt in jobs)
        cells = []
        for p in ("fifo", "msched", "oracle"):
            ms = results[p]["makespan_s"]
            cells.append(f"{ms / lb:5.3f}/{ms / bound:5.3f}")
        rows.append({p: results[p]["makespan_s"] for p in results} | {"lb": lb, "cp": bound})
        print(f"{seed:4d} | {lb / H:7.1f}h {bound / H:7.1f}h {best / H:7.1f}h | {cells[0]:>14} | {cells[1]:>14} | "
              f"{cells[2]:>14} | {longest / H:.1f}h")
    for p in ("fifo", "msched", "oracle"):
        print(f"  {p:7s} mean makespan x LP bound {statistics.mean(r[p] / r['lb'] for r in rows):.3f}, "
              f"x CP-SAT bound {statistics.mean(r[p] / r['cp'] for r in rows):.3f}")
    print("  cells: makespan x LP bound / x CP-SAT's best proven bound")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", default="16,30", help="sizes of the small instances (comma separated)")
    ap.add_argument("--exact-s", type=float, default=120.0, help="CP-SAT seconds per small instance")
    ap.add_argument("--box-s", type=float, default=2.0, help="the planner's time box")
    ap.add_argument("--gavel-jobs", type=int, default=100)
    ap.add_argument("--gavel-cp-s", type=float, default=60.0, help="CP-SAT seconds per Gavel seed")
    ap.add_argument("--no-gavel", action="store_true", help="skip (b)")
    ap.add_argument("--starvation-age", type=float, default=86400.0,
                    help="(b): the round's starvation age in seconds (0: no guard) [default: 86400]")
    ap.add_argument("--no-small", action="store_true", help="skip (a)")
    a = ap.parse_args()
    if not a.no_small:
        run_small([int(x) for x in a.jobs.split(",") if x], a.seeds, a.exact_s, a.box_s)
    if not a.no_gavel:
        run_gavel(a.gavel_jobs, a.seeds, a.gavel_cp_s, a.starvation_age or None)


if __name__ == "__main__":
    main()
