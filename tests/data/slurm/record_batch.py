"""Record how scontrol behaves when a round's updates are batched (tests/test_slurm_batch.py reads it).

    SLURM_CONF=.slurm-dev/slurm.conf .venv/bin/python tests/data/slurm/record_batch.py   # as root

Runs on the shared dev cluster (it drains nothing): a few jobs of its own, kept pending by `--begin`
(no GPUs taken) or run briefly on one a100 GPU, all cancelled at the end. Writes scontrol_batch.json
next to this file: per probe the argv, the standard input (built with the client's own
`scontrol_update_line`), exit status, stdout, stderr, and where it matters the jobs' values read back
afterwards; `ids` says which job was which, so the tests derive what each line should have done.

What it showed on 22.05.8: scontrol with no command reads commands from standard input, runs every
line even after one failed, prints one stderr line `<reason> for job <id>` per failed job and exits 1
if any failed; `JobId=a,b,c` does the same per job; a refused Features= in one command with Priority=
still writes the priority; a priority for a running job is accepted silently.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))

from msched.slurm.cli import SEP, scontrol_update_line  # noqa: E402

ENV = dict(os.environ, SLURM_TIME_FORMAT="%s")


def run(argv, *, input=None, env=None, check=True):
    p = subprocess.run(argv, capture_output=True, text=True, env=env or ENV, cwd="/tmp", input=input, timeout=120)
    if check and p.returncode != 0:
        raise SystemExit(f"{argv}: {p.stderr}")
    return p


def sbatch(*args) -> str:
    return run(["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1", *args]).stdout.strip().split(";")[0]


def state(job_id: str) -> str:
    return run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


def wait(pred, timeout=60):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("timeout")
        time.sleep(0.1)


def values(*ids: str) -> dict[str, dict[str, str]]:
    out = run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-O",
               f"JobID:{SEP},State:{SEP},PriorityLong:{SEP},Feature:{SEP}"]).stdout
    rows = {}
    for line in out.splitlines():
        job_id, st, prio, feat = (p.strip() for p in line.split(SEP)[:4])
        rows[job_id] = {"state": st, "priority": prio, "features": feat}
    return rows


def probe(argv, lines=None, env=None, after=()) -> dict:
    text = "".join(f"{ln}\n" for ln in lines) if lines is not None else None
    p = run(argv, input=text, env=env, check=False)
    rec = {"argv": argv, "stdin": text, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
    if after:
        rec["after"] = values(*after)
    return rec


def main() -> None:
    later = "--begin=now+3600"
    ids = {
        "pending1": sbatch(later, "--constraint=titanv", "--wrap=true"),
        "pending2": sbatch(later, "--constraint=titanv", "--wrap=true"),
        "pending3": sbatch(later, "--constraint=titanv", "--wrap=true"),
        "running": sbatch("--constraint=a100", "--wrap=sleep 120"),
        "finished": sbatch("--constraint=a100", "--wrap=true"),
        "held": sbatch("--hold", "--constraint=a100", "--wrap=true"),
        "array": sbatch(later, "--array=1-2", "--constraint=titanv", "--wrap=true"),
    }
    try:
        wait(lambda: state(ids["running"]) == "RUNNING")
        wait(lambda: state(ids["finished"]) == "COMPLETED")
        p1, p2, p3, r, d, h, a = (ids[k] for k in ("pending1", "pending2", "pending3", "running", "finished",
                                                   "held", "array"))
        probes = {}
        up = scontrol_update_line
        probes["stdin_mixed"] = probe(["scontrol"], [
            up(p1, "priority", 501), up(d, "priority", 502), up(p2, "priority", 503),
            up(r, "features", "titanv"), up("999999", "priority", 504), up(h, "priority", 505),
            up(p3, "features", "nosuchfeature"), up(p3, "priority", 506),
            up(f"{a}_9", "priority", 507), up(f"{a}_1", "priority", 508),
        ], after=(p1, p2, p3, r))
        probes["stdin_features"] = probe(["scontrol"], [
            up(p1, "features", "titanv|titanxp"), up(p2, "features", ""), up(r, "features", "titanv"),
            up(p3, "features", "(titanv|titanxp)"),
        ], after=(p1, p2, p3, r))
        probes["argv_list_priority"] = probe(["scontrol", "update", f"JobId={p1},{d},{p2}", "Priority=600"],
                                             after=(p1, p2))
        probes["combined_not_atomic"] = probe(["scontrol"], [f"update JobId={p3} Features=nosuchfeature Priority=700"],
                                              after=(p3,))
        probes["priority_running_accepted"] = probe(["scontrol", "update", f"JobId={r}", "Priority=5"], after=(r,))
        probes["squeue_pending"] = probe(["squeue", "-h", "-t", "PENDING", "-O", f"JobID:{SEP}"])
        with tempfile.TemporaryDirectory(prefix="msched-record-bogus-") as tmp:
            conf = Path(os.environ["SLURM_CONF"]).read_text().splitlines()
            conf = [ln for ln in conf if not ln.startswith(("SlurmctldPort=", "MessageTimeout="))]
            (Path(tmp) / "slurm.conf").write_text("\n".join([*conf, "SlurmctldPort=9", "MessageTimeout=1"]) + "\n")
            shutil.copy(Path(os.environ["SLURM_CONF"]).parent / "gres.conf", Path(tmp) / "gres.conf")
            probes["stdin_down"] = probe(["scontrol"], [up(p1, "priority", 900), up(p2, "priority", 901)],
                                         env=dict(ENV, SLURM_CONF=str(Path(tmp) / "slurm.conf")))
        version = run(["scontrol", "--version"]).stdout.strip()
        (HERE / "scontrol_batch.json").write_text(json.dumps({"slurm": version, "ids": ids, "probes": probes},
                                                             indent=1) + "\n")
        print(f"recorded {len(probes)} probes into {HERE / 'scontrol_batch.json'}")
    finally:
        run(["scancel", *ids.values()], check=False)


if __name__ == "__main__":
    main()
