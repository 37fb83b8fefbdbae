"""msub against plain sbatch on the local Slurm cluster: what msched adds to a submission.

Interleaved runs (sbatch, msub, sbatch, msub, ...) of the same script, held jobs (`--hold`, so nothing
occupies the cluster; all cancelled at the end), wall-clock time of the whole command as a user sees it
(interpreter start included). Reports the median added milliseconds
- for a torchvision model found in the script (goal: under 100 ms), and
- for a user's own model file profiled for the first time (`file.py:factory`, a new file content each
  run so the per-user profile cache always misses: torch is imported in the profiling subprocess),
and the modules msub's hot path imports (count, and whether torch/numpy/sklearn/sqlalchemy/rich are among them).

    SLURM_CONF=.slurm-dev/slurm.conf .venv/bin/python bench/bench_msub.py [--runs 15] [--user-runs 3] [--baseline DIR]

`--baseline DIR`: DIR holds an older copy of the `msched` package (`git archive REV msched | tar -x -C DIR`);
the same msub launcher runs it through PYTHONPATH as a third command in every round, so that before and
after are measured in the same rounds, at the same load (its CPU and wall reported beside).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
HEAVY = ("torch", "torchvision", "numpy", "sklearn", "sqlalchemy", "rich")

SCRIPT = """#!/bin/sh
#SBATCH --gres=gpu:1
#SBATCH -t 10
python train.py --arch resnet50 --epochs 1
"""

USER_MODEL = """
import torch.nn as nn

def build():
    # run {n}
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 10))
"""


CPU: dict[str, list[float]] = {}


def _timed(argv: list[str], env: dict[str, str], cwd: str, label: str = "") -> tuple[float, str]:
    """Wall milliseconds of one command (and its CPU milliseconds, children included, under `label`)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    elapsed = (time.perf_counter() - t0) * 1000.0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if label:
        cpu = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000.0
        CPU.setdefault(label, []).append(cpu)
    if proc.returncode != 0:
        raise SystemExit(f"bench_msub: {' '.join(argv[:2])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed, proc.stdout.strip().split(";")[0]


def hot_path_modules(env: dict[str, str], script: Path) -> tuple[list[str], list[str]]:
    """(modules msub's decision for the benchmark's script loads beyond a bare interpreter, heavy ones
    among them), in the benchmark's own environment (site config, published free times, warm caches)."""
    code = (
        "import sys; base = set(sys.modules); from msched.msub.main import build_submission; "
        f"build_submission(['--hold', '--parsable', {str(script)!r}]); "
        f"added = sorted(set(sys.modules) - base); heavy = [m for m in {HEAVY!r} if m in sys.modules]; "
        "import json; print(json.dumps([added, heavy]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    added, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    return added, heavy


def _give(path: Path, user: str) -> None:
    """Make PATH belong to USER (when this benchmark runs as root): msub profiles only the user's own files."""
    if os.geteuid() == 0:
        import pwd
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def _model_owner(user: str, work: Path, env: dict[str, str]) -> tuple[list[str], Path | None, dict[str, str]]:
    """(argv prefix, directory, environment) for the user-model case.

    msub runs no model code as root, so as root the case runs as the ordinary account USER (the test
    suite's account by default) through runuser, in a directory of its own; without that account the
    case is skipped."""
    if os.geteuid() != 0:
        return [], work, env
    import pwd
    try:
        pwd.getpwnam(user)
    except KeyError:
        print(f"bench_msub: no account {user!r}: the user-model case is skipped (root msub profiles nothing)",
              file=sys.stderr)
        return [], None, env
    work.chmod(0o755)
    udir = work / "user"
    udir.mkdir()
    _give(udir, user)
    for sub in ("cache", "pycache"):
        (udir / sub).mkdir()
        _give(udir / sub, user)
    uenv = {**env, "XDG_CACHE_HOME": str(udir / "cache"), "PYTHONPYCACHEPREFIX": str(udir / "pycache")}
    return ["runuser", "-u", user, "--"], udir, uenv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="interleaved pairs for the torchvision case")
    ap.add_argument("--user-runs", type=int, default=3, help="pairs for the first-time user-model case")
    ap.add_argument("--sbatch", default="/usr/bin/sbatch")
    ap.add_argument("--baseline", metavar="DIR", help="an older msched package's parent directory, run "
                    "interleaved through PYTHONPATH (see the module's docstring)")
    ap.add_argument("--user", default=os.environ.get("MSCHED_TEST_USER", "mschedtest"),
                    help="ordinary account that runs the user-model case when the benchmark runs as root")
    args = ap.parse_args()

    conf = os.environ.get("SLURM_CONF") or str(REPO / ".slurm-dev" / "slurm.conf")
    if not Path(conf).exists():
        print("bench_msub: no Slurm cluster (run `make slurm-up` and export SLURM_CONF)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-msub-"))
    state = work / "state"
    state.mkdir()
    (state / "gpu_free_time.json").write_text(json.dumps(
        {"time": time.time(), "free_at": {"a100": 0, "titanv": 0, "rtx2080ti": 0, "titanxp": 0}}))
    cfg = work / "msched.toml"
    cfg.write_text(f'sbatch = "{args.sbatch}"\nstate_dir = "{state}"\n')
    env = {**os.environ, "SLURM_CONF": conf, "MSCHED_CONFIG": str(cfg), "XDG_CACHE_HOME": str(work / "cache"),
           # an installed package has its bytecode compiled (pip does it); this checkout's dev shell may
           # forbid writing .pyc, so compile into a private prefix during the warm-up runs instead
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    script = work / "train.sh"
    script.write_text(SCRIPT)
    msub = str(VENV_BIN / "msub")
    job_ids: list[str] = []
    try:
        # warm the file cache and the controller once each
        for argv in ([args.sbatch, "--hold", "--parsable", str(script)], [msub, "--hold", "--parsable", str(script)]):
            job_ids.append(_timed(argv, env, str(work))[1])
        base_env = {**env, "PYTHONPATH": os.path.abspath(args.baseline)} if args.baseline else None
        if base_env:
            job_ids.append(_timed([msub, "--hold", "--parsable", str(script)], base_env, str(work))[1])

        plain_ms, msub_ms, bare_ms, base_ms = [], [], [], []
        for _ in range(args.runs):
            bare_ms.append(_timed([sys.executable, "-c", "pass"], env, str(work), "python")[0])
            t, j = _timed([args.sbatch, "--hold", "--parsable", str(script)], env, str(work), "sbatch")
            plain_ms.append(t)
            job_ids.append(j)
            t, j = _timed([msub, "--hold", "--parsable", str(script)], env, str(work), "msub")
            msub_ms.append(t)
            job_ids.append(j)
            if base_env:
                t, j = _timed([msub, "--hold", "--parsable", str(script)], base_env, str(work), "baseline")
                base_ms.append(t)
                job_ids.append(j)

        user_plain, user_msub = [], []
        as_user, udir, uenv = _model_owner(args.user, work, env)
        for n in range(args.user_runs if udir else 0):
            model = udir / "mymodel.py"
            model.write_text(USER_MODEL.format(n=f"{n}-{time.time()}"))
            uscript = udir / "user.sh"
            uscript.write_text("#!/bin/sh\n#SBATCH --gres=gpu:1\n#MSCHED --model=mymodel.py:build\ntrue\n")
            for f in (model, uscript):
                _give(f, args.user)
            t, j = _timed([*as_user, args.sbatch, "--hold", "--parsable", str(uscript)], uenv, str(udir))
            user_plain.append(t)
            job_ids.append(j)
            t, j = _timed([*as_user, msub, "--hold", "--parsable", str(uscript)], uenv, str(udir))
            user_msub.append(t)
            job_ids.append(j)
    finally:
        if job_ids:
            subprocess.run(["scancel", *job_ids], env=env, capture_output=True, timeout=60)

    added_modules, heavy = hot_path_modules(env, script)
    med_plain, med_msub = statistics.median(plain_ms), statistics.median(msub_ms)
    added = statistics.median(m - p for m, p in zip(msub_ms, plain_ms, strict=True))
    print(f"torchvision model (resnet50 found by --arch), {args.runs} interleaved pairs:")
    print(f"  sbatch median {med_plain:.1f} ms, msub median {med_msub:.1f} ms, "
          f"added median {added:.1f} ms (ratio {med_msub / med_plain:.2f}x) -> goal < 100 ms: "
          f"{'met' if added < 100 else 'NOT met'}")
    bare = statistics.median(bare_ms)
    print(f"  of which the Python interpreter's own start (`python -c pass`, this venv): median {bare:.1f} ms; "
          f"msched's share (msub - sbatch - interpreter): {med_msub - med_plain - bare:.1f} ms")
    cpu_plain, cpu_msub = statistics.median(CPU["sbatch"]), statistics.median(CPU["msub"])
    print(f"  CPU time (user+sys, children included): sbatch median {cpu_plain:.1f} ms, msub median "
          f"{cpu_msub:.1f} ms, added {cpu_msub - cpu_plain:.1f} ms; load average now "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if base_ms:
        badded = statistics.median(b - p for b, p in zip(base_ms, plain_ms, strict=True))
        print(f"  baseline msched ({args.baseline}), same rounds: msub median {statistics.median(base_ms):.1f} ms, "
              f"added median {badded:.1f} ms; CPU median {statistics.median(CPU['baseline']):.1f} ms, added "
              f"{statistics.median(CPU['baseline']) - cpu_plain:.1f} ms")
    if user_msub:
        uadded = statistics.median(m - p for m, p in zip(user_msub, user_plain, strict=True))
        print(f"user model file, first-time profile, {args.user_runs} pairs:")
        print(f"  sbatch median {statistics.median(user_plain):.1f} ms, msub median "
              f"{statistics.median(user_msub):.1f} ms, added median {uadded:.1f} ms")
    ours = [m for m in added_modules if m.split(".")[0] == "msched"]
    others = [m for m in added_modules if m.split(".")[0] != "msched" and not m.startswith("_")]
    print(f"msub's path imports {len(added_modules)} modules beyond a bare interpreter; heavy among them: "
          f"{heavy or 'none'}; torch imported: {'torch' in heavy}")
    print(f"  msched ({len(ours)}): {' '.join(ours)}")
    print(f"  others ({len(others)}, C accelerators `_*` not listed): {' '.join(others)}")
    print(f"  re, json, csv (~6 ms of CPU together, msched.util.light) imported: "
          f"{[m for m in ('re', 'json', 'csv') if m in added_modules] or 'none'}; collections, functools, types "
          f"(~3 ms, msched.util.record and .light): "
          f"{[m for m in ('collections', 'functools', 'types') if m in added_modules] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
