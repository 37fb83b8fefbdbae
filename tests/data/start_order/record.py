"""Record the order in which the real dev cluster starts a hand-made queue (tests/test_sim.py reads it).

    bash scripts/slurm-dev-cluster.sh up --dir /tmp/sd-bf                                   # as root
    SLURM_DEV_SCHEDULER=builtin bash scripts/slurm-dev-cluster.sh up --dir /tmp/sd-builtin
    SLURM_CONF=/tmp/sd-bf/slurm.conf .venv/bin/python tests/data/start_order/record.py backfill
    SLURM_CONF=/tmp/sd-builtin/slurm.conf .venv/bin/python tests/data/start_order/record.py builtin

Submits trace.json's jobs in order (`sbatch --constraint=TYPE --gres=gpu:N --time=M --wrap "sleep S"`),
waits until all have ended, and writes `<scheduler>.json`: per job its id, start and end (epoch seconds,
from squeue) and node, plus SchedulerType as `scontrol show config` printed it. Needs an idle cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV = dict(os.environ, SLURM_TIME_FORMAT="%s")


def run(argv: list[str]) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd="/tmp", timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


def main() -> None:
    scheduler = sys.argv[1] if len(sys.argv) > 1 else ""
    if scheduler not in ("backfill", "builtin"):
        raise SystemExit("usage: record.py backfill|builtin")
    config = run(["scontrol", "show", "config"])
    sched_type = next(ln.split("=", 1)[1].strip() for ln in config.splitlines() if ln.startswith("SchedulerType"))
    if sched_type != f"sched/{scheduler}":
        raise SystemExit(f"the cluster runs {sched_type}, not sched/{scheduler}")
    if run(["squeue", "-h", "-o", "%i"]).strip():
        raise SystemExit("the cluster has jobs: record on an idle cluster")
    spec = json.loads((HERE / "trace.json").read_text())
    ids = {}
    for j in spec["jobs"]:
        ids[j["name"]] = run(["sbatch", "--parsable", "-o", "/dev/null", "-J", j["name"], f"--constraint={j['type']}",
                              f"--gres=gpu:{j['gpus']}", f"--time={j['limit_min']}",
                              f"--wrap=sleep {j['sleep_s']}"]).strip().split(";")[0]
    t0 = time.time()
    rows: dict[str, dict] = {}
    while time.time() - t0 < 900:
        out = run(["squeue", "-h", "-t", "all", "-j", ",".join(ids.values()), "-o", "%i|%T|%S|%e|%N"])
        rows = {}
        for line in out.splitlines():
            job_id, state, start, end, node = line.split("|")
            rows[job_id] = {"state": state, "start": start, "end": end, "node": node}
        if len(rows) == len(ids) and all(r["state"] in ("COMPLETED", "TIMEOUT", "FAILED", "CANCELLED")
                                         for r in rows.values()):
            break
        time.sleep(1)
    else:
        raise SystemExit("jobs did not finish within 900 s")
    result = {"scheduler_type": sched_type, "submitted_at": t0,
              "jobs": [{"name": n, "job_id": i, **rows[i]} for n, i in ids.items()]}
    for r in result["jobs"]:
        r["start"], r["end"] = float(r["start"]), float(r["end"])
    (HERE / f"{scheduler}.json").write_text(json.dumps(result, indent=1) + "\n")
    order = sorted(result["jobs"], key=lambda r: r["start"])
    print(" ".join(f"{r['name']}@{r['start'] - order[0]['start']:.0f}" for r in order))


if __name__ == "__main__":
    main()
