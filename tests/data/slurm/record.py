"""Record real Slurm output for tests/test_slurm_cli_parse.py (run as root, against a dev cluster).

    bash scripts/slurm-dev-cluster.sh up --dir /tmp/msched-record --accounting   # private: we drain a node
    SLURM_CONF=/tmp/msched-record/slurm.conf .venv/bin/python tests/data/slurm/record.py
    bash scripts/slurm-dev-cluster.sh down --dir /tmp/msched-record

Writes, next to this file: squeue.json (CliClient's exact squeue call, `squeue --json`, raw bytes),
sinfo.txt (its sinfo call),
sacct.json (its sacct call: the cluster must run with --accounting),
jobcomp.txt (the completion file), errors.json (scontrol/sbatch/squeue messages for each failure the
client classifies) and cases.json (each job's submit argv, keyed by the job name, so the parse tests
derive what to expect from what was asked).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))

from msched.slurm.cli import NODE_FIELDS, SACCT_STATES, SEP  # noqa: E402

ENV = dict(os.environ, SLURM_TIME_FORMAT="%s")
TAG = "msched:v1;model=resnet50;ref=resnet50;group=resnet;added=a100|titanv user note with spaces"
USER = "mschedtest"

# name -> extra sbatch args; each job's expected GPU count/type follows from these.
CASES = {
    "gres-untyped": ["--gres=gpu:3", "--hold"],
    "gres-typed": ["--gres=gpu:titanv:1", "--hold"],
    "gpus-total": ["--gpus=2", "--hold"],
    "gpus-typed": ["--gpus=a100:2", "--hold"],
    "gpus-per-node": ["--gpus-per-node=2", "-N", "2", "--hold"],
    "gpus-per-node-typed": ["--gpus-per-node=titanxp:2", "-N", "2", "--hold"],
    "gpus-per-task": ["--gpus-per-task=1", "-n", "3", "--hold"],
    "gpus-per-task-typed": ["--gpus-per-task=a100:1", "--ntasks=2", "--hold"],
    "array": ["--array=1-3", "--gres=gpu:1", "--hold"],
    "or-constraint": ["--gres=gpu:1", "--constraint=a100|titanv", "--hold", f"--comment={TAG}"],
    "no-gpu": ["--hold", "--time=1-02:03:04"],
    "weird name | with pipes": ["--gres=gpu:1", "--hold"],
    "running-a100": ["--gres=gpu:2", "--constraint=a100", "--time=5"],
    "running-2nodes": ["--gres=gpu:1", "-N", "2", "--constraint=rtx2080ti|titanxp", "--time=5"],
    "completed": ["--gres=gpu:1", "--constraint=titanv", "--time=5", f"--comment={TAG}"],
    "cancelled": ["--gres=gpu:1", "--constraint=titanv", "--time=5"],
    "user-job": ["--gres=gpu:1", "--constraint=a100", "--time=5"],
}
# Hostile jobs of the ordinary user (issue 13): a comment or name holding every control byte, a whole fake
# row for the old `squeue -O` reading, bytes that are not UTF-8, a forged and a poisoned tag.
EVERY_CONTROL = "".join(chr(c) for c in range(1, 32)) + "\x7f"
FAKE_ROW = "\x1f".join(["1", "PENDING", "fake", "root", "gpu", "4000", "1", "N/A", "N/A", "1:00:00", "1", "1",
                        "N/A", "gres:gpu:1", "N/A", "a100", "", "None", TAG])
HOSTILE = {
    "hostile-control-bytes": [f"--comment=c{EVERY_CONTROL}d"],
    "hostile-fake-row": [f"--comment=x\n{FAKE_ROW}\n"],
    "hostile-not-utf8": [b"--comment=a\xff\xfe\"\\q\\u0000b \xc3\xa9"],
    "hostile-forged-tag": ["--comment=msched:v1;model=vgg16;ref=vgg16;iters=100000000"],
    "hostile-poisoned-tag": ["--comment=msched:v1;model=vgg16;bs=99999999999999999999999999"],
    f"hostile-name-{EVERY_CONTROL}\x1b[31m": [],
}
SLEEP = {"running-a100": 120, "running-2nodes": 120, "completed": 0, "cancelled": 120, "user-job": 120}


def run(argv, user=None, check=True):
    if user:
        argv = ["runuser", "-u", user, "--", "env", f"SLURM_CONF={os.environ['SLURM_CONF']}", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=ENV, cwd="/tmp")
    if check and p.returncode != 0:
        raise SystemExit(f"{argv}: {p.stderr}")
    return p


def state(job_id):
    return run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"]).stdout.strip()


def wait(pred, timeout=30):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("timeout")
        time.sleep(0.1)


def submit_cases(sleep_s: int = 30) -> dict[str, str]:
    """Submit CASES and HOSTILE (the ordinary user created first); {case name: job id}. Shared with
    record_tight.py, which records the same queue in the tight format."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        run(["useradd", "--create-home", USER])
    ids = {}
    for name, args in CASES.items():
        cmd = f"sleep {SLEEP.get(name, sleep_s)}"
        argv = ["sbatch", "--parsable", "-o", "/dev/null", f"--job-name={name}", *args, f"--wrap={cmd}"]
        ids[name] = run(argv, user=USER if name == "user-job" else None).stdout.strip().split(";")[0]
    for name, args in HOSTILE.items():
        argv = ["sbatch", "--parsable", "-o", "/dev/null", f"--job-name={name}", "--gres=gpu:1", "--hold", *args,
                "--wrap=true"]
        ids[name] = run(argv, user=USER).stdout.strip().split(";")[0]
    return ids


def main() -> None:
    ids = submit_cases()
    for name in ("running-a100", "running-2nodes", "cancelled", "user-job"):
        wait(lambda n=name: state(ids[n]) == "RUNNING")
    wait(lambda: state(ids["completed"]) == "COMPLETED")
    run(["scancel", ids["cancelled"]])
    wait(lambda: state(ids["cancelled"]) == "CANCELLED")
    run(["scontrol", "update", "nodename=n4", "state=drain", "reason=recorded for tests"])

    (HERE / "squeue.json").write_bytes(subprocess.run(["squeue", "--json"], capture_output=True, check=True,
                                                      env={k: v for k, v in ENV.items() if k != "SLURM_TIME_FORMAT"}).stdout)
    (HERE / "squeue.txt").unlink(missing_ok=True)
    nfmt = ",".join(f"{f}:{SEP}" for f in NODE_FIELDS)
    (HERE / "sinfo.txt").write_text(run(["sinfo", "-h", "-N", "-O", nfmt]).stdout)

    errors = {}
    running, done, held = ids["running-a100"], ids["completed"], ids["gres-typed"]
    probes = {
        "features_running": ["scontrol", "update", f"jobid={running}", "Features=titanv"],
        "priority_finished": ["scontrol", "update", f"jobid={done}", "priority=5"],
        "priority_invalid": ["scontrol", "update", "jobid=999999", "priority=5"],
        "priority_held": ["scontrol", "update", f"jobid={held}", "priority=5"],
        "hold_finished": ["scontrol", "hold", done],
        "sbatch_bad_feature": ["sbatch", "--gres=gpu:1", "--constraint=nosuch", "--wrap=true"],
        "sbatch_bad_partition": ["sbatch", "-p", "nosuch", "--wrap=true"],
    }
    for key, argv in probes.items():
        p = run(argv, check=False)
        errors[key] = {"argv": argv, "rc": p.returncode, "stderr": p.stderr}
    bogus = Path("/tmp/msched-record-bogus")
    bogus.mkdir(exist_ok=True)
    conf = Path(os.environ["SLURM_CONF"]).read_text().splitlines()
    conf = [ln if not ln.startswith(("SlurmctldPort=", "MessageTimeout=")) else
            ("SlurmctldPort=9" if ln.startswith("SlurmctldPort=") else "MessageTimeout=1") for ln in conf]
    (bogus / "slurm.conf").write_text("\n".join(conf) + "\n")
    shutil.copy(Path(os.environ["SLURM_CONF"]).parent / "gres.conf", bogus / "gres.conf")
    for key, argv in {"squeue_down": ["squeue", "-h"], "update_down": ["scontrol", "update", "jobid=5", "priority=3"],
                      "sbatch_down": ["sbatch", "--wrap=true"]}.items():
        p = subprocess.run(argv, capture_output=True, text=True, env=dict(ENV, SLURM_CONF=str(bogus / "slurm.conf")))
        errors[key] = {"argv": argv, "rc": p.returncode, "stderr": p.stderr}
    (HERE / "errors.json").write_text(json.dumps(errors, indent=1) + "\n")

    for job_id in ids.values():
        run(["scancel", job_id], check=False)
    run(["scontrol", "update", "nodename=n4", "state=resume"])
    wait(lambda: all(state(i) not in ("RUNNING", "PENDING", "COMPLETING") for i in ids.values()))
    loc = [ln.split("=", 1)[1] for ln in Path(os.environ["SLURM_CONF"]).read_text().splitlines()
           if ln.startswith("JobCompLoc=")][0]
    wait(lambda: all(f"JobId={i} " in Path(loc).read_text() for i in ids.values()
                     if not i.startswith(ids["array"])), timeout=15)
    shutil.copy(loc, HERE / "jobcomp.txt")
    sacct = ["sacct", "--json", "-X", "-a", "-S", "2000-01-01T00:00:00", "-E", "now", f"--state={SACCT_STATES}"]

    def sacct_out() -> bytes:
        env = {k: v for k, v in ENV.items() if k != "SLURM_TIME_FORMAT"}     # as CliClient runs it
        return subprocess.run(sacct, capture_output=True, env=env, check=True).stdout
    def missing() -> list[str]:
        out = sacct_out()
        return [i for i in ids.values() if f'"job_id": {i},'.encode() not in out]
    try:
        wait(lambda: not missing(), timeout=60)
    except SystemExit:
        raise SystemExit(f"sacct --json never listed jobs {missing()}") from None
    (HERE / "sacct.json").write_bytes(sacct_out())
    (HERE / "sacct.txt").unlink(missing_ok=True)
    (HERE / "cases.json").write_text(json.dumps({"ids": ids, "cases": CASES, "hostile": {
                                                     k: [a if isinstance(a, str) else a.decode("latin-1")
                                                         for a in v] for k, v in HOSTILE.items()}, "user": USER, "tag": TAG,
                                                 "node_types": {"n1": "a100", "n2": "titanv",
                                                                "n3": "rtx2080ti", "n4": "titanxp"}},
                                                indent=1) + "\n")
    print(f"recorded {len(ids)} jobs into {HERE}")


if __name__ == "__main__":
    main()
