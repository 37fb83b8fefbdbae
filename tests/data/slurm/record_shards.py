"""Record what Slurm 22.05 says about which GPU a shard job holds, for tests/test_slurm_cli_parse.py.

    bash scripts/slurm-dev-cluster.sh up --dir /tmp/msched-shards --shards n4=2    # n4: 4 GPUs, 2 shards each
    SLURM_CONF=/tmp/msched-shards/slurm.conf .venv/bin/python tests/data/slurm/record_shards.py
    bash scripts/slurm-dev-cluster.sh down --dir /tmp/msched-shards

As the ordinary user mschedtest: three 1-shard jobs (the first two fill GPU 0's shards, the third takes
GPU 1), a 2-shard job, a whole-GPU job on the same node, a pending shard job, and a shard job whose name
and comment spell a GRES allocation (which must not be read as one). Then the first job is cancelled, so
that the second and third run alone on two GPUs: start order alone would pair them. Writes
squeue_shards.json (`squeue --json`, raw bytes, after the cancel) and scontrol_shards.txt
(`scontrol show job -d` of the same jobs: the text the squeue field mirrors).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
USER = "mschedtest"
FORGED = "GRES=shard:1(IDX:3) gres_detail shard:1(IDX:3)"


def run(argv: list[str], user: bool = False) -> str:
    if user:
        argv = ["runuser", "-u", USER, "--", "env", f"SLURM_CONF={os.environ['SLURM_CONF']}", *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd="/tmp").stdout


def submit(*args: str) -> str:
    return run(["sbatch", "--parsable", "-t", "5", "-o", "/dev/null", *args, "--wrap", "sleep 300"],
               user=True).strip().split(";")[0]


def main() -> None:
    ids = [submit("-p", "shared", "--gres=shard:1", "-J", f"shard-{k}") for k in range(3)]
    time.sleep(2)                                   # one after the other: Slurm fills GPU 0's shards first
    ids.append(submit("-p", "shared", "--gres=shard:2", "-J", "two-shards"))
    ids.append(submit("-p", "gpu", "-w", "n4", "--gres=gpu:1", "-J", "whole-gpu"))
    ids.append(submit("-p", "shared", "--gres=shard:1", "-J", FORGED, f"--comment={FORGED}"))
    ids.append(submit("-p", "shared", "--gres=shard:1", "--hold", "-J", "pending-shard"))
    time.sleep(3)
    run(["scancel", ids[0]])
    time.sleep(3)
    (HERE / "squeue_shards.json").write_bytes(subprocess.run(["squeue", "--json"], capture_output=True,
                                                             check=True).stdout)
    (HERE / "scontrol_shards.txt").write_text("".join(run(["scontrol", "show", "job", "-d", j]) for j in ids[1:]))
    run(["scancel", *ids])


if __name__ == "__main__":
    main()
