"""Record how Slurm 22.05's multifactor priority treats msched's two possible levers (issue 13 item 4):
an explicit priority (`scontrol update priority=N`) and a nice offset (`scontrol update nice=N`), on a
private dev cluster with age weighting on. Run as root:

    .venv/bin/python tests/data/slurm/record_priority_levers.py     # ~3 minutes; writes priority_levers.json

Jobs (all pending behind blockers): plain P submitted first, then M_prio (given an explicit priority just
below P's) and M_nice (given a nice offset that puts it just below P), then plain Q. The priorities of
all four are sampled as the age factor grows; tests/test_trust.py reads the recording.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
DIR = Path("/tmp/msched-priority-levers")
SCRIPT = REPO / "scripts" / "slurm-dev-cluster.sh"


def run(argv, check=True):
    p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": str(DIR / "slurm.conf")})
    if check and p.returncode != 0:
        raise SystemExit(f"{argv}: {p.stderr}")
    return p.stdout


def prios(ids):
    out = run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %Q %y"])
    return {i: (int(q), int(n)) for i, q, n in (ln.split() for ln in out.splitlines())}


def main() -> None:
    subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(DIR)], capture_output=True)
    subprocess.run(["bash", str(SCRIPT), "up", "--dir", str(DIR)], check=True, capture_output=True)
    conf = (DIR / "slurm.conf").read_text()
    conf = re.sub(r"PriorityWeightAge=0", "PriorityWeightAge=60000\nPriorityMaxAge=0-00:10:00\n"
                  "PriorityCalcPeriod=1\nPriorityFavorSmall=NO", conf)
    (DIR / "slurm.conf").write_text(conf)
    run(["scontrol", "reconfigure"])
    time.sleep(2)
    sub = ["sbatch", "--parsable", "--output=/dev/null", "--time=60"]
    blockers = [run([*sub, "--gres=gpu:4", f"--nodelist={n}", "--wrap=sleep 900"]).strip() for n in ("n1", "n2", "n3", "n4")]
    p = run([*sub, "--gres=gpu:1", "--job-name=P", "--wrap=true"]).strip()
    time.sleep(20)
    m_prio = run([*sub, "--gres=gpu:1", "--job-name=M_prio", "--wrap=true"]).strip()
    m_nice = run([*sub, "--gres=gpu:1", "--job-name=M_nice", "--wrap=true"]).strip()
    time.sleep(20)
    q = run([*sub, "--gres=gpu:1", "--job-name=Q", "--wrap=true"]).strip()
    ids = [p, m_prio, m_nice, q]
    time.sleep(65)                              # one PriorityCalcPeriod: ages are counted
    start = prios(ids)
    # put both managed jobs just above Q and below P, one with each lever (as a round would)
    target = (start[p][0] + start[q][0]) // 2
    run(["scontrol", "update", f"jobid={m_prio}", f"priority={target}"])
    run(["scontrol", "update", f"jobid={m_nice}", f"nice={start[m_nice][0] - target}"])
    samples = [{"t": 0.0, "prio": prios(ids)}]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 130:
        time.sleep(32)
        samples.append({"t": round(time.monotonic() - t0, 1), "prio": prios(ids)})
    (HERE / "priority_levers.json").write_text(json.dumps({
        "jobs": {"P": p, "M_prio": m_prio, "M_nice": m_nice, "Q": q}, "before": start, "target": target,
        "samples": samples, "config": "PriorityWeightAge=60000 PriorityMaxAge=10min PriorityCalcPeriod=1"},
        indent=1) + "\n")
    run(["scancel", *blockers, *ids], check=False)
    subprocess.run(["bash", str(SCRIPT), "down", "--dir", str(DIR)], capture_output=True)
    print(json.dumps(samples, indent=1))


if __name__ == "__main__":
    sys.exit(main())
