"""Record the tight queue read beside `squeue --json` for tests/test_tight_queue.py (root, a dev cluster).

    bash scripts/slurm-dev-cluster.sh up --dir /tmp/msched-record-tight
    SLURM_CONF=/tmp/msched-record-tight/slurm.conf .venv/bin/python tests/data/slurm/record_tight.py
    bash scripts/slurm-dev-cluster.sh down --dir /tmp/msched-record-tight

Submits record.py's jobs (every TRES form, arrays, running, completed, cancelled, the ordinary user's
hostile comments and names) and the ones that test the widths: names and comments of Slurm's longest
(1,024 bytes), a multibyte character cut by the width, trailing spaces, a literal `(null)`, a negative
nice, no time limit, a root-set admin comment. Then reads, back to back, until two rounds agree:
- squeue_tight.bin: CliClient's first read (`squeue -h -t all -O <NARROW>`, raw bytes);
- squeue_tight_wide.bin: its second read of the jobs the first cut (`-j <ids> -O <WIDE>`);
- squeue_tight.json: `squeue --json` at the same moment;
- squeue_digest.bin: the light round's digest squeue (`-S i -O <DIGEST_JOB_FIELDS>`) at the same moment;
- tight_cases.json: the job ids and the cut ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent))
sys.path.insert(0, str(HERE))

from record import ENV, USER, run, state, submit_cases, wait  # noqa: E402

from msched.config import Config  # noqa: E402
from msched.slurm.cli.parsers import DIGEST_JOB_FIELDS, SEP  # noqa: E402
from msched.slurm.cli.tight import NARROW, WIDE, parse_tight, tight_format  # noqa: E402

WIDTHS = {
    "name-1024": ["--job-name=" + "n" * 1024],
    "name-utf8-cut": ["--job-name=" + "a" * 95 + "\u00e9\u00e9"],           # é straddles byte 96
    "comment-1024": ["--comment=" + "msched:v1;model=resnet50 " + "c" * 998],
    "comment-trailing-spaces": ["--comment=msched:v1;model=resnet50 note   "],
    "comment-null": ["--comment=(null)"],
    "comment-newlines-utf8": ["--comment=a\nb|\u00e9\u20ac\U0001f600 \x1f\n"],
    "features-long": ["--constraint=" + "|".join(["a100", "titanv", "rtx2080ti", "titanxp"] * 8)],
    "nice-negative": ["--nice=-7"],
    "no-limit": ["--time=UNLIMITED"],
    "admin-comment": [],
}


def reads() -> tuple[bytes, bytes, bytes, list[str], bytes]:
    config = Config()
    narrow = run_bytes(["squeue", "-h", "-t", "all", "-O", tight_format(NARROW)])
    first = parse_tight(narrow, config, {})
    assert first is not None, "the narrow read was refused"
    cut = first[1]
    wide = run_bytes(["squeue", "-h", "-t", "all", "-j", ",".join(cut), "-O", tight_format(WIDE)]) if cut else b""
    doc = subprocess.run(["squeue", "--json"], capture_output=True, check=True,
                         env={k: v for k, v in ENV.items() if k != "SLURM_TIME_FORMAT"}).stdout
    digest = run_bytes(["squeue", "-h", "-t", "all", "-S", "i", "-O",
                        ",".join(f"{f}:{SEP}" for f in DIGEST_JOB_FIELDS)])
    return narrow, wide, doc, cut, digest


def run_bytes(argv: list[str]) -> bytes:
    return subprocess.run(argv, capture_output=True, check=True, env=ENV).stdout


def main() -> None:
    ids = submit_cases(300)
    for name, args in WIDTHS.items():
        named = [] if any(a.startswith("--job-name=") for a in args) else [f"--job-name={name}"]
        argv = ["sbatch", "--parsable", "-o", "/dev/null", *named, "--gres=gpu:1", "--hold", *args, "--wrap=true"]
        ids[name] = run(argv, user=None if name in ("nice-negative", "admin-comment") else USER).stdout.strip()
    run(["scontrol", "update", f"jobid={ids['admin-comment']}", "AdminComment=msched:v1;model=vgg16 stamped  "])
    ids["dependency"] = run(["sbatch", "--parsable", "-o", "/dev/null", "--job-name=dependency", "--gres=gpu:1",
                             f"--dependency=afterok:{ids['no-limit']}", "--wrap=true"], user=USER).stdout.strip()
    for name in ("running-a100", "running-2nodes", "cancelled", "user-job"):
        wait(lambda n=name: state(ids[n]) == "RUNNING")
    wait(lambda: state(ids["completed"]) == "COMPLETED")
    run(["scancel", ids["cancelled"]])
    wait(lambda: state(ids["cancelled"]) == "CANCELLED")
    last = None
    for _ in range(10):
        now = reads()
        if last is not None and now == last:
            break
        last = now
    else:
        raise SystemExit("the queue kept changing between reads")
    narrow, wide, doc, cut, digest = now
    (HERE / "squeue_digest.bin").write_bytes(digest)
    (HERE / "squeue_tight.bin").write_bytes(narrow)
    (HERE / "squeue_tight_wide.bin").write_bytes(wide)
    (HERE / "squeue_tight.json").write_bytes(doc)
    (HERE / "tight_cases.json").write_text(json.dumps({"ids": ids, "cut": cut, "narrow": list(NARROW),
                                                       "wide": list(WIDE)}, indent=1) + "\n")
    for job_id in ids.values():
        run(["scancel", job_id], check=False)
    print(f"recorded {len(ids)} jobs ({len(cut)} read again wide) into {HERE}")


if __name__ == "__main__":
    main()
