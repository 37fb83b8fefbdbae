"""Planning speed and write economy of one reorder round (issue 6's benchmark).

    python bench/bench_plan.py [--pending 10000] [--gpus 1000] [--seed 0] [--repeat 3]

A synthetic snapshot: 1,000 GPUs of the shared table's 6 types (nodes of 4 or 8 GPUs), half of them busy
with running jobs, and 10,000 pending msub jobs of the shared table's models with Philly-like sizes
(1/2/4/8 GPUs) and log-uniform lengths, priorities as Slurm's priority/basic hands them out (one less per
job). It times `policy.plan` (the snapshot is built once, as the round core does), then a second round a
minute later with 50 new jobs and the plan's priorities and types in place, and prints for both rounds (wall and CPU time: on a shared 2-core machine the CPU time is the figure
that does not depend on the neighbours)
the Slurm update calls next to the fewest possible for the same change of order (pending jobs minus the
longest run of jobs already in the planned order, plus the retyped jobs).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msched.estimate.perf_table import PerfTable  # noqa: E402
from msched.policy import get_policy  # noqa: E402
from msched.policy.priorities import fewest_moves  # noqa: E402
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob, RunningJob  # noqa: E402
from msched.rounds.core import JobView, diff_plan  # noqa: E402

TABLE = Path(__file__).resolve().parent.parent.parent / "shared/data/gpu-train-benchmarks/perf_table.csv"
TYPES = ("a100", "titanrtx", "titanv", "rtx2080ti", "titanxp", "gtx1080ti")
BASE_PRIORITY = 4_294_901_759


def per_iter_table() -> dict[str, dict[str, float]]:
    if TABLE.exists():
        perf = PerfTable.load(TABLE)
        return {m: {t: ms / 1000 for t, ms in perf.speeds(m).items()} for m in sorted(perf.models())}
    rng = random.Random(1)                       # without the shared data: a made-up but typed table
    return {f"m{i}": {t: rng.uniform(0.02, 0.2) for t in TYPES} for i in range(30)}


def snapshot(n_pending: int, n_gpus: int, seed: int) -> ClusterSnapshot:
    rng = random.Random(seed)
    table = per_iter_table()
    models = sorted(table)
    nodes, running = [], []
    per_type = n_gpus // len(TYPES)
    for t in TYPES:
        size = 8 if t in ("a100", "titanrtx") else 4
        for k in range(per_type // size):
            busy = rng.choice((0, size // 2, size))
            name = f"{t}-{k}"
            nodes.append(NodeState(name, t, size, size - busy))
            if busy:
                running.append(RunningJob(f"r-{name}", t, busy, rng.uniform(60, 36000), (name,)))
    pending = []
    for i in range(n_pending):
        m = rng.choice(models)
        g = rng.choices((1, 2, 4, 8), (0.7, 0.1, 0.15, 0.05))[0]
        iters = 10 ** rng.uniform(3, 5.5)
        est = {t: iters * s for t, s in table[m].items() if t in TYPES}
        pending.append(PendingJob(str(1000 + i), submit_time=float(i), num_gpus=g, priority=BASE_PRIORITY - i,
                                  est_runtime_s=est, time_limit_s=None, managed=True, reference=m))
    return ClusterSnapshot(now=float(n_pending), nodes=tuple(nodes), running=tuple(running),
                           pending=tuple(pending), starvation_age_s=None)


def views_of(snap: ClusterSnapshot) -> dict[str, JobView]:
    return {j.job_id: JobView(j.job_id, j.priority, "|".join(j.current_types), "", j.current_types, True)
            for j in snap.pending}


def count(snap: ClusterSnapshot, plan) -> tuple[int, int, int]:  # noqa: ANN001
    """(update calls, fewest possible, retyped jobs)."""
    updates = diff_plan(views_of(snap), plan)
    current = {j.job_id: j.priority for j in snap.pending}
    order = [d.job_id for d in plan.decisions]
    retyped = sum(1 for u in updates if u.field == "features")
    return len(updates), fewest_moves(order, current) + retyped, retyped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--gpus", type=int, default=1_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--head-jobs", type=int, default=None, help="the planner's head_jobs [default: its default]")
    args = ap.parse_args()

    snap = snapshot(args.pending, args.gpus, args.seed)
    # the greedy list schedule alone (goal <= 1 s), then the default optimizing planner (goal <= 3 s: the
    # greedy plan, then the search over the head of the queue, msched.policy.planner)
    greedy = get_policy("msched", planner="greedy")
    g_times, g_cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        greedy.plan(snap)
        g_times.append(time.perf_counter() - t0)
        g_cpu.append(time.process_time() - c0)
    print(f"greedy plan: {len(snap.pending)} pending: {min(g_times):.3f} s wall, {min(g_cpu):.3f} s CPU "
          f"(best of {args.repeat})")
    policy = get_policy("msched", **({} if args.head_jobs is None else {"head_jobs": args.head_jobs}))
    times, cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        plan = policy.plan(snap)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    calls, fewest, retyped = count(snap, plan)
    gpus = sum(n.gpus for n in snap.nodes)
    print(f"round 1: {len(snap.pending)} pending, {gpus} GPUs of {len(snap.gpu_types)} types: "
          f"plan {min(times):.3f} s wall, {min(cpu):.3f} s CPU (best of {args.repeat}), update calls {calls}, fewest possible {fewest} "
          f"({retyped} retyped), ratio {calls / max(1, fewest):.2f}")
    s = policy.last_search
    print(f"  optimizer: head {s.get('head')} jobs searched, tail {s.get('tail')} greedy; {s.get('evals')} plans "
          f"scored, improved {s.get('improved')}, timed out {s.get('timed_out')}")

    # round 2: the plan written, a minute later, 50 new jobs at the bottom of the queue
    by = plan.by_job()
    pend = [replace(j, priority=by[j.job_id].priority, current_types=by[j.job_id].gpu_types or j.current_types)
            for j in snap.pending]
    rng = random.Random(args.seed + 1)
    low = min(j.priority for j in pend)
    for k in range(50):
        src = rng.choice(snap.pending)
        pend.append(replace(src, job_id=str(900_000 + k), priority=low - 1 - k, current_types=(),
                            submit_time=snap.now + k))
    snap2 = replace(snap, now=snap.now + 60, pending=tuple(pend))
    t0, c0 = time.perf_counter(), time.process_time()
    plan2 = policy.plan(snap2)
    t2, c2 = time.perf_counter() - t0, time.process_time() - c0
    calls2, fewest2, retyped2 = count(snap2, plan2)
    print(f"round 2 (+50 jobs, 60 s later): plan {t2:.3f} s wall, {c2:.3f} s CPU, update calls {calls2}, fewest possible {fewest2} "
          f"({retyped2} retyped), ratio {calls2 / max(1, fewest2):.2f}")


if __name__ == "__main__":
    main()
