"""Cases for sbatch command-line/directive parsing, and their recording against the real sbatch.

`sbatch -v --test-only ...` prints the options sbatch ended up with ("defined options") without
submitting a job. `record()` runs every case through the real sbatch and stores what it printed in
tests/data/sbatch_parse_recorded.json; the unit tests replay that file against msched.msub.sbatch_args
(no Slurm needed), and a Slurm-marked test checks the recording still matches the installed sbatch.

Regenerate: SLURM_CONF=... .venv/bin/python tests/msub_cases.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RECORDED = Path(__file__).parent / "data" / "sbatch_parse_recorded.json"
SCRIPT = "job.sh"        # cases name the script file by this word; it is written to a temp dir

BASE = """#!/bin/sh
#SBATCH --gres=gpu:2 -J "my job" # trailing comment
#SBATCH --comment="hello world" -C titanv
#SBATCH -t 1-2:30
echo hi
#SBATCH -p ignored-after-command
"""

# (name, argv, script text or None, extra environment)
CASES: list[tuple[str, list[str], str | None, dict[str, str]]] = [
    ("directives", ["-t", "10", SCRIPT], BASE, {}),
    ("cli_overrides_script", ["--comment=cli", "-J", "cli", SCRIPT], BASE, {}),
    ("abbreviations", ["--comm=abbr", "--const=a100", "--job=abbrev", "--part=gpu", SCRIPT], BASE, {}),
    ("short_cluster_attached", ["-OJname", "-pgpu", "-t5", SCRIPT], BASE, {}),
    ("required_takes_dash_word", ["-J", "-x", SCRIPT], BASE, {}),
    ("optional_nice_does_not_take_next", ["--nice", SCRIPT, "--comment=arg"], BASE, {}),
    ("script_args_are_not_options", [SCRIPT, "--partition=x", "-J", "y"], "#!/bin/sh\ntrue\n", {}),
    ("double_dash", ["--comment=c", "--", SCRIPT, "-p", "x"], "#!/bin/sh\ntrue\n", {}),
    ("gpus_total", ["--gpus=8", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("gpus_per_node_typed", ["--gpus-per-node=a100:2", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("gpus_per_task", ["--gpus-per-task=1", "-n", "2", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("nodes_and_gres", ["-N", "2", "--gres=gpu:1", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("array_parsable", ["--array=0-3%2", "--parsable", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("or_constraint", ["-C", "a100|titanv", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("time_min_sec", ["--time=2:30", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("time_days", ["-t", "1-0", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("wrap", ["--wrap", "python train.py --arch resnet50", "-J", "w"], None, {}),
    ("directive_spacing", [SCRIPT],
     "#!/bin/bash\n\n# a comment\n  # indented comment\n#SBATCH\t--job-name=tabbed\n# SBATCH --comment=not-a-directive\n"
     "  #SBATCH --partition=indented-not-a-directive\n#SBATCH --comment=a\\\"b --constraint='x # y' # the rest is a comment -J no\nsrun true\n", {}),
    ("directive_backslash_space_splits", [SCRIPT], "#!/bin/sh\n#SBATCH --comment=a\\ b\ntrue\n", {}),
    ("directive_stops_at_word", [SCRIPT], "#!/bin/sh\n#SBATCH -J first\n#SBATCH notanoption -J second\n#SBATCH --comment=after\ntrue\n", {}),
    ("directive_quotes", [SCRIPT], "#!/bin/sh\n#SBATCH --comment \"two words\" --job-name='single q'\n#SBATCH --gres=gpu:titanv:1\ntrue\n", {}),
    ("env_overrides_script", [SCRIPT], BASE, {"SBATCH_CONSTRAINT": "a100", "SBATCH_JOB_NAME": "from-env"}),
    ("cli_overrides_env", ["-C", "rtx2080ti", SCRIPT], BASE, {"SBATCH_CONSTRAINT": "a100"}),
    ("last_occurrence_wins", ["-J", "one", "--job-name=two", "--comment=x", "--comment", "y", SCRIPT], BASE, {}),
    ("gres_list", ["--gres=gpu:a100:1,shard:2", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("exact_beats_prefix", ["--gpus=2", "--gres=gpu:1", SCRIPT], "#!/bin/sh\ntrue\n", {}),
    ("no_kill_optional_attached", ["-k", "-J", "k", SCRIPT], "#!/bin/sh\ntrue\n", {}),
]

_LINE = re.compile(r"^sbatch: (\S[^:]*?)\s*: (.*)$")


def defined_options(stderr: str) -> dict[str, str]:
    """The "defined options" block of `sbatch -v`."""
    out: dict[str, str] = {}
    inside = False
    for line in stderr.splitlines():
        if "defined options" in line and "end of" not in line:
            inside = True
            continue
        if "end of defined options" in line:
            break
        if inside and not line.startswith("sbatch: ----"):
            m = _LINE.match(line)
            if m:
                out[m.group(1).strip()] = m.group(2)
    return out


def run_case(sbatch: str, argv: list[str], script: str | None, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        if script is not None:
            Path(tmp, SCRIPT).write_text(script)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SBATCH_")}
        full_env.update(env)
        proc = subprocess.run([sbatch, "-v", "--test-only", *argv], cwd=tmp, env=full_env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    opts = defined_options(proc.stderr)
    opts.pop("verbose", None)
    opts.pop("test-only", None)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("sbatch: error: Invalid directive")]
    return {"options": opts, "invalid_directive": errors[0] if errors else None}


def record(sbatch: str = "/usr/bin/sbatch") -> list[dict]:
    out = []
    for name, argv, script, env in CASES:
        res = run_case(sbatch, argv, script, env)
        out.append({"name": name, "argv": argv, "script": script, "env": env, **res})
    return out


if __name__ == "__main__":
    data = record(sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/sbatch")
    RECORDED.parent.mkdir(parents=True, exist_ok=True)
    RECORDED.write_text(json.dumps({"sbatch": "22.05.8", "cases": data}, indent=1) + "\n")
    print(f"recorded {len(data)} cases to {RECORDED}")
