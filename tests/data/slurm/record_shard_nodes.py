"""Record what Slurm 22.05 says about shard nodes and shard jobs' counts, for tests/test_slurm_cli_parse.py.

    bash scripts/slurm-dev-cluster.sh up --dir /tmp/msched-shard-nodes --shards n4=2 --shards n3=4
    SLURM_CONF=/tmp/msched-shard-nodes/slurm.conf .venv/bin/python tests/data/slurm/record_shard_nodes.py
    bash scripts/slurm-dev-cluster.sh down --dir /tmp/msched-shard-nodes

The cluster: n4's 4 titanxp GPUs carry 2 shards each (8), n3's 4 rtx2080ti GPUs carry 4 each (16), as
gres.conf says (`NodeName=n4 Name=shard Count=8`, `NodeName=n3 Name=shard Count=16`); n1 and n2 share
nothing. As the ordinary user mschedtest, running: on n4 a 1-shard job and a 2-shard job, on n3 three
1-shard jobs and a 3-shard job; pending: a held 2-shard job. Writes
- sinfo_shards.txt: CliClient's sinfo call (`sinfo -h -N -O` its NODE_FIELDS), with those jobs running;
- scontrol_nodes_shards.txt: `scontrol -d show node` of n3 and n4 at the same moment (Gres, GresUsed);
- shards_cases.json: what was configured and asked (per node its GPUs and shards per GPU, per job its
  name and shard count: the parse tests derive what to expect from these, never from the parser), and
  `squeue --json`'s records of the jobs (only the fields the parser reads).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))

from msched.slurm.cli import NODE_FIELDS, SEP  # noqa: E402

USER = "mschedtest"
NODES = {"n1": {"gpus": 4, "shards_per_gpu": 0}, "n2": {"gpus": 4, "shards_per_gpu": 0},
         "n3": {"gpus": 4, "shards_per_gpu": 4}, "n4": {"gpus": 4, "shards_per_gpu": 2}}
# name -> (node, shards); a None node: held (pending)
JOBS = {"n4-one": ("n4", 1), "n4-two": ("n4", 2), "n3-one-a": ("n3", 1), "n3-one-b": ("n3", 1),
        "n3-one-c": ("n3", 1), "n3-three": ("n3", 3), "held-two": (None, 2)}
KEEP = ("job_id", "name", "job_state", "partition", "nodes", "tres_per_node", "tres_per_job", "tres_per_task",
        "gres_detail", "node_count", "tasks")


def run(argv: list[str], user: bool = False) -> str:
    if user:
        argv = ["runuser", "-u", USER, "--", "env", f"SLURM_CONF={os.environ['SLURM_CONF']}", *argv]
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd="/tmp").stdout


def main() -> None:
    ids = {}
    for name, (node, shards) in JOBS.items():
        where = ["-w", node] if node else ["--hold"]
        ids[name] = run(["sbatch", "--parsable", "-t", "5", "-o", "/dev/null", "-p", "shared", *where,
                         f"--gres=shard:{shards}", "-J", name, "--wrap", "sleep 300"], user=True).strip().split(";")[0]
        time.sleep(1)                               # one after the other: Slurm's order of filling shards
    deadline = time.time() + 60
    while time.time() < deadline:
        states = run(["squeue", "-h", "-o", "%j %T"]).split()
        if states.count("RUNNING") == len(JOBS) - 1:
            break
        time.sleep(1)
    else:
        raise SystemExit(f"not all jobs started: {states}")
    nfmt = ",".join(f"{f}:{SEP}" for f in NODE_FIELDS)
    (HERE / "sinfo_shards.txt").write_text(run(["sinfo", "-h", "-N", "-O", nfmt]))
    (HERE / "scontrol_nodes_shards.txt").write_text("".join(run(["scontrol", "-d", "show", "node", n]) for n in ("n3", "n4")))
    raw = json.loads(subprocess.run(["squeue", "--json"], capture_output=True, check=True).stdout)
    records = [{k: j.get(k) for k in KEEP} for j in raw["jobs"] if str(j.get("job_id")) in ids.values()]
    cases = {"nodes": NODES, "jobs": {n: {"node": node, "shards": s} for n, (node, s) in JOBS.items()},
             "squeue": records}
    (HERE / "shards_cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    run(["scancel", *ids.values()])


if __name__ == "__main__":
    main()
