"""Simulator speed: a 20,000-job online trace on 1,000 GPUs of 6 types, 60 s reorder rounds under msched,
Slurm's default scheduler (sched/backfill) simulated; and the cost of loading a trace, per line.

Prints wall and CPU seconds, jobs/s and rounds/s measured in this one run (and the makespan ratio to
fifo when --fifo is given); the trace's lower bound (an LP, as `msched sim` computes it once per trace)
is computed once before the policies and timed on its own. `--planner greedy` runs msched with the
greedy plan instead of the optimizing planner. `--full` also runs 100,000 jobs. The goal (issues 4 and
17): 20k jobs on 1,000 GPUs in under a minute. On a shared machine the CPU seconds are the figure that
does not depend on the neighbours (the wall time does).
The trace-load part writes a valid trace of `--load-lines` lines (100,000; 1,000,000 with --full), loads
it with the simulator's reader (truth and cluster checks on) and prints seconds and peak Python memory
per line and for 1M lines (the goal, issue 13: a 1M-line trace loads in < 120 s and < 2 GB).

    .venv/bin/python bench/bench_sim.py [--jobs 20000] [--full] [--fifo] [--policy msched] [--planner greedy]
                                        [--load-lines N] [--rounds-anew] [--cuts-anew] [--cuts12-anew] [--cuts13-anew]
                                        [--cuts14-anew] [--cuts15-anew] [--cuts16-anew] [--search-work N] [--search-min-head N] [--settled-work F]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from msched.estimate.perf_table import PerfTable  # noqa: E402
from slurm_sim.cluster import parse_cluster  # noqa: E402
from slurm_sim.commands import default_truth_path  # noqa: E402
from slurm_sim.compare import Classifier, SimSetup, replay  # noqa: E402
from slurm_sim.metrics import trace_bound  # noqa: E402
from slurm_sim.trace import default_philly_path, load_trace, synth, write_trace  # noqa: E402

# 1,000 GPUs over the six types of the shared table (titanv and gtx1080ti: fewer models measured)
CLUSTER = "a100:8x25,titanrtx:8x25,rtx2080ti:8x25,titanxp:8x25,titanv:8x13,gtx1080ti:8x12"
FALLBACK_REFERENCES = ("resnet50", "resnext50_32x4d", "vgg16", "densenet121", "mobilenet_v2", "shufflenet_v2_x1_0",
                       "squeezenet1_1", "mnasnet1_0")


def knowledge(truth: PerfTable) -> tuple[PerfTable, list[str] | None]:
    perf_path = ROOT / "msched" / "data" / "gpu_performance.csv"
    if perf_path.exists():
        return PerfTable.load(perf_path), None
    refs = [r for r in FALLBACK_REFERENCES if truth.has_model(r)]
    return PerfTable([r for r in truth.rows if r.model in refs]), refs


def online_trace(n: int, truth: PerfTable, cluster, seed: int, load: float):
    """Poisson arrivals whose mean gap makes the offered load about `load` of the cluster."""
    models = sorted(truth.models())
    philly = default_philly_path()
    cap = max(cluster.max_gpus(t) for t in cluster.gpu_types)
    static = synth(n, models, truth, seed=seed, arrival="static", philly=philly, max_gpus=min(8, cap), cluster=cluster)
    work = 0.0
    for j in static:
        per = sorted(ms for ms in (truth.iter_ms(j.model, t, j.num_gpus, j.batch_size) for t in cluster.gpu_types) if ms)
        work += j.num_gpus * j.iterations * per[len(per) // 2] / 1000.0
    gap = work / (n * cluster.total_gpus * load)
    return synth(n, models, truth, seed=seed, arrival=f"poisson:{gap:.3f}", philly=philly, max_gpus=min(8, cap),
                 cluster=cluster), gap


def run(n: int, policies: list[str], seed: int, load: float, planner: str | None = None,
        settled_work: float | None = None) -> None:
    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster(CLUSTER)
    perf, refs = knowledge(truth)
    t0 = time.perf_counter()
    trace, gap = online_trace(n, truth, cluster, seed, load)
    t_trace = time.perf_counter() - t0
    options: dict = {"planner": planner} if planner else {}
    if settled_work is not None:
        options["settled_work"] = settled_work
    setup = SimSetup(cluster, truth, perf, Classifier(refs, perf), round_s=60.0, policy_options=options)
    t0, c0 = time.perf_counter(), time.process_time()
    bound = trace_bound(trace, truth, cluster)
    t_bound, c_bound = time.perf_counter() - t0, time.process_time() - c0
    print(f"{n} jobs, {cluster.total_gpus} GPUs of {len(cluster.gpu_types)} types, mean gap {gap:.1f} s "
          f"(offered load {load:.0%}), trace built in {t_trace:.1f} s, lower bound (LP) in {t_bound:.1f} s "
          f"wall, {c_bound:.1f} s CPU")
    base = None
    for p in policies:
        label = f"{p}/{planner}" if planner and p in ("msched", "oracle") else p
        t1, c1 = time.perf_counter(), time.process_time()
        res = replay(trace, p, setup, bound=bound)
        wall, cpu = time.perf_counter() - t1, time.process_time() - c1
        m = res.metrics
        base = m["makespan_s"] if p == "fifo" else base
        ratio = f", makespan x fifo {m['makespan_s'] / base:.3f}" if base and m["makespan_s"] and p != "fifo" else ""
        done = (f"simulated {m['makespan_s'] / 86400:.1f} days, mean JCT {m['mean_jct_s'] / 3600:.2f} h{ratio}"
                if m["makespan_s"] is not None else f"{m['unfinished']} of {m['submitted']} job(s) UNFINISHED")
        print(f"  {label:15s} wall {wall:6.1f} s, CPU {cpu:6.1f} s | {n / wall:6.0f} jobs/s | rounds {res.rounds:6d} "
              f"({res.rounds / wall:6.1f} rounds/s, {res.rounds_skipped} skipped; round core {m['round_seconds']:.1f} s "
              f"of which plan() {res.plan_seconds:.1f} s) | {done}")


def trace_load(lines: int, seed: int = 1) -> None:
    """Seconds and peak memory to load a valid `lines`-line trace; per line and scaled to 1M lines."""
    import gc
    import random
    import tempfile
    import tracemalloc

    from slurm_sim.trace import TraceJob, gap_free

    truth = PerfTable.load(default_truth_path())
    cluster = parse_cluster(CLUSTER)
    models = sorted(m for m in truth.models() if all(gap_free(truth, cluster, m, g, 12) for g in (1, 2, 4, 8)))
    rng = random.Random(seed)
    jobs = [TraceJob(str(i), i * 0.5, f"u{rng.randrange(200):03d}", models[rng.randrange(len(models))],
                     rng.choice((1, 2, 4, 8)), 12, rng.randrange(100, 1_000_000), None,
                     rng.choice((3600.0, 14400.0, 86400.0))) for i in range(lines)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        write_trace(path, jobs)
        size = path.stat().st_size
        del jobs
        gc.collect()
        t0 = time.perf_counter()
        loaded = load_trace(path, truth, cluster)          # timed on its own: tracemalloc slows allocation
        wall = time.perf_counter() - t0
        del loaded
        gc.collect()
        tracemalloc.start()
        loaded = load_trace(path, truth, cluster)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    per_us, per_b = wall / lines * 1e6, peak / lines
    print(f"trace load: {len(loaded)} lines ({size / 1e6:.0f} MB CSV) in {wall:.1f} s, peak {peak / 1e6:.0f} MB "
          f"(tracemalloc) | {per_us:.1f} us and {per_b:.0f} B per line | 1M lines at that rate: "
          f"{per_us:.0f} s and {per_b / 1e3:.2f} GB (goal < 120 s, < 2 GB)")



def rounds_anew() -> None:
    """Switch off what a round keeps from the last one (planner10; each checked against this plain path in
    tests/test_fast_paths.py): the same schedule, read and built anew every round."""
    import msched.policy.base as base
    import msched.policy.timeline as timeline
    import msched.rounds.core as core

    core._NodeMemo.keep = False
    core._JobMemo.inline = False
    timeline.SHIFT_BASE = False
    base.PossibleTypes.keep = False


def cuts_anew() -> None:
    """Switch off planner11's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): starts on a booked type from a heap, free times from a pass over the nodes,
    shard_view and packing_round called without shard partitions, the simple bound through its instance,
    backfill's profiles from a pass over the active jobs, candidate types in the order given, the site's
    spec table read every round. (construct's per-queue decode entries have no switch.)"""
    import msched.policy.bound as bound
    import msched.policy.msched as msched_policy
    import msched.policy.timeline as timeline
    import msched.rounds.core as core
    import slurm_sim.compare as compare
    import slurm_sim.simulator as simulator

    timeline.Timeline.scan_dirty = False
    timeline.Timeline.free_at_from_starts = False
    core.SKIP_SHARDLESS = False
    bound.SIMPLE_FAST = False
    simulator.KEPT_ENDS = False
    msched_policy.FASTEST_FIRST = False
    compare.KEEP_USABLE_MEMORY = False


def cuts12_anew() -> None:
    """Switch off planner12's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): every candidate of the search decoded whole (no prefix resumed from the plan it
    moved from); a pristine timeline's starts from a heap built beside its sorted keys."""
    import msched.policy.planner as planner
    import msched.policy.timeline as timeline

    planner.PREFIX_RESUME = False
    timeline.Timeline.sorted_pristine = False


def cuts13_anew() -> None:
    """Switch off planner13's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): a new base timeline's unchanged node lists copied from the last base."""
    import msched.policy.timeline as timeline

    timeline.SHARE_LISTS = False


def cuts14_anew() -> None:
    """Switch off planner14's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): squeue's and sinfo's views looked up for every job and node each round (no
    kept list, no delta handed to the round), every job of the round looked up in the snapshot's memo, and
    the snapshot's GPUs per type counted over its nodes."""
    import msched.rounds.core as core
    import slurm_sim.client as client

    client.KEEP_JOB_LIST = False
    core.KEEP_DELTA = False
    core.KEEP_TOTALS = False


def cuts15_anew() -> None:
    """Switch off planner15's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): a decode's starts on a type it booked read by a scan however many nodes it
    booked; the per-queue memos' entries computed per memo; the shifted base timeline found by passes over
    every running job and node; backfill's node profiles all built at each pass's start."""
    import msched.policy.msched as msched_policy
    import msched.policy.timeline as timeline
    import slurm_sim.simulator as simulator

    timeline.Timeline.scan_dirty_max = None
    msched_policy.SHARE_ENTRIES = False
    timeline.SHIFT_FAST = False
    simulator.LAZY_PROFILES = False


def cuts16_anew() -> None:
    """Switch off planner16's plan-identical cuts (each checked against this plain path in
    tests/test_fast_paths.py): backfill's search for a job's earliest start reads every node of its classes
    even after one starts it now; the planner's CP-SAT question computes the simple bound without trying the
    running jobs' latest end first."""
    import msched.policy.planner as planner
    import slurm_sim.simulator as simulator

    simulator.STOP_AT_NOW = False
    planner.RUNNING_BOUND_FIRST = False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--full", action="store_true", help="also 100,000 jobs")
    ap.add_argument("--fifo", action="store_true", help="run fifo first and print msched's ratio to it")
    ap.add_argument("--policy", default="msched", help="comma-separated policies [msched]")
    ap.add_argument("--planner", choices=("optimize", "greedy"), default=None,
                    help="msched's planner (default: the policy's, the optimizing one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--load", type=float, default=0.85, help="offered load (fraction of the cluster)")
    ap.add_argument("--load-lines", type=int, default=None,
                    help="lines of the trace-load measurement [100,000; 1,000,000 with --full]; 0 skips it")
    ap.add_argument("--rounds-anew", action="store_true",
                    help="the round's readings kept from the last round switched off (node memo, shifted base "
                         "timeline, inlined kept views, PossibleTypes): the plain path, for an on/off pair")
    ap.add_argument("--cuts-anew", action="store_true",
                    help="planner11's plan-identical cuts switched off (see cuts_anew): the other half of a pair")
    ap.add_argument("--cuts12-anew", action="store_true",
                    help="planner12's plan-identical cuts switched off (see cuts12_anew)")
    ap.add_argument("--cuts13-anew", action="store_true",
                    help="planner13's plan-identical cuts switched off (see cuts13_anew)")
    ap.add_argument("--cuts14-anew", action="store_true",
                    help="planner14's plan-identical cuts switched off (see cuts14_anew)")
    ap.add_argument("--cuts15-anew", action="store_true",
                    help="planner15's plan-identical cuts switched off (see cuts15_anew)")
    ap.add_argument("--cuts16-anew", action="store_true",
                    help="planner16's plan-identical cuts switched off (see cuts16_anew)")
    ap.add_argument("--search-work", type=int, default=None,
                    help="the optimizing planner's search budget in decode steps (msched.policy.planner.SEARCH_WORK)")
    ap.add_argument("--search-min-head", type=int, default=None,
                    help="no search for fewer free pending jobs (msched.policy.planner.SEARCH_MIN_HEAD, 2; more "
                         "changes plans)")
    ap.add_argument("--settled-work", type=float, default=None,
                    help="msched's settled_work option: the share of the search budget a head pending since "
                         "earlier rounds gets (msched.policy.planner; changes plans)")
    a = ap.parse_args()
    if a.search_min_head is not None:
        import msched.policy.planner as planner

        planner.SEARCH_MIN_HEAD = a.search_min_head
    if a.rounds_anew:
        rounds_anew()
    if a.cuts_anew:
        cuts_anew()
    if a.cuts12_anew:
        cuts12_anew()
    if a.cuts13_anew:
        cuts13_anew()
    if a.cuts14_anew:
        cuts14_anew()
    if a.cuts15_anew:
        cuts15_anew()
    if a.cuts16_anew:
        cuts16_anew()
    if a.search_work is not None:
        import msched.policy.planner as planner

        planner.SEARCH_WORK = a.search_work
    lines = a.load_lines if a.load_lines is not None else (1_000_000 if a.full else 100_000)
    if lines:
        trace_load(lines, a.seed)
    policies = (["fifo"] if a.fifo else []) + [p for p in a.policy.split(",") if p]
    if a.jobs and policies:
        run(a.jobs, policies, a.seed, a.load, a.planner, a.settled_work)
    if a.full and policies:
        run(100_000, policies, a.seed, a.load, a.planner, a.settled_work)


if __name__ == "__main__":
    main()
