"""Online mean JCT: is the gap the estimates or the plan, and what could requeueing a just-started job buy?

    .venv/bin/python bench/bench_requeue.py [--workloads philly,alibaba] [--first-seed 1] [--seeds 5]
                                            [--split] [--lever NAME=age:900;speedup:1.5;swap:900;delay:0]

Issue 17's "online mean JCT <= 0.70x backfill fifo" is unmet on philly and alibaba (BENCHMARKS.md, jct10-jct17).
Each bench workload (bench/workloads.py, bench_quality --quick sizes) is replayed in-process with backfill
for every policy, as bench_planner.py (c) does:

`--split`: fifo, msched and oracle (msched's planner fed the true runtimes), and the LP lower bound on the
    mean JCT (`lp_flow_bound`, with each job's flow at the LP's optimum); msched's and the oracle's mean JCT
    over fifo's, and msched's excess over the LP's per-job flow summed by group (length on the fastest type,
    type run on, how much slower than its fastest type), split into wait and run above the fastest type, all
    over fifo's total flow (so the groups of one kind add up to msched x fifo less the bound x fifo). If the
    oracle scores msched's figures the estimates are not the gap.

`--lever`: msched with a model of a requeue lever, run after every round (`SimSetup.after_round`) on the
    simulated Slurm's state: for each GPU type with a free GPU, the running one-GPU jobs (not pinned, not
    shard jobs) that started at most `age` s ago on another type, run there at least `speedup` x as long as
    on the free type, and would end sooner restarted now (`now + delay + runtime there`), largest gain first,
    are requeued (`Simulator.requeue`: the seconds they ran are lost), constrained to the free type and put
    on top of the queue (`delay` > 0: with a begin time that far ahead, as Slurm may not restart a requeued
    job at once); one job per free GPU. `swap:S` adds swaps: a just-started one-GPU job on a slower type and
    one that started at most S s ago on a faster type are both requeued onto each other's type where the
    first's gain exceeds the second's loss. The lever reads the true runtimes: on these workloads msched's
    estimates are the true ones (`--split` shows the oracle equal to msched), so it is what msched could do
    with its own estimates. `keep:1` models a checkpointed job instead (the restart runs only the work left:
    free migration, as Gavel assumes; not something msched can do, a measure of what checkpoints would buy).
    Without `--lever`: the ceiling (age unlimited, any gain) and swap variants.

Times are simulated (load-free): figures do not depend on this machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_planner import parse_variant  # noqa: E402
from bench_quality import SIZES as QUALITY_SIZES  # noqa: E402

from msched.slurm.base import PENDING, RUNNING  # noqa: E402

SIZES = QUALITY_SIZES["quick"]["jobs"]     # bench_quality --quick's jobs per workload, as bench_planner (c) uses
SHORT_S = 1800.0          # "short": under half an hour on its fastest type (jct11-jct13's split)
DEFAULT_LEVERS = ("ceiling=age:inf;speedup:1.0001", "a900s15=age:900;speedup:1.5",
                  "swap900=age:900;speedup:1.0001;swap:900")


@dataclass
class RequeueLever:
    """The requeue lever's model (see the module docstring); called as `after_round(sim, now)`. Counts its
    requeues and the run seconds they threw away (one instance per replay)."""

    max_age_s: float = float("inf")
    speedup: float = 1.0001
    delay_s: float = 0.0
    swap_age_s: float | None = None
    keep_work: bool = False          # a checkpointed job: the restart runs only what was left (migration, for scale)
    requeues: int = field(default=0, compare=False)
    lost_s: float = field(default=0.0, compare=False)

    def __call__(self, sim, now: float) -> None:  # noqa: ANN001 - slurm_sim.simulator.Simulator
        movable = [j for j in sim.active.values()
                   if j.state == RUNNING and j.num_gpus == 1 and not j.shards and not j.pinned]
        young = [j for j in movable if now - j.start_time <= self.max_age_s]
        top = max((j.priority for j in sim.active.values() if j.state == PENDING), default=0)
        free: dict[str, int] = defaultdict(int)
        for n, gpus in enumerate(sim.free):
            free[sim.node_type[n]] += gpus
        moves = sorted(((j.start_time + j.runtime_by_type[j.gpu_type] - (now + self.delay_s + rt * self._left(j, now)),
                         j.job_id, t)
                        for j in young for t, rt in j.runtime_by_type.items()
                        if free[t] > 0 and t != j.gpu_type and j.runtime_by_type[j.gpu_type] >= self.speedup * rt),
                       reverse=True)
        moved: set[str] = set()
        for gain, job_id, gpu_type in moves:
            if gain > 0 and job_id not in moved and free[gpu_type] > 0:
                top = self._move(sim, sim.jobs[job_id], gpu_type, now, top)
                free[gpu_type] -= 1
                moved.add(job_id)
        if self.swap_age_s is not None:
            self._swaps(sim, [j for j in young if j.job_id not in moved],
                        [j for j in movable if j.job_id not in moved and now - j.start_time <= self.swap_age_s],
                        now, top)

    def _swaps(self, sim, young: list, victims: list, now: float, top: int) -> None:  # noqa: ANN001
        pairs = []
        for s in young:
            end_s = s.start_time + s.runtime_by_type[s.gpu_type]
            for v in victims:
                fast, slow = v.gpu_type, s.gpu_type
                if v is s or fast == slow or fast not in s.runtime_by_type or slow not in v.runtime_by_type:
                    continue
                if s.runtime_by_type[slow] < self.speedup * s.runtime_by_type[fast]:
                    continue
                gain = end_s - (now + self.delay_s + s.runtime_by_type[fast] * self._left(s, now))
                loss = (now + self.delay_s + v.runtime_by_type[slow] * self._left(v, now)
                        - (v.start_time + v.runtime_by_type[fast]))
                if gain > 0 and gain > loss:
                    pairs.append((gain - loss, s.job_id, v.job_id))
        used: set[str] = set()
        for _, sid, vid in sorted(pairs, reverse=True):
            if sid in used or vid in used:
                continue
            s, v = sim.jobs[sid], sim.jobs[vid]
            fast, slow = v.gpu_type, s.gpu_type
            top = self._move(sim, s, fast, now, top)
            top = self._move(sim, v, slow, now, top)
            used.update((sid, vid))

    def _left(self, job, now: float) -> float:  # noqa: ANN001
        """The share of the job's work a restart runs: all of it, or (keep_work) what its run has not done."""
        if not self.keep_work:
            return 1.0
        return max(0.0, 1.0 - (now - job.start_time) / job.runtime_by_type[job.gpu_type])

    def _move(self, sim, job, gpu_type: str, now: float, top: int) -> int:  # noqa: ANN001
        """Requeue `job` onto `gpu_type` at the top of the queue; the new top priority."""
        self.requeues += 1
        left = self._left(job, now)
        self.lost_s += (now - job.start_time) * (1.0 if not self.keep_work else 0.0)
        sim.requeue(job)
        if self.keep_work:
            job.runtime_by_type = {t: rt * left for t, rt in job.runtime_by_type.items()}
        sim.set_features(job, gpu_type)
        sim.set_priority(job, top + 1)
        if self.delay_s > 0:
            sim.set_begin_time(job, now + self.delay_s)
        return top + 1


def lever_from(opts: dict) -> RequeueLever:
    """`--lever` options (age, speedup, delay, swap; 'inf' for no age limit) as a RequeueLever."""
    return RequeueLever(float(opts.get("age", "inf")), float(opts.get("speedup", 1.0001)),
                        float(opts.get("delay", 0.0)), None if opts.get("swap") is None else float(opts["swap"]),
                        bool(opts.get("keep", 0)))


def setups(name: str, seed: int):  # noqa: ANN201
    """(trace, a function of after_round -> SimSetup, truth, cluster), as bench_planner.py (c) builds them
    (backfill, 24 h starvation guard, msched's defaults; `setup()` without a lever serves fifo too)."""
    import workloads as wl

    from msched.estimate.perf_table import PerfTable
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup

    w = wl.build(name, SIZES[name], seed)
    cluster = parse_cluster(w.cluster)
    truth = PerfTable.load(w.truth)
    perf = PerfTable.load(w.perf) if w.perf is not None else truth
    refs = list(w.references) if w.references is not None else None

    def setup(after_round=None) -> SimSetup:  # noqa: ANN001
        return SimSetup(cluster, truth, perf, Classifier(refs, perf), scheduler="backfill", after_round=after_round)

    return list(w.jobs), setup, truth, cluster


def run_split(names: list[str], seeds: range) -> None:
    from slurm_sim.compare import replay
    from slurm_sim.metrics import trace_bound, trace_flow_bound, true_runtimes

    for name in names:
        groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
        rows = []
        for seed in seeds:
            trace, setup, truth, cluster = setups(name, seed)
            lb = trace_bound(trace, truth, cluster)
            out = {p: replay(trace, p, setup(), bound=lb) for p in ("fifo", "msched", "oracle")}
            flow = trace_flow_bound(trace, truth, cluster)
            fifo_total = sum(o.end - o.submit for o in out["fifo"].outcomes)
            rows.append([out[p].metrics["mean_jct_s"] / out["fifo"].metrics["mean_jct_s"] for p in ("msched", "oracle")]
                        + [flow.total_flow_s / fifo_total])
            runtimes = {j.job_id: true_runtimes(j, truth, cluster) for j in trace}
            for o in out["msched"].outcomes:
                rt = runtimes[o.job_id]
                fastest = min(rt.values())
                slower = rt[o.gpu_type] / fastest
                for key in (f"length {'< 0.5 h' if fastest < SHORT_S else '>= 0.5 h'}", f"ran on {o.gpu_type}",
                            "speed " + ("fastest type" if slower < 1.001 else "<= 1.25x" if slower <= 1.25
                                        else "<= 2x" if slower <= 2 else "> 2x") + " its fastest", "all"):
                    g = groups[key]
                    n = len(seeds)
                    g[0] += (o.end - o.submit - flow.job_flow_s[o.job_id]) / fifo_total / n
                    g[1] += (o.start - o.submit) / fifo_total / n
                    g[2] += (o.end - o.start - fastest) / fifo_total / n
                    g[3] += flow.job_flow_s[o.job_id] / fifo_total / n
                    g[4] += 1
            print(f"{name:>8} {seed:4d} | msched {rows[-1][0]:.3f} oracle {rows[-1][1]:.3f} LP bound {rows[-1][2]:.3f} "
                  "(mean JCT x fifo)", flush=True)
        print(f"{name:>8} mean | msched {statistics.mean(r[0] for r in rows):.3f} oracle "
              f"{statistics.mean(r[1] for r in rows):.3f} LP bound {statistics.mean(r[2] for r in rows):.3f}")
        print(f"{name:>8} msched's excess over the LP's per-job flow, by group (x fifo's total flow, mean over seeds):")
        print(f"{'group':>34} {'jobs':>5} {'excess':>7} {'wait':>7} {'run>fastest':>11} {'LP flow':>8}")
        for key in sorted(groups):
            g = groups[key]
            print(f"{key:>34} {g[4]:5d} {g[0]:7.3f} {g[1]:7.3f} {g[2]:11.3f} {g[3]:8.3f}")


def run_levers(names: list[str], seeds: range, levers: dict[str, RequeueLever]) -> None:
    from slurm_sim.compare import replay
    from slurm_sim.metrics import trace_bound

    print("msched with each requeue lever (after every round) against msched without and backfill fifo; "
          "cells: makespan / mean JCT x fifo, requeues")
    for name in names:
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for seed in seeds:
            trace, setup, truth, cluster = setups(name, seed)
            lb = trace_bound(trace, truth, cluster)
            fifo = replay(trace, "fifo", setup(), bound=lb).metrics
            cells = []
            for key, lever in {"today": None, **levers}.items():
                lever = replace(lever) if lever is not None else None        # fresh counters per replay
                r = replay(trace, "msched", setup(lever), bound=lb)
                ms, jct = r.metrics["makespan_s"] / fifo["makespan_s"], r.metrics["mean_jct_s"] / fifo["mean_jct_s"]
                per[key].append((ms, jct))
                cells.append(f"{key} {ms:.3f}/{jct:.3f}" + (f" {lever.requeues}" if lever else ""))
            print(f"{name:>8} {seed:4d} | " + " | ".join(cells), flush=True)
        for key, rows in per.items():
            print(f"{name:>8} mean {key}: makespan x fifo {statistics.mean(r[0] for r in rows):.3f}, "
                  f"mean JCT x fifo {statistics.mean(r[1] for r in rows):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="philly,alibaba", help="bench workloads (static, philly, alibaba, gavel)")
    ap.add_argument("--first-seed", type=int, default=1, help="seeds first..first+N-1 (tuning: 6, held-out: 1)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--split", action="store_true", help="the estimate/plan split and msched's excess by group")
    ap.add_argument("--lever", action="append", default=[], metavar="NAME=age:S;speedup:X;swap:S;delay:S;keep:1",
                    help="a requeue lever to replay (repeatable) [default: ceiling, a900s15, swap900]")
    a = ap.parse_args()
    names = [x for x in a.workloads.split(",") if x]
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    if a.split:
        run_split(names, seeds)
        return
    levers = {k: lever_from(v) for k, v in (parse_variant(x) for x in (a.lever or DEFAULT_LEVERS))}
    run_levers(names, seeds, levers)


if __name__ == "__main__":
    main()
