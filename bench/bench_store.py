"""The store over time: bytes a round adds, a generated month of rounds, and `msched report` on it.

    python bench/bench_store.py [--pending 1000] [--days 30] [--churn 0.01] [--retention-days 14]
                                [--json FILE]

1. Bytes per round, measured with the real reorderer on the simulator (slurm_sim, the dev cluster's
   shape, `--pending` jobs behind busy GPUs, SQLite in a temporary directory): the first round (every
   job placed), then rounds on an unchanged queue, each measured as the database's growth (after a WAL
   checkpoint) divided by the rounds.
2. A generated month: one round a minute for `--days` days at `--pending` jobs, as `record_round` and
   retention leave it: a round row per minute, a decisions row for `--churn` of the pending jobs each
   round (changed plans; with estimates on 4 GPU types), ~200 jobs a day passing through, and the
   retention's pruning (`msched.store.retention.prune`, in its batches) run as the rounds would have run
   it. Printed: the file's size before and after pruning, and the wall time of `msched report --since 7d`
   (the command, in a subprocess, `--no-slurm`) and of `--since 30d`, each the best of 3.
`generate_month` is also what tests/test_store.py checks the size bound with.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert  # noqa: E402

from msched.store.db import Store  # noqa: E402
from msched.store.retention import DAY_S, prune  # noqa: E402
from msched.store.schema import Decision, Job, Round  # noqa: E402

MSCHED = str(Path(sys.executable).with_name("msched"))    # the console script beside this interpreter
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
MODELS = ("resnet50", "vgg16", "densenet121", "resnet18", "squeezenet1_0")


def db_bytes(path: Path) -> int:
    """The database file's size with the WAL folded in."""
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return path.stat().st_size


def bytes_per_round(pending: int, rounds: int, tmp: Path, seed: int = 0) -> dict:
    """The first round's and an unchanged round's growth of the database, with the real reorderer."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_reorder as br

    from msched.config import Config
    from msched.rounds.reorder import Reorderer, open_site_store

    c, _blockers, _perf = br.busy_sim(pending, seed)
    cfg = Config(state_dir=tmp / "per-round", performance=str(br.PERF), cluster_name="bench-store", backend="cli")
    store = open_site_store(cfg)
    path = Path(store.path)
    reorderer = Reorderer(cfg, c, store, run_kind="sim", run_name="bench-store", publish=False)
    size0 = db_bytes(path)
    first = reorderer.round()
    size1 = db_bytes(path)
    writes = []
    for _ in range(rounds):
        c.advance(1)
        out = reorderer.round()
        writes.append(out.result.update_calls if out.result is not None else 0)    # None: Slurm unchanged
    size2 = db_bytes(path)
    store.dispose()
    return {"pending": pending, "first_round_bytes": size1 - size0, "first_round_writes": first.result.update_calls,
            "unchanged_rounds": rounds, "unchanged_round_bytes": (size2 - size1) / rounds,
            "unchanged_round_writes": sum(writes), "unchanged_round_writes_each": writes}


def generate_month(path: Path, *, days: int = 30, pending: int = 1000, churn: float = 0.01,
                   retention_days: float = 14.0, jobs_per_day: int = 200, seed: int = 0,
                   prune_as_rounds: bool = True) -> dict:
    """A store as a month of one-a-minute rounds leaves it (see the module docstring). Returns sizes."""
    rng = random.Random(seed)
    store = Store(f"sqlite:///{path}")
    run = store.run_id("slurm", "month", gpus=dict.fromkeys(TYPES, 4))
    end = time.time()             # the report's clock for a real run is the wall clock
    start = end - days * DAY_S
    n_jobs = days * jobs_per_day + pending
    with store.write() as s:
        rows = []
        for k in range(n_jobs):
            sub = start + (k / n_jobs) * (end - start)
            finished = k < n_jobs - pending
            t = rng.choice(TYPES)
            est = {x: round(rng.uniform(600, 20000), 3) for x in TYPES}
            rows.append({"run_id": run, "job_id": str(100000 + k), "user": f"u{k % 16}", "name": f"job{k}",
                         "model": rng.choice(MODELS), "reference": rng.choice(MODELS), "group": rng.choice(MODELS),
                         "similarity": 1.0, "flops_ratio": 1.0, "iterations": 10000, "batch_size": 12,
                         "num_gpus": rng.choice((1, 1, 2, 4)), "time_limit_s": 14400.0, "pinned_type": None,
                         "added_constraint": t, "submit_time": sub, "first_seen": sub,
                         "state": "COMPLETED" if finished else "PENDING", "planned_type": t, "est_runtime": est,
                         "start_time": sub + 3600 if finished else None,
                         "end_time": sub + 3600 + est[t] if finished else None,
                         "actual_type": t if finished else None, "planned_priority": 1000 * (n_jobs - k),
                         "writes": rng.choice((1, 2, 2, 3))})
        for k in range(0, len(rows), 900):
            s.execute(insert(Job.__table__), rows[k:k + 900])
    per_round_decisions = max(0, round(churn * pending))
    minute = 60.0
    n_rounds = int(days * DAY_S / minute)
    batch_rounds = 1440
    for b in range(0, n_rounds, batch_rounds):
        with store.write() as s:
            rnds = []
            for i in range(b, min(n_rounds, b + batch_rounds)):
                tt = start + i * minute
                busy = {x: rng.randint(3, 4) for x in TYPES}
                rnds.append({"run_id": run, "time": tt, "pending": pending, "running": 12, "changes":
                             per_round_decisions * 2, "skipped": 0, "plan_seconds": rng.uniform(0.05, 0.2),
                             "est_makespan_s": 180000.0, "busy_gpus": busy, "total_gpus": dict.fromkeys(TYPES, 4),
                             "error": None, "dry_run": 0, "moved": per_round_decisions, "held_back": 0,
                             "gain_makespan_s": 0.0, "gain_mean_end_s": 0.0, "decision_rows": per_round_decisions})
            s.execute(insert(Round.__table__), rnds)
            first_id = s.connection().exec_driver_sql("SELECT max(id) FROM rounds").scalar() - len(rnds) + 1
            decs = []
            for i, r in enumerate(rnds):
                for _ in range(per_round_decisions):
                    decs.append({"round_id": first_id + i, "job_id": str(100000 + rng.randrange(n_jobs)),
                                 "priority": rng.randrange(1, 10**7), "gpu_type": rng.choice(TYPES),
                                 "est_start": r["time"] + rng.uniform(0, 1e5),
                                 "est_runtime": {x: round(rng.uniform(600, 20000), 3) for x in TYPES},
                                 "changed": 1})
            for k in range(0, len(decs), 900):
                s.execute(insert(Decision.__table__), decs[k:k + 900])
    unpruned = db_bytes(path)
    pruned_rounds = 0
    prune_calls = 0
    if prune_as_rounds:
        while True:
            with store.write() as s:
                n = prune(s, run, end, retention_days * DAY_S)
            prune_calls += 1
            pruned_rounds += n
            if n == 0:
                break
        con = sqlite3.connect(path)
        con.execute("VACUUM")       # what an administrator runs once after the first prune of a big store
        con.close()
    store.dispose()
    return {"days": days, "pending": pending, "rounds": n_rounds, "decision_rows_per_round": per_round_decisions,
            "jobs": n_jobs, "bytes_unpruned": unpruned, "bytes": db_bytes(path), "pruned_rounds": pruned_rounds,
            "prune_calls": prune_calls, "end": end}


def time_report(path: Path, since: str, repeats: int = 3) -> tuple[float, float]:
    """Best (wall, CPU) seconds of `msched report --since SINCE` on the store (a subprocess, as an admin
    runs it). CPU time is the command's own user + system time: on a shared, loaded machine the wall
    time mostly measures the other processes."""
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run([MSCHED, "report", "--db", str(path), "--since", since, "--no-slurm"],
                              capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"msched report failed: {proc.stderr.strip()[:300]}")
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        best = (min(best[0], wall), min(best[1], cpu))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--churn", type=float, default=0.01, help="share of pending jobs whose plan changes per round")
    ap.add_argument("--retention-days", type=float, default=14.0)
    ap.add_argument("--rounds", type=int, default=20, help="unchanged rounds measured in part 1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-store-") as d:
        tmp = Path(d)
        per = bytes_per_round(args.pending, args.rounds, tmp)
        out["per_round"] = per
        print(f"real rounds (simulated cluster), {per['pending']} pending: first round {per['first_round_bytes'] / 1024:.0f} KiB "
              f"({per['first_round_writes']} Slurm writes); unchanged round {per['unchanged_round_bytes'] / 1024:.2f} KiB "
              f"({per['unchanged_round_writes']} writes in {per['unchanged_rounds']} rounds)")
        path = tmp / "month.db"
        t0 = time.perf_counter()
        month = generate_month(path, days=args.days, pending=args.pending, churn=args.churn,
                               retention_days=args.retention_days)
        gen_s = time.perf_counter() - t0
        out["month"] = month
        print(f"generated {month['days']} days, one round a minute ({month['rounds']} rounds, "
              f"{month['decision_rows_per_round']} decision rows each, {month['jobs']} jobs) in {gen_s:.0f} s: "
              f"{month['bytes_unpruned'] / 2**20:.1f} MiB before retention, {month['bytes'] / 2**20:.1f} MiB after "
              f"({args.retention_days:g} days detailed; {month['pruned_rounds']} rounds folded in {month['prune_calls']} "
              f"prune calls); {month['bytes_unpruned'] / month['days'] / 2**20:.1f} MiB per day before pruning")
        for since in ("7d", f"{args.days}d"):
            wall, cpu = time_report(path, since)
            out[f"report_{since}_s"] = {"wall": wall, "cpu": cpu}
            print(f"msched report --since {since} on it: {wall:.2f} s wall, {cpu:.2f} s CPU (best of 3, the "
                  f"whole command; load average {os.getloadavg()[0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
