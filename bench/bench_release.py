"""`msched reorder --release` on the dev cluster: the hold and release passes against one job at a time.

Every GPU is held by a plain blocker, N jobs wait behind it with an explicit priority (as a round
leaves them); then the command-line backend's `hold_many` and `release_many` (one scontrol each, what
`--release` runs) over all of them, against `hold` + `release` per job (a process each, how `--release`
handed jobs back before) on a sample. Every job is cancelled at the end.

    SLURM_CONF=.slurm-dev/slurm.conf .venv/bin/python bench/bench_release.py [--jobs 1000] [--sample 50]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_reorder import _wait, slurm_available  # noqa: E402

from msched.config import Config  # noqa: E402
from msched.slurm.cli import CliClient  # noqa: E402


def _sbatch(*args: str) -> str:
    proc = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", *args], capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout.strip().split(";")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000, help="pending jobs to hand back (default 1000)")
    ap.add_argument("--sample", type=int, default=50, help="jobs handed back one at a time (default 50)")
    args = ap.parse_args()
    why = slurm_available()
    if why:
        print(f"skipped: {why}")
        return 0
    client = CliClient(Config())
    ids: list[str] = []
    try:
        nodes = [n for n in client.nodes() if n.gpu_type and n.usable]
        ids += [_sbatch(f"--gres=gpu:{n.gpus}", f"--nodelist={n.name}", "--wrap=sleep 3600") for n in nodes]
        blockers = set(ids)
        _wait(lambda: sum(j.is_running for j in client.jobs() if j.job_id in blockers) == len(blockers), 120,
              "the blockers to run")
        with ThreadPoolExecutor(4) as pool:
            ids += list(pool.map(lambda _: _sbatch("--gres=gpu:1", "--priority=5000", "--wrap=true"),
                                 range(args.jobs)))
        waiting = [j.job_id for j in client.jobs() if j.is_pending and j.job_id in set(ids)]
        t0 = time.perf_counter()
        held = client.hold_many(waiting)
        t1 = time.perf_counter()
        released = client.release_many(waiting)
        t2 = time.perf_counter()
        sample = waiting[: args.sample]
        for job_id in sample:
            client.hold(job_id)
            client.release(job_id)
        t3 = time.perf_counter()
        per_job = (t3 - t2) / max(1, len(sample))
        print(f"{len(waiting)} pending jobs, load {os.getloadavg()[0]:.1f}: hold pass {t1 - t0:.2f} s "
              f"({len(held)} refused), release pass {t2 - t1:.2f} s ({len(released)} refused); one at a time "
              f"{per_job * 1000:.0f} ms per job (hold + release, {len(sample)} jobs), so "
              f"{per_job * len(waiting):.1f} s for the queue, during which released jobs run on Slurm's "
              "priority while the rest still hold msched's")
        return 0
    finally:
        for k in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[k:k + 500]], capture_output=True, timeout=120)


if __name__ == "__main__":
    sys.exit(main())
