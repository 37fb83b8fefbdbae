"""msched's Slurm plugin against plain sbatch and msub: what it adds to a submission, in one run.

On the dev cluster started with `scripts/slurm-dev-cluster.sh up --plugins`, interleaved submissions
(plain, plugin, msub, plain, plugin, msub, ...) of the same held job (`--hold`; all cancelled at the
end), wall-clock time of the whole command as a user sees it:
- plain sbatch: the same cluster through a copy of slurm.conf without CliFilterPlugins (the
  controller's job_submit.lua still runs, as it does for every job there);
- the plugin: plain `sbatch`, cli_filter.lua asking the user's resident decider (msched.plugin.resident,
  started by the warm-up's first submission) over its Unix socket;
- the plugin's one-shot path: the same, with no decider to ask (as on a host without LuaSocket):
  cli_filter.lua runs msched's decision in a new `python -m msched.plugin.filter`;
- msub: `msub` calling the real sbatch through the filter-less copy.
Every client runs as an ordinary user (--user; root's submissions never get a decider), as on a site.
Jobs: a resnet50 training job (tagged), with fresh free times published by a reorder round (the
normal state of a site) and without (the decision then reads the queue once, to spread a burst), and
a job msched knows nothing about (untagged: the filter sees that in Lua and starts no process). The
start of a bare `python -I -c pass` is measured in the same run: the floor of any Python entry point. Also the controller side: job_submit.lua's slurm_job_submit on
a tagged job, timed in Lua 5.1 (the interpreter slurmctld embeds) over many calls.

    .venv/bin/python bench/bench_plugin.py [--runs 21] [--dir .slurm-dev-plugins] [--user mschedtest] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TAGGED = "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH -t 10\npython train.py --arch resnet50 --epochs 1\n"
# (label, script, whether the reorderer published fresh free times: without them msched's decision reads
# the queue once per submission to spread a burst, one squeue call)
CASES = (
    ("resnet50, fresh round (tagged)", TAGGED, True),
    ("resnet50, no round (tagged)", TAGGED, False),
    ("no model (untagged)", "#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH -t 10\n./simulate --steps 100\n", False),
)
TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")
LUA_LOOP = """
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002, log_info = function() end }
dofile(arg[1])
local n = tonumber(arg[2])
local comment = "msched:v1;model=resnet50;ref=resnet50;group=resnet;sim=1;flops=1;iters=20000;bs=64;added=a100|titanv;ver=0.1.0 my run"
local t0 = os.clock()
for i = 1, n do
    local job = { comment = comment, features = "ib", min_nodes = 1 }
    slurm_job_submit(job, {}, 1001)
end
io.write(string.format("%.3f\\n", (os.clock() - t0) / n * 1e6))
"""


USER: pwd.struct_passwd | None = None          # the ordinary user every client runs as (when we are root)


def _as_user() -> dict:
    if USER is None:
        return {}
    return {"user": USER.pw_uid, "group": USER.pw_gid, "extra_groups": []}


CPU: dict[str, list[float]] = {}               # client -> CPU ms of each measured submission (its processes)


def _cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def _decider_cpu_ms(lock: Path) -> float | None:
    """CPU ms the user's decider and its reaped spares have used so far (/proc: clock ticks)."""
    try:
        pid = int(lock.read_text().strip())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return None
    return sum(int(f) for f in fields[11:15]) * 1000.0 / os.sysconf("SC_CLK_TCK")


def _timed(argv: list[str], env: dict[str, str], cwd: str, cpu: list[float] | None = None) -> tuple[float, str]:
    c0 = _cpu_ms()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, **_as_user())
    elapsed = (time.perf_counter() - t0) * 1000.0
    if cpu is not None:
        cpu.append(_cpu_ms() - c0)
    if proc.returncode != 0:
        raise SystemExit(f"bench_plugin: {' '.join(argv[:2])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed, proc.stdout.strip().split(";")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21, help="interleaved triples per script")
    ap.add_argument("--quick", action="store_true", help="7 triples")
    ap.add_argument("--full", action="store_true", help="the default sizes")
    ap.add_argument("--dir", type=Path, default=REPO / ".slurm-dev-plugins", help="the --plugins dev cluster")
    ap.add_argument("--lua-calls", type=int, default=20000)
    ap.add_argument("--user", default=os.environ.get("MSCHED_TEST_USER", "mschedtest"),
                    help="the ordinary user the clients run as when this runs as root (must exist and reach the venv)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    runs = 7 if args.quick else args.runs
    global USER
    if os.geteuid() == 0:
        try:
            USER = pwd.getpwnam(args.user)
        except KeyError:
            raise SystemExit(f"bench_plugin: no user {args.user!r} (useradd --create-home {args.user}, or --user)") from None
    conf = args.dir / "slurm.conf"
    cluster = [str(REPO / "scripts" / "slurm-dev-cluster.sh"), "--dir", str(args.dir)]
    up = subprocess.run(["bash", cluster[0], "up", *cluster[1:], "--plugins"], capture_output=True, text=True,
                        timeout=600, env={**os.environ, "MSCHED_PYTHON": sys.executable})
    if up.returncode != 0:
        raise SystemExit(f"bench_plugin: cannot start the --plugins dev cluster: {up.stderr.strip()[-300:]}")
    started = "already running" not in up.stderr
    try:
        return _bench(args, conf, runs)
    finally:
        if started:
            subprocess.run(["bash", cluster[0], "down", *cluster[1:]], capture_output=True, timeout=120)


def _bench(args: argparse.Namespace, conf: Path, runs: int) -> int:
    from msched.plugin import resident

    work = tempfile.mkdtemp(prefix="bench-plugin-")
    os.chmod(work, 0o755)
    plain_conf = Path(work) / "slurm.conf"
    plain_conf.write_text("".join(ln for ln in conf.read_text().splitlines(keepends=True)
                                  if not ln.startswith("CliFilterPlugins=")))
    os.chmod(plain_conf, 0o644)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SLURM_", "MSCHED_"))}
    if USER is not None:
        base.update(HOME=USER.pw_dir, USER=USER.pw_name, LOGNAME=USER.pw_name)
    # the user's msched cache (the decider's socket lives there), and one whose socket path would be too
    # long for a Unix socket: cli_filter.lua then takes the one-shot path, as without LuaSocket
    cache = Path(work) / "cache"
    one_shot_cache = Path(work) / ("c" * 110)
    for d in (cache, one_shot_cache):
        d.mkdir(mode=0o700)
        if USER is not None:
            os.chown(d, USER.pw_uid, USER.pw_gid)
    msub = str(VENV_BIN / "msub")
    ids: list[str] = []
    results: dict[str, dict[str, float]] = {}
    env_plain = {**base, "SLURM_CONF": str(plain_conf)}
    clients = ("plain", "plugin", "one-shot", "msub")
    try:
        for label, text, fresh in CASES:
            state = Path(work) / ("fresh" if fresh else "none")
            state.mkdir(exist_ok=True)
            os.chmod(state, 0o755)
            if fresh:
                now = time.time()
                (state / "gpu_free_time.json").write_text(json.dumps({"time": now, "free_at": dict.fromkeys(TYPES, now)}))
            (state / "msched.toml").write_text(f'state_dir = "{state}"\n')
            site = {**base, "MSCHED_CONFIG": str(state / "msched.toml"), "MSCHED_CACHE_DIR": str(cache)}
            env_plain = {**site, "SLURM_CONF": str(plain_conf)}
            env_for = {"plain": env_plain, "plugin": {**site, "SLURM_CONF": str(conf)},
                       "one-shot": {**site, "SLURM_CONF": str(conf), "MSCHED_CACHE_DIR": str(one_shot_cache)},
                       "msub": env_plain}
            argv_for = {"plain": ["sbatch"], "plugin": ["sbatch"], "one-shot": ["sbatch"], "msub": [msub]}
            script = Path(work) / "job.sh"
            script.write_text(text)
            os.chmod(script, 0o644)
            # warm-up: caches (sinfo, page cache, the user's msched cache) as on a busy site; the first
            # plugin submission leaves the user's decider running
            for name in ("msub", "plugin", "one-shot", "plain", "plugin"):
                ids.append(_timed([*argv_for[name], "--hold", "--parsable", str(script)], env_for[name], work)[1])
            times: dict[str, list[float]] = {name: [] for name in (*clients, "python")}
            cpu: dict[str, list[float]] = {name: [] for name in clients}
            lock = Path(resident.socket_path({"MSCHED_CACHE_DIR": str(cache)}) + ".lock")
            decider_before = _decider_cpu_ms(lock)
            for _ in range(runs):
                for name in clients:
                    ms, job = _timed([*argv_for[name], "--hold", "--parsable", str(script)], env_for[name], work,
                                     cpu[name])
                    times[name].append(ms)
                    ids.append(job)
                # the floor any Python entry point pays: the interpreter's own start, same flags
                times["python"].append(_timed([sys.executable, "-I", "-c", "pass"], env_plain, work)[0])
            decider_after = _decider_cpu_ms(lock)
            decider_ms = (decider_after - decider_before) / runs if None not in (decider_before, decider_after) else None
            med = {k: statistics.median(v) for k, v in times.items()}
            results[label] = {
                "plain_ms": med["plain"], "plugin_ms": med["plugin"], "one_shot_ms": med["one-shot"],
                "msub_ms": med["msub"], "python_start_ms": med["python"], "runs": runs,
                **{f"{key}_cpu_ms": statistics.median(cpu[name])
                   for key, name in (("plain", "plain"), ("plugin", "plugin"), ("one_shot", "one-shot"), ("msub", "msub"))},
                "decider_cpu_ms": decider_ms,
                **{f"{key}_added_ms": statistics.median(p - s for p, s in zip(times[name], times["plain"], strict=True))
                   for key, name in (("plugin", "plugin"), ("one_shot", "one-shot"), ("msub", "msub"))},
            }
    finally:
        if ids:
            subprocess.run(["scancel", *ids], env=env_plain, capture_output=True, timeout=60)
        resident.stop(resident.socket_path({"MSCHED_CACHE_DIR": str(cache)}))
        shutil.rmtree(work, ignore_errors=True)
    lua = shutil.which("lua5.1")
    lua_us = None
    if lua:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
            fh.write(LUA_LOOP)
        try:
            out = subprocess.run([lua, fh.name, str(args.dir / "job_submit.lua"), str(args.lua_calls)],
                                 capture_output=True, text=True, timeout=120, check=True)
            lua_us = float(out.stdout.strip())
        finally:
            os.unlink(fh.name)

    print(f"Interleaved runs ({runs} per client and script) on the --plugins dev cluster, median wall time of "
          "one held submission:\n")
    print("| job | plain sbatch | sbatch + plugin | plugin one-shot | msub | plugin added | one-shot added | "
          "msub added | `python -I -c pass` |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print(f"| {label} | {r['plain_ms']:.0f} ms | {r['plugin_ms']:.0f} ms | {r['one_shot_ms']:.0f} ms | "
              f"{r['msub_ms']:.0f} ms | **{r['plugin_added_ms']:+.0f} ms** | {r['one_shot_added_ms']:+.0f} ms | "
              f"{r['msub_added_ms']:+.0f} ms | {r['python_start_ms']:.0f} ms |")
    print("\nCPU time per submission (median; the client's processes: sbatch and what it starts, or msub and its "
          "sbatch; for the plugin, plus the mean CPU of the user's decider per request, its spares' warm-up included):\n")
    print("| job | plain sbatch | sbatch + plugin (client + decider) | plugin one-shot | msub |")
    print("|---|---|---|---|---|")
    for label, r in results.items():
        decider = r["decider_cpu_ms"]
        both = f"{r['plugin_cpu_ms'] + decider:.0f} ms ({r['plugin_cpu_ms']:.0f} + {decider:.0f})" if decider is not None \
            else f"{r['plugin_cpu_ms']:.0f} ms + ?"
        print(f"| {label} | {r['plain_cpu_ms']:.0f} ms | {both} | {r['one_shot_cpu_ms']:.0f} ms | {r['msub_cpu_ms']:.0f} ms |")
    print(f"\nLoad average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.")
    if lua_us is not None:
        print(f"\njob_submit.lua in the controller: {lua_us:.1f} µs per tagged submission "
              f"(Lua 5.1, {args.lua_calls} calls of slurm_job_submit).")
    print("\nBudget: plugin added <= +50 ms median per sbatch: "
          + ", ".join(f"{k}: {'met' if r['plugin_added_ms'] <= 50 else 'NOT met'}" for k, r in results.items()))
    if args.json:
        args.json.write_text(json.dumps({"submit": results, "job_submit_lua_us": lua_us}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
