"""Distance to optimal: the greedy plan, the time-boxed optimizing planner and the exact optimum (issue 17).

    .venv/bin/python bench/bench_planner.py [--seeds 5] [--jobs 16,30] [--exact-s 120] [--box-s 2]
                                            [--gavel-jobs 100] [--gavel-cp-s 60] [--no-gavel] [--no-small]
                                            [--workloads static,philly] [--variant NAME=K:V;K:V]

(a) Small static batches (every job at t=0), one plan of the snapshot each: `--jobs` one-GPU jobs of 1-5 h
    (on the middle type) with the shared table's relative speeds (a model drawn per job), on 8 one-GPU
    nodes of 4 types (a100, titanrtx, rtx2080ti, titanxp: 2 each). Per seed and size, the makespan
    (`objective=makespan`, time box `--box-s`) of: the greedy plan (msched's list schedule, longest
    first); the local search alone (`cpsat_jobs=0`, the planner before CP-SAT); CP-SAT alone hinted with
    the greedy plan (`planner=cpsat`); the default planner (local search, then CP-SAT for a head of at
    most 40 jobs). Each over the exact optimum: with every job at t=0 on one-GPU nodes the makespan is
    the largest machine load, so OR-Tools CP-SAT solves the assignment (msched.policy.cpsat.
    assignment_makespan, 2 workers, `--exact-s` per instance); when it stops before proving optimality
    the ratio is to its best proven bound (marked), still an upper bound on the distance. The LP bound
    (msched.policy.bound) is printed beside it.
(b) The Gavel-shaped static batch: `--gavel-jobs` jobs drawn as bench/workloads.py draws the Gavel
    workload, all at t=0, on Gavel's cluster k80:1x8,p100:1x8,v100:1x8, replayed by the simulator with
    backfill under fifo, msched and oracle; each makespan over the LP bound and over CP-SAT's best proven
    bound (`--gavel-cp-s` per seed); `--gavel-variant NAME=K:V;...` adds msched with those policy options
    (and each msched's mean JCT over fifo's). `--starvation-age 0` turns the rounds' starvation guard off (a job
    waiting longer than the age is widened to every type, k80 included, where it runs 3-5x longer).
    Needs the shared Gavel table (MSCHED_SHARED_DATA); skipped without it.

(c) `--workloads static,philly,...`: each bench workload (bench/workloads.py, `--workload-jobs` sizes,
    bench_quality --quick's by default) replayed in-process with backfill for every policy: msched (one
    column per `--variant NAME=key:value;...`, e.g. `search=cpsat_jobs:0`; a key `settle_X` sets
    msched.rounds.settle.SettleOptions' X) over backfill fifo on makespan
    and mean JCT, the simulator's plan() seconds, oracle's makespan over the LP bound, and the mean-JCT
    floor (every job at once on its fastest type: `slurm_sim.metrics.jct_floor`) over fifo's mean JCT;
    with `--flow-bound`, also the LP lower bound on the mean JCT (`msched.policy.bound.lp_flow_bound`,
    `slurm_sim.metrics.trace_flow_bound`: no schedule that runs each job on one type does better) over
    fifo's (seconds to minutes of HiGHS per seed; `--flow-step S` a finer grid: tighter, slower).
    `--waits`: per variant, the longest wait of any job (is the 24 h starvation guard ever reached?) and
    the mean wait over fifo's mean JCT. `--bf-interval S`: Slurm's bf_interval for every replay, fifo's
    included (the cluster spec's, Slurm's 30 s default, otherwise): how much of msched's wait is
    latency, a job held behind a higher one that cannot start until the next backfill pass.

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
from msched.policy import cpsat, get_policy  # noqa: E402
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
    (best makespan found, best proven bound, proven optimal), by msched.policy.cpsat's model on 2 workers
    with a wall-clock limit only. Exact when every node has one GPU."""
    res = cpsat.solve([cpsat.CpJob(j, g, rt) for j, g, rt in jobs], capacity, objective="makespan", hint=hint,
                      max_s=limit_s, workers=2)
    return (res.objective if res.found else float("nan")), res.bound, res.status == "optimal"


# ----------------------------------------------------------------------------- (a)
SMALL_PLANNERS = (  # column, policy options (objective makespan), in the table's order
    ("greedy", {"planner": "greedy"}),
    ("search", {"cpsat_jobs": 0}),              # the local search alone (the planner before CP-SAT)
    ("cpsat", {"planner": "cpsat"}),            # CP-SAT alone, hinted with the greedy plan
    ("planner", {}),                            # the default: local search, then CP-SAT for a small head
)


def run_small(sizes: list[int], seeds: int, exact_s: float, box_s: float) -> None:
    print(f"(a) small static batches: one-GPU jobs on {', '.join(f'{t}:1x2' for t in SMALL_TYPES)}; "
          f"planner time box {box_s:g} s, exact CP-SAT {exact_s:g} s per instance (2 workers)")
    names = [n for n, _ in SMALL_PLANNERS]
    print(f"{'jobs':>4} {'seed':>4} | {'LP bound':>8} {'CP best':>8} {'optimum':>9} | "
          + " | ".join(f"{n + ' x opt':>13} {'cpu s':>5}" for n in names) + f" | {'exact s':>7}")
    for n in sizes:
        ratios: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        for seed in range(1, seeds + 1):
            snap = small_instance(n, seed)
            cap = snap.gpus_total
            lp = lp_lower_bound([BoundJob(j.job_id, 0.0, 1, j.est_runtime_s) for j in snap.pending], cap).value_s
            plans = {}
            for name, opts in SMALL_PLANNERS:
                policy = get_policy("msched", objective="makespan", time_box_s=box_s, **opts)
                t0 = time.process_time()
                plans[name] = policy.plan(snap)
                cpu[name].append(time.process_time() - t0)
            best_plan = min(plans.values(), key=lambda p: p.est_makespan_end)
            hint = {d.job_id: (d.gpu_types[0], int(d.est_start)) for d in best_plan.decisions if d.gpu_types}
            t1 = time.perf_counter()
            res = cpsat.assignment_makespan([cpsat.CpJob(j.job_id, 1, dict(j.est_runtime_s)) for j in snap.pending],
                                            [n.gpu_type for n in snap.nodes], max_s=exact_s, hint=hint)
            best, bound, optimal = res.objective, res.bound, res.status == "optimal"
            cp_wall = time.perf_counter() - t1
            bound = max(bound, lp)                   # the LP bound is proven too
            ref = best if optimal else bound
            cells = []
            for name in names:
                r = plans[name].est_makespan_end / ref
                ratios[name].append(r)
                cells.append(f"{plans[name].est_makespan_end / H:6.2f}h {r:6.3f} {cpu[name][-1]:5.2f}")
            mark = "" if optimal else "*"
            print(f"{n:4d} {seed:4d} | {lp / H:7.2f}h {best / H:7.2f}h {ref / H:7.2f}h{mark:1s} | "
                  + " | ".join(cells) + f" | {cp_wall:7.1f}", flush=True)
        print(f"{n:4d} mean | {'':8s} {'':8s} {'':9s} | "
              + " | ".join(f"{'':7s} {statistics.mean(ratios[k]):6.3f} {statistics.mean(cpu[k]):5.2f}" for k in names))
        print(f"{n:4d} max  | {'':8s} {'':8s} {'':9s} | "
              + " | ".join(f"{'':7s} {max(ratios[k]):6.3f} {max(cpu[k]):5.2f}" for k in names))
    print("  * the exact CP-SAT did not prove optimality in its time: the ratio is to its best proven bound "
          "(max with the LP bound), an upper bound on the distance to the optimum; cpu s: this process's CPU "
          "seconds for the plan")


# ----------------------------------------------------------------------------- (b)
def run_gavel(n_jobs: int, seeds: int, cp_s: float, starvation_age_s: float | None,
              variants: dict[str, dict] | None = None) -> None:
    import workloads as wl

    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, compare, replay
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
          f"{'oracle':>14} | " + "".join(f"{k:>14} | " for k in variants or {}) + "longest job")
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
        for k, opts in (variants or {}).items():       # msched with other options (`--variant`), named by them
            opts, settle = settle_options(opts)
            vs = SimSetup(cluster, truth, truth, Classifier(list(w.references), truth), scheduler="backfill",
                          starvation_age_s=starvation_age_s, policy_options=opts, settle=settle)
            results[k] = replay(trace, "msched", vs).metrics
        jobs = [(j.job_id, j.num_gpus, {t: round(v) for t, v in true_runtimes(j, truth, cluster).items()})
                for j in trace]
        best, bound, _ = cpsat_makespan(jobs, cluster.gpus_total, cp_s)
        bound = max(bound, lb)
        longest = max(min(rt.values()) for _, _, rt in jobs)
        cells = []
        for p in results:
            ms = results[p]["makespan_s"]
            cells.append(f"{ms / lb:5.3f}/{ms / bound:5.3f}")
        rows.append({p: results[p]["makespan_s"] for p in results} | {"lb": lb, "cp": bound})
        print(f"{seed:4d} | {lb / H:7.1f}h {bound / H:7.1f}h {best / H:7.1f}h | " + " | ".join(f"{c:>14}" for c in cells)
              + f" | {longest / H:.1f}h" + "".join(f" | {k} mean JCT x fifo {results[k]['mean_jct_s'] / results['fifo']['mean_jct_s']:.3f}"
                                             for k in ("msched", *(variants or {}))))
    for p in ("fifo", "msched", "oracle", *(variants or {})):
        print(f"  {p:7s} mean makespan x LP bound {statistics.mean(r[p] / r['lb'] for r in rows):.3f}, "
              f"x CP-SAT bound {statistics.mean(r[p] / r['cp'] for r in rows):.3f}")
    print("  cells: makespan x LP bound / x CP-SAT's best proven bound")


# ----------------------------------------------------------------------------- (c)
def settle_options(opts: dict) -> tuple[dict, object]:
    """A variant's options split into the policy's and settle's (`settle_` keys: a SettleOptions, None
    when there are none)."""
    from msched.rounds.settle import SettleOptions

    opts = dict(opts)
    settle = {key[len("settle_"):]: opts.pop(key) for key in list(opts) if key.startswith("settle_")}
    return opts, (SettleOptions(**settle) if settle else None)


def run_workloads(names: list[str], seeds: int, sizes: dict[str, int], variants: dict[str, dict],
                  first_seed: int = 1, oracle: bool = True, flow_bound: bool = False,
                  flow_step_s: float | None = None, oracle_each: bool = False, waits: bool = False,
                  bf_interval_s: float | None = None) -> None:
    """Each bench workload (bench/workloads.py) replayed in-process with backfill for every policy:
    msched with each option set of `variants` (and oracle with the default) against backfill fifo."""
    from dataclasses import replace

    import workloads as wl

    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.metrics import jct_floor, trace_bound, trace_flow_bound

    print("(c) bench workloads, backfill for every policy, 24 h starvation guard; msched variants: "
          + "; ".join(f"{k} = {v or 'defaults'}" for k, v in variants.items()))
    print(f"{'workload':>8} {'seed':>4} {'jobs':>4} | {'fifo makespan':>13} {'fifo JCT':>9} | "
          + " | ".join(f"{k + ' ms/JCT x fifo':>22} {'plan s':>6}" for k in variants)
          + f" | {'oracle ms x LP':>14} {'JCT floor x fifo':>16}" + (f" {'JCT LP bound x fifo':>19}" if flow_bound else ""))
    for name in names:
        per: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
        oracles: dict[str, list[float]] = {k: [] for k in variants}
        floors: list[float] = []
        flows: list[float] = []
        longest: dict[str, list[float]] = {k: [] for k in variants}
        mean_wait: dict[str, list[float]] = {k: [] for k in variants}
        for seed in range(first_seed, first_seed + seeds):
            try:
                w = wl.build(name, sizes[name], seed)
            except wl.WorkloadError as exc:
                print(f"{name:>8} skipped: {exc}")
                break
            cluster = parse_cluster(w.cluster)
            if bf_interval_s is not None:
                cluster = replace(cluster, scheduler=replace(cluster.scheduler, bf_interval_s=bf_interval_s))
            truth = PerfTable.load(w.truth)
            perf = PerfTable.load(w.perf) if w.perf is not None else truth
            refs = list(w.references) if w.references is not None else None
            trace = list(w.jobs)
            lb = trace_bound(trace, truth, cluster)
            cells = []
            base_setup = SimSetup(cluster, truth, perf, Classifier(refs, perf), scheduler="backfill")
            fifo = replay(trace, "fifo", base_setup, bound=lb).metrics
            for k, opts in variants.items():
                opts, settle = settle_options(opts)
                age = opts.pop("starvation_age_s", 86400.0)      # the round's guard (SimSetup's), 24 h as in fifo's
                setup = SimSetup(cluster, truth, perf, Classifier(refs, perf), scheduler="backfill",
                                 starvation_age_s=age, objective=opts.pop("objective", "balanced"), policy_options=opts,
                                 settle=settle)
                r = replay(trace, "msched", setup, bound=lb)
                ms, jct = r.metrics["makespan_s"] / fifo["makespan_s"], r.metrics["mean_jct_s"] / fifo["mean_jct_s"]
                per[k].append((ms, jct))
                cells.append(f"{ms:10.3f}/{jct:5.3f}       {r.plan_seconds:6.1f}")
                if waits:
                    w_s = job_waits(r.outcomes)
                    longest[k].append(max(w_s, default=0.0))
                    mean_wait[k].append(statistics.mean(w_s) / fifo["mean_jct_s"] if w_s else 0.0)
                    cells[-1] += f" wait max {longest[k][-1] / H:.2f}h"
                if oracle_each:         # the oracle with this variant's options too: its makespan x the LP bound
                    o_ms = replay(trace, "oracle", setup, bound=lb).metrics["makespan_s"] / lb.value_s
                    oracles[k].append(o_ms)
                    cells[-1] += f" oracle {o_ms:.3f}"
            oracle_ms = replay(trace, "oracle", base_setup, bound=lb).metrics["makespan_s"] if oracle else float("nan")
            floors.append(jct_floor(trace, truth, cluster) / fifo["mean_jct_s"])
            flow = ""
            if flow_bound:
                flows.append(trace_flow_bound(trace, truth, cluster, flow_step_s).mean_flow_s / fifo["mean_jct_s"])
                flow = f" {flows[-1]:19.3f}"
            print(f"{name:>8} {seed:4d} {len(trace):4d} | {fifo['makespan_s'] / H:12.1f}h {fifo['mean_jct_s'] / H:8.2f}h | "
                  + " | ".join(cells) + f" | {oracle_ms / lb.value_s:14.3f} {floors[-1]:16.3f}" + flow, flush=True)
        for k, rows in per.items():
            if rows:
                print(f"{name:>8} mean {k}: makespan x fifo {statistics.mean(r[0] for r in rows):.3f}, "
                      f"mean JCT x fifo {statistics.mean(r[1] for r in rows):.3f}"
                      + (f", oracle makespan x LP bound {statistics.mean(oracles[k]):.3f}" if oracles[k] else "")
                      + (f", longest wait {max(longest[k]) / H:.2f} h, mean wait x fifo's mean JCT "
                         f"{statistics.mean(mean_wait[k]):.3f}" if longest[k] else ""))
        if floors:
            print(f"{name:>8} mean JCT floor (every job on its fastest type at once, slurm_sim.metrics.jct_floor) "
                  f"x fifo {statistics.mean(floors):.3f}")
        if flows:
            print(f"{name:>8} mean JCT LP lower bound (msched.policy.bound.lp_flow_bound) x fifo {statistics.mean(flows):.3f}")


def job_waits(outcomes) -> list[float]:  # noqa: ANN001 - slurm_sim.metrics.JobOutcome
    """Seconds from submission to start of every job that started."""
    return [o.start - o.submit for o in outcomes if o.start is not None]


def parse_variant(text: str) -> tuple[str, dict]:
    """'name=key:value;key:value' -> (name, {key: value}) with numbers read as numbers."""
    name, _, rest = text.partition("=")
    opts: dict = {}
    for item in filter(None, rest.split(";")):
        k, _, v = item.partition(":")
        if v.lower() == "none":
            opts[k] = None
            continue
        try:
            opts[k] = int(v)
        except ValueError:
            try:
                opts[k] = float(v)
            except ValueError:
                opts[k] = v
    return name, opts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 1..N of every part [default: 5]")
    ap.add_argument("--first-seed", type=int, default=1,
                    help="(c): the first seed (seeds first..first+N-1: settings chosen on seeds a table then does not use)")
    ap.add_argument("--no-oracle", action="store_true", help="(c): skip the oracle's replay")
    ap.add_argument("--oracle-variants", action="store_true",
                    help="(c): the oracle replayed with each variant's options as well (its makespan x LP bound)")
    ap.add_argument("--flow-bound", action="store_true", help="(c): the LP lower bound on the mean JCT per seed")
    ap.add_argument("--flow-step", type=float, default=None,
                    help="(c): the flow bound's grid step in seconds (finer: tighter, slower) [default: automatic]")
    ap.add_argument("--jobs", default="16,30", help="sizes of the small instances (comma separated)")
    ap.add_argument("--exact-s", type=float, default=120.0, help="CP-SAT seconds per small instance")
    ap.add_argument("--box-s", type=float, default=2.0, help="the planner's time box")
    ap.add_argument("--gavel-jobs", type=int, default=100, help="(b): jobs in the Gavel-shaped batch [default: 100]")
    ap.add_argument("--gavel-cp-s", type=float, default=60.0, help="CP-SAT seconds per Gavel seed")
    ap.add_argument("--no-gavel", action="store_true", help="skip (b)")
    ap.add_argument("--starvation-age", type=float, default=86400.0,
                    help="(b): the round's starvation age in seconds (0: no guard) [default: 86400]")
    ap.add_argument("--gavel-variant", action="append", default=[], metavar="NAME=K:V;K:V",
                    help="(b): msched with these policy options as well, a column each (repeatable)")
    ap.add_argument("--no-small", action="store_true", help="skip (a)")
    ap.add_argument("--workloads", default="",
                    help="(c): comma-separated bench workloads to replay (static, philly, alibaba, gavel) [default: none]")
    ap.add_argument("--workload-jobs", default="static=200,philly=120,alibaba=300,gavel=80",
                    help="(c): jobs per workload (bench_quality --quick sizes)")
    ap.add_argument("--waits", action="store_true",
                    help="(c): per variant, the longest wait and the mean wait x fifo's mean JCT")
    ap.add_argument("--bf-interval", type=float, default=None, metavar="S",
                    help="(c): Slurm's bf_interval in seconds for every replay [default: the cluster's, 30]")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=K:V;K:V",
                    help="(c): an msched option set to compare, e.g. 'search=cpsat_jobs:0' (repeatable; "
                         "default: msched's defaults)")
    a = ap.parse_args()
    if not a.no_small:
        run_small([int(x) for x in a.jobs.split(",") if x], a.seeds, a.exact_s, a.box_s)
    if not a.no_gavel:
        run_gavel(a.gavel_jobs, a.seeds, a.gavel_cp_s, a.starvation_age or None,
                  {k: v for k, v in (parse_variant(x) for x in a.gavel_variant)})
    if a.workloads:
        sizes = {k: int(v) for k, v in (x.split("=") for x in a.workload_jobs.split(","))}
        variants = dict(parse_variant(v) for v in a.variant) or {"msched": {}}
        run_workloads([x for x in a.workloads.split(",") if x], a.seeds, sizes, variants, a.first_seed,
                      not a.no_oracle, a.flow_bound, a.flow_step, a.oracle_variants, a.waits, a.bf_interval)


if __name__ == "__main__":
    main()
