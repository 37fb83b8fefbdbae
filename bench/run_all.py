"""Run every benchmark under bench/ and (with --full or --write) regenerate BENCHMARKS.md.

    python bench/run_all.py --quick          # make bench-quick: small sizes, prints every table
    python bench/run_all.py --full           # make bench: full sizes, rewrites BENCHMARKS.md + figures
    python bench/run_all.py --quick --write  # quick sizes, but write BENCHMARKS.md too (says so in it)
    python bench/run_all.py --only quality,profiler

Each benchmark runs as its own subprocess with a timeout, so a missing, failing or hanging one is
reported in the summary and in BENCHMARKS.md instead of stopping the others. Scripts receive `--quick` or
`--full`; one that does not accept the flag is retried without it. Our own scripts also get `--json` so
this runner can draw the figures. The hand-written analysis of BENCHMARKS.md (between the
`analysis:start/end` markers) is kept when the file is regenerated.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
FIGURES = BENCH / "figures"
MARK_START = "<!-- analysis:start -->"
MARK_END = "<!-- analysis:end -->"


@dataclass(frozen=True)
class Bench:
    key: str
    script: str
    title: str
    what: str
    quick: tuple[tuple[str, ...], ...] = (("--quick",),)   # one run per argument list
    full: tuple[tuple[str, ...], ...] = (("--full",),)
    json_flag: bool = False          # accepts --json FILE (ours)
    slurm: bool = False              # needs the local Slurm cluster (SLURM_CONF)
    timeout_quick: float = 240.0
    timeout_full: float = 1800.0


BENCHES = (
    Bench("msub", "bench_msub.py", "msub overhead against plain sbatch",
          "Same script, interleaved runs of `msub` and plain `sbatch` on the real local Slurm cluster: the "
          "median added time for a cached torchvision model (goal: under 100 ms, and torch never imported) and "
          "for a first-time profile of a user's model file.",
          quick=(("--runs", "7", "--user-runs", "1"),), full=((),), slurm=True),
    Bench("plugin", "bench_plugin.py", "msched as a Slurm plugin: per-submit overhead",
          "Interleaved plain `sbatch`, `sbatch` through msched's cli_filter.lua (asking the user's resident "
          "decider), the same filter on its one-shot path (a new Python process per submission, as on a host "
          "without LuaSocket), and `msub`, all as an ordinary user, on the dev cluster started with `--plugins` "
          "(budget: the plugin adds at most 50 ms median per sbatch), for a tagged and an untagged job; wall "
          "time and CPU time per submission; and job_submit.lua's time per tagged submission in Lua 5.1.",
          quick=(("--quick",),), full=((),), slurm=True),
    Bench("profiler", "bench_profiler.py", "Profiler speed",
          "Time to profile each torchvision classification model on the meta device (in one process, torch "
          "already imported), median and max, and one cold `python -m msched.models.profiler resnet50`.",
          json_flag=True),
    Bench("plan", "bench_plan.py", "Planning speed (policy.plan on a synthetic snapshot)",
          "Plan time and Slurm update calls of one round for 1k and 10k pending jobs on 1,000 GPUs of 6 types "
          "(simulated snapshot), and of a second round a minute later.",
          quick=(("--pending", "1000", "--repeat", "1"),),
          full=(("--pending", "1000"), ("--pending", "10000"))),
    Bench("reorder", "bench_reorder.py", "Reorder round cost, end to end",
          "A whole `msched reorder` round (Slurm reads, plan, writes, database): on the real local cluster with "
          "200 pending jobs (50 in --quick), the same change written one Slurm call per change and then batched "
          "(`update_jobs`), with the Slurm processes each round started; and through slurm_sim's client with "
          "10k (2k) pending jobs.",
          slurm=True),
    Bench("sim", "bench_sim.py", "Simulator speed",
          "Jobs/s and rounds/s of `slurm_sim` (sched/backfill) under msched with 60 s rounds on a 20k-job trace "
          "on 1,000 GPUs of 6 types (and 100k jobs in --full); --quick runs 5k jobs. Then the cost of loading a "
          "valid trace per line (100k lines; 1M in --full; goal for 1M lines: under 120 s and 2 GB).",
          quick=(("--jobs", "5000"),), full=(("--full", "--fifo"),), timeout_full=3600.0),
    Bench("liar", "bench_liar.py", "Lying about a job's size (one user's claims x10 and x0.1)",
          "One online workload (1,200 jobs, 4 users with 300 each, 64 GPUs of 4 types, 90% offered load, users' "
          "time limits) under msched, replayed with everyone honest and with one user inflating or deflating every "
          "claim (iterations) 10x: that user's gain and the honest users' loss in mean JCT, 5 seeds, both "
          "objectives.",
          quick=(("--jobs", "300", "--seeds", "1,2"),), full=((),), timeout_quick=420.0, timeout_full=3600.0),
    Bench("quality", "bench_quality.py", "Scheduling quality",
          "fifo, fastest, msched-once, msched and oracle on the four workloads (bench/workloads.py), seeds 1-5 "
          "(1-3 in --quick), every policy on the same trace in one `msched sim` call, under Slurm's default "
          "scheduler sched/backfill (so fifo is backfill fifo), jobs carrying users' time limits. Each run is "
          "checked: every policy finishes every submitted job, no makespan below the LP lower bound.",
          json_flag=True, timeout_quick=420.0, timeout_full=5400.0),
    Bench("planner", "bench_planner.py", "Planner: distance to optimal",
          "Small static batches (16 and 30 one-GPU jobs on 8 one-GPU nodes of 4 types, 5 seeds): the greedy plan "
          "and the time-boxed optimizing planner against the CP-SAT optimum or its best proven bound; and the "
          "Gavel-shaped static batch (100 jobs at t=0 on k80:1x8,p100:1x8,v100:1x8) under backfill: fifo, msched "
          "and oracle against the LP bound and CP-SAT's bound.",
          quick=(("--seeds", "2", "--jobs", "16", "--exact-s", "10", "--gavel-cp-s", "10"),),
          full=(("--exact-s", "60", "--gavel-cp-s", "60"),), timeout_quick=600.0, timeout_full=3600.0),
)


@dataclass
class Outcome:
    bench: Bench
    status: str                      # ok | failed | missing | timeout
    seconds: float = 0.0
    output: str = ""
    argv: list[list[str]] = field(default_factory=list)
    json_data: dict | None = None
    note: str = ""


# --------------------------------------------------------------------------- running
def _run(argv: list[str], timeout: float, env: dict[str, str]) -> tuple[int | None, str, float]:
    env = dict(env, COLUMNS="130", PYTHONUNBUFFERED="1", TERM="dumb")
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return None, out, time.perf_counter() - start
    out = proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")
    return proc.returncode, out, time.perf_counter() - start


def run_bench(b: Bench, mode: str, jsondir: Path, env: dict[str, str]) -> Outcome:
    """Run one benchmark script (one subprocess per argument list of the mode); never raises."""
    script = BENCH / b.script
    if not script.exists():
        return Outcome(b, "missing", note=f"bench/{b.script} does not exist (yet)")
    timeout = b.timeout_quick if mode == "quick" else b.timeout_full
    base = [sys.executable, str(script.relative_to(REPO))]
    json_path = jsondir / f"{b.key}.json"
    outcome = Outcome(b, "ok")
    outputs = []
    for variant in (b.quick if mode == "quick" else b.full):
        shown_json = str(json_path.relative_to(REPO)) if json_path.is_relative_to(REPO) else str(json_path)
        extra = ["--json", shown_json] if b.json_flag else []
        argv = [*base, *variant, *extra]
        rc, out, secs = _run(argv, timeout, env)
        if rc == 2 and "unrecognized arguments" in out and variant:
            argv = [*base, *extra]          # a script without --quick/--full: run it as it is
            rc, out, secs = _run(argv, timeout, env)
        shown = ["python", *argv[1:]]
        outcome.argv.append(shown)
        outcome.seconds += secs
        if len(b.quick if mode == "quick" else b.full) > 1:
            out = f"$ {' '.join(shown)}\n{out}"
        outputs.append(out)
        if rc is None:
            outcome.status, outcome.note = "timeout", f"stopped after {timeout:g} s"
        elif rc != 0 and outcome.status == "ok":
            lines = [ln for ln in out.strip().splitlines() if ln.strip()]
            outcome.status = "failed"
            outcome.note = f"exit {rc}: {lines[-1][:200] if lines else 'no output'}"
    outcome.output = "\n".join(outputs)
    if b.json_flag and json_path.exists():
        try:
            outcome.json_data = json.loads(json_path.read_text())
        except ValueError:
            outcome.json_data = None
    return outcome


def slurm_env(start: bool) -> tuple[dict[str, str], str]:
    """The environment for benchmarks that need the local Slurm cluster, and a line saying what was done.

    SLURM_CONF from the caller wins; else the dev cluster in .slurm-dev is used when it answers, and
    started (`scripts/slurm-dev-cluster.sh up`, left running: `make slurm-down` stops it) when `start`.
    """
    env = dict(os.environ)
    if env.get("SLURM_CONF"):
        return env, f"SLURM_CONF={env['SLURM_CONF']} (given)"
    script = REPO / "scripts" / "slurm-dev-cluster.sh"
    if not script.exists():
        return env, "no scripts/slurm-dev-cluster.sh: Slurm benchmarks will report no cluster"
    actions = ["status", "up"] if start else ["status"]
    last = ""
    for action in actions:
        try:
            proc = subprocess.run(["bash", str(script), action, "--dir", str(REPO / ".slurm-dev")], cwd=REPO,
                                  capture_output=True, text=True, timeout=420)
        except subprocess.TimeoutExpired:
            last = f"`slurm-dev-cluster.sh {action}` did not finish in 420 s"
            continue
        m = re.search(r"export SLURM_CONF=(\S+)", proc.stdout)
        if proc.returncode == 0 and m:
            env["SLURM_CONF"] = m.group(1)
            how = "already running" if action == "status" else "started by this run; `make slurm-down` stops it"
            return env, f"local dev cluster {how} (SLURM_CONF={m.group(1)})"
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        last = f"`slurm-dev-cluster.sh {action}` exit {proc.returncode}: {lines[-1] if lines else ''}"
    return env, f"no local Slurm cluster ({last})"


# --------------------------------------------------------------------------- machine
def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in ("torch", "torchvision", "numpy", "sqlalchemy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    try:
        mem_kb = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                          if ln.startswith("MemTotal")))
        mem = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        mem = "unknown"
    slurm_v = ""
    ctld = shutil.which("slurmctld") or ("/usr/sbin/slurmctld" if Path("/usr/sbin/slurmctld").exists() else None)
    if ctld:
        try:   # `slurmctld -V` needs no configuration (sbatch --version does)
            slurm_v = subprocess.run([ctld, "-V"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            slurm_v = ""
    try:
        load = " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "unknown"
    return {"nproc": str(os.cpu_count()), "cpu": cpu, "memory": mem, "os": platform.platform(),
            "python": platform.python_version(), **versions, "slurm": slurm_v or "not installed",
            "load average (1/5/15 min) when written": load,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


# --------------------------------------------------------------------------- figures
def plot_quality(data: dict, path: Path) -> bool:
    """Makespan and mean JCT of each policy relative to fifo, per workload (mean over seeds)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    summary = data.get("summary") or {}
    names = [n for n in ("philly", "static", "alibaba", "gavel") if n in summary]
    if not names:
        return False
    policies = ("fifo", "fastest", "msched-once", "msched", "oracle")
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.0), dpi=80, sharey=False)
    width = 0.16
    for ax, metric, label in ((axes[0], "makespan_s", "makespan / fifo"), (axes[1], "mean_jct_s", "mean JCT / fifo")):
        for i, pol in enumerate(policies):
            vals = []
            for n in names:
                pols = summary[n]["policies"]
                base = pols.get("fifo", {}).get(metric, [math.nan])[0]
                v = pols.get(pol, {}).get(metric, [math.nan])[0]
                vals.append(v / base if base else math.nan)
            xs = [k + (i - 2) * width for k in range(len(names))]
            ax.bar(xs, [min(v, 1.6) for v in vals], width, label=pol)
            for x, v in zip(xs, vals, strict=True):
                if v > 1.6:      # off the scale: write the value instead of squashing every other bar
                    ax.text(x, 1.61, f"{v:.1f}", ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_ylim(0, 1.85)
        ax.axhline(1.0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Scheduling quality relative to fifo (lower is better)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


def plot_profiler(data: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    timings = data.get("timings_s") or {}
    if not timings:
        return False
    fig, ax = plt.subplots(figsize=(6, 2.6), dpi=80)
    ax.hist(list(timings.values()), bins=20, color="tab:blue")
    ax.set_xlabel("seconds to profile one model (meta device)")
    ax.set_ylabel("models")
    ax.set_title(f"Profiler: {len(timings)} torchvision classification models", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- BENCHMARKS.md
def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def quality_markdown(data: dict) -> list[str]:
    """The quality summary as markdown tables: one row per (workload, policy), then the ratios."""
    summary = data.get("summary") or {}
    policies = ("fifo", "fastest", "msched-once", "msched", "oracle")
    jobs = data.get("jobs") or {}
    L = ["All under sched/backfill (Slurm's default). `x LP bound`: makespan over the LP lower bound "
         "(msched.policy.bound), per seed then averaged; `finished`: jobs finished / submitted, summed over the five policies and all seeds.",
         "",
         "| workload | policy | makespan h | mean JCT h | p99 JCT h | mean wait h | util % | x LP bound |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]

    def cell(stats: dict, key: str, unit: float) -> str:
        mean, sd = stats.get(key, (math.nan, math.nan))
        if mean is None or math.isnan(mean):
            return "-"
        return f"{mean / unit:.2f} ±{sd / unit:.2f}" if sd else f"{mean / unit:.2f}"

    for name in ("philly", "static", "alibaba", "gavel"):
        if name not in summary:
            continue
        entry = summary[name]
        for pol in policies:
            st = entry["policies"].get(pol)
            if not st:
                continue
            label = ""
            if pol == "fifo":
                lb = entry.get("lower_bound_s", (math.nan, 0))
                label = (f"{name} ({jobs.get(name, '?')} jobs, seeds 1-{entry['seeds']}; LP bound "
                         f"{cell({'lb': lb}, 'lb', 3600)} h; finished {entry.get('finished', '?')}/"
                         f"{entry.get('submitted', '?')})")
            bold = "**" if pol == "msched" else ""
            name_cell = f"backfill {pol}" if pol == "fifo" else pol
            L.append(f"| {label} | {bold}{name_cell}{bold} | {cell(st, 'makespan_s', 3600)} | "
                     f"{cell(st, 'mean_jct_s', 3600)} | {cell(st, 'p99_jct_s', 3600)} | {cell(st, 'mean_wait_s', 3600)} | "
                     f"{cell(st, 'gpu_utilization', 0.01)} | {cell(st, 'ratio_to_lower_bound', 1)} |")
    L.append("")
    L.append("Ratios, per seed on the same trace, then mean ±sd (below 1 = the first policy is better):")
    L.append("")
    L.append("| workload | ratio | makespan | mean JCT | p99 JCT |")
    L.append("|---|---|---:|---:|---:|")
    for name in ("philly", "static", "alibaba", "gavel"):
        if name not in summary:
            continue
        for key, stats in summary[name]["ratios"].items():
            cells = []
            for m in ("makespan_s", "mean_jct_s", "p99_jct_s"):
                mean, sd = stats[m]
                cells.append("-" if mean is None or math.isnan(mean) else (f"{mean:.3f} ±{sd:.3f}" if sd else f"{mean:.3f}"))
            L.append(f"| {name} | {key} | {' | '.join(cells)} |")
    L.append("")
    return L


def quality_findings(data: dict) -> list[str]:
    """Plain statements read off the measured ratios (no judgement beyond the numbers)."""
    out = []
    for name, entry in (data.get("summary") or {}).items():
        r = entry.get("ratios", {})
        parts = []
        for key, label in (("msched/fifo", "backfill fifo"), ("msched/oracle", "oracle"),
                           ("msched/msched-once", "msched-once")):
            if key in r:
                mk, sd = r[key]["makespan_s"]
                jct = r[key]["mean_jct_s"][0]
                if math.isnan(mk):
                    continue
                verdict = "beats" if mk < 0.995 else ("loses to" if mk > 1.005 else "ties")
                parts.append(f"{verdict} {label} on makespan ({mk:.3f} ±{sd:.3f}; mean JCT ratio {jct:.3f})")
        lb = entry.get("policies", {}).get("msched", {}).get("ratio_to_lower_bound")
        if lb and not math.isnan(lb[0]):
            parts.append(f"makespan {lb[0]:.3f} ±{lb[1]:.3f} x the LP lower bound")
        if parts:
            out.append(f"- **{name}** ({entry['seeds']} seeds): msched " + "; ".join(parts) + "; "
                       f"{entry.get('finished', '?')}/{entry.get('submitted', '?')} jobs finished, "
                       f"{entry.get('below_bound', '?')} makespan(s) below the bound.")
    return out


def workloads_section() -> list[str]:
    """How the four quality workloads are built, generated from bench/workloads.py so it stays true."""
    sys.path.insert(0, str(BENCH))
    try:
        import workloads as wl

        alibaba = wl.alibaba_cluster()
        nodes = wl.alibaba_nodes()
    except Exception as exc:  # the data may be absent on another machine: say so, keep going
        return ["## Workloads", "", f"(could not describe the workloads here: {exc})", ""]
    L = ["## Workloads (bench/workloads.py)", ""]
    L.append("All four are built from the measured public data in `../shared/data` (override: "
             "`MSCHED_SHARED_DATA`) by pure functions of (data, seed, size); `python bench/workloads.py N SEED` "
             "prints a summary of each.")
    L.append("")
    L.append("Sources (facts and figures only, no code copied): torchvision training times per GPU type from "
             "github.com/ryujaehun/pytorch-gpu-benchmark (MIT); Gavel's throughputs and workload laws from "
             "github.com/stanford-futuredata/gavel (MIT); Philly job sizes/durations/arrivals from "
             "msr-fiddle/philly-traces (as distributed with the Sia artifact); the Alibaba 2023 node and pod lists "
             "from github.com/alibaba/clusterdata `cluster-trace-gpu-v2023`.")
    L.append("")
    L.append("| workload | cluster | jobs | truth | what msched knows |")
    L.append("|---|---|---|---|---|")
    L.append(f"| **philly** (a) | `{wl.SHARED_CLUSTER}` (48 GPUs, the shared table's 6 types) | the shared "
             "table's 32 torchvision models minus msched's default references, uniformly; Philly GPU counts "
             "(capped at the 4-GPU node), durations and arrivals | gpu-train-benchmarks `perf_table.csv` | "
             "shipped reference rows + classification |")
    L.append(f"| **static** (b) | `{wl.STATIC_CLUSTER}` (24 GPUs) | as (a), Philly jobs up to "
             f"{wl.STATIC_MAX_S / 3600:.0f} h only, every one submitted at time 0 | as (a) | as (a) |")
    L.append(f"| **alibaba** (c) | `{alibaba}` (256 GPUs, Alibaba 2023 mix) | as (a), but GPU counts drawn "
             "from the Alibaba pod list (GPU pods; a shared fraction counts as 1 GPU) | as (a) | as (a) |")
    L.append(f"| **gavel** (d) | `{wl.GAVEL_CLUSTER}` (96 GPUs) | Gavel job types (model, batch) measured on "
             "the V100 at the drawn scale; GPUs P(1,2,4,8) = 0.7, 0.1, 0.15, 0.05; durations 60*10^U(1.5,3) s "
             "w.p. 0.8 else 60*10^U(3,4) s, read as the V100 runtime; Poisson arrivals | gavel `perf_table.csv` "
             "| the same table; every Gavel model is a reference (`--references` = all 7) |")
    L.append("")
    L.append(f"- Philly: jobs shorter than {wl.PHILLY_MIN_S:.0f} s (mostly failed launches) or longer than "
             f"{wl.PHILLY_MAX_S / 3600:.0f} h (one such job would be the makespan whatever the policy) are "
             "dropped; a trace is a window of consecutive jobs at a seeded random start. A Philly duration is "
             f"read as the job's runtime on `{wl.PHILLY_GPU_TYPE}` (Philly's GPUs were Pascal P100/P40; "
             "titanxp is the table's Pascal card), at the table's batch size of 12 per GPU, which fixes the "
             "job's iterations.")
    L.append("- Arrivals (online workloads): the gaps keep their shape but are compressed so that the offered "
             "work (GPUs x runtime averaged over the types that can run the job) is 0.9 of the cluster's "
             "capacity over the arrival window. Philly's own cluster was far larger than 96 GPUs, so its raw "
             "timestamps would leave these clusters nearly idle.")
    L.append("- Time limits: every job gets one as users set them (`slurm_sim.trace.user_time_limit`, after "
             "Mu'alem & Feitelson 2001 and Tsafrir, Etsion & Feitelson 2005): runtime on the slowest type that "
             "can hold it / U(0.02, 1], rounded up to a popular value (5 min ... 7 days), 10% at the maximum. "
             "Backfill plans with these, not with the true runtimes.")
    L.append("- No job is lost: a job's model always has truth rows on every type that can hold it (models "
             "without are redrawn: `redrawn_for_truth_gaps` in `python bench/workloads.py`), so `msched sim` "
             "never refuses a workload and every policy can run every job wherever it sends it.")
    L.append("- References never appear among the jobs of (a)-(c) (msched's default reference set is read as "
             "msched reads it); in (d) every job's model is its own reference, so (d) judges the planner on a "
             "second, independent set of measurements with perfect model knowledge, and msched and oracle "
             "should coincide there.")
    L.append("- Sizes: the static batch is a few hundred jobs on 24 GPUs, so the batch lasts several times its "
             "longest job and the makespan measures the schedule rather than one job; the online traces' "
             "arrival windows span hours; the 256-GPU Alibaba cluster gets more jobs for its load to build up. "
             "The exact job counts are in each quality table's title.")
    L.append("")
    L.append("Alibaba 2023 GPU models mapped onto the shared table's types (each mapped type keeps its most "
             "common node size; node counts are chosen to give exactly 256 GPUs closest to the proportional "
             "share):")
    L.append("")
    L.append("| Alibaba model | GPUs in the node list | mapped to | why |")
    L.append("|---|---:|---|---|")
    for model, (target, why) in wl.ALIBABA_MAPPING.items():
        L.append(f"| {model} | {sum(nodes.get(model, {}).values())} | {target} | {why} |")
    L.append("")
    L.append("gtx1080ti is left out of (c): no Alibaba type maps onto it.")
    L.append("")
    return L


MEANING = """## What the figures mean

- **makespan**: last job end minus first submit (simulated); the papers' headline metric, most telling on
  the static batch. **mean / p99 JCT**: job completion time, end minus submit. **mean wait**: start minus
  submit. **util %**: busy GPU-seconds over (GPUs x makespan).
- Every run simulates Slurm's default scheduler, **sched/backfill** (docs/backfill.md says what is
  modelled), with each job's time limit as a user would set it (an overestimate of its runtime,
  heavy-tailed, rounded to popular values); msched's planner is told Slurm backfills.
- **fifo** (backfill fifo): Slurm as sites run it, priority by submit order with backfill; untyped requests
  take whatever type frees first. **fastest**: every job asks
  for the type fastest on average (what users do by hand). **msched-once**: the similarity-based choice made
  at submit, never revised. **msched**: re-planned every round (60 s). **oracle**: msched's planner fed the
  true runtimes: the same heuristic with perfect knowledge, so msched/oracle isolates the cost of estimating
  by similarity, not the distance from an optimum.
- Ratios are computed per seed on the same trace and then averaged (mean +- standard deviation), so they
  do not mix traces. Below 1 means the first policy is better.
- Speed figures (profiler, msub, reorder, simulator) are wall-clock on this shared 2-core machine, where
  other work runs at the same time; read them as orders of magnitude and ratios, not as exact times.
"""


def _old_sections(old: str) -> tuple[dict[str, str], dict[str, str]]:
    """From an earlier BENCHMARKS.md: each benchmark's section (by title) and its summary-table row."""
    sections, rows = {}, {}
    for b in BENCHES:
        for head in (f"## {b.title}\n", f"## {b.title} (earlier run)\n"):
            if head in old:
                body = old.split(head, 1)[1]
                nxt = body.find("\n## ")
                sections[b.title] = f"## {b.title}\n" + (body if nxt < 0 else body[:nxt + 1])
        row = next((ln for ln in old.splitlines() if ln.startswith(f"| {b.title} |")), None)
        if row:
            rows[b.title] = row
    return sections, rows


def write_markdown(outcomes: list[Outcome], mode: str, figures: dict[str, str], path: Path, argv: list[str],
                   slurm_note: str = "", keep_others: bool = False) -> None:
    """The whole BENCHMARKS.md from this run. `keep_others` (with --only): the benchmarks not run keep
    their sections from the earlier file, marked as from the earlier run."""
    old = path.read_text() if path.exists() else ""
    old_sections, old_rows = _old_sections(old) if keep_others else ({}, {})
    ran = {o.bench.title for o in outcomes}
    kept = [b for b in BENCHES if b.title not in ran and b.title in old_sections]
    analysis = ""
    if MARK_START in old and MARK_END in old:
        analysis = old.split(MARK_START, 1)[1].split(MARK_END, 1)[0].strip("\n")
    m = machine()
    L: list[str] = []
    L.append("# msched benchmarks")
    L.append("")
    L.append("Generated by `python bench/run_all.py " + " ".join(argv) + "` (`make bench` = `--full`, "
             "`make bench-quick` = `--quick`). Every figure below was measured in the run that wrote this "
             "file; comparisons are ratios within one run, because absolute times on a shared 2-core "
             "machine vary from run to run. Scheduling-quality times are *simulated* hours and do not depend "
             "on the machine.")
    if mode == "quick":
        L.append("")
        L.append("**This file was written from the quick suite** (`--quick --write`: fewer jobs, fewer seeds, "
                 "fewer models); `make bench` gives the full sizes.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append("| | |")
    L.append("|---|---|")
    for k in ("date", "nproc", "cpu", "memory", "os", "python", "torch", "torchvision", "numpy", "sqlalchemy", "slurm",
              "load average (1/5/15 min) when written"):
        L.append(f"| {k} | {m[k]} |")
    if slurm_note:
        L.append(f"| Slurm cluster used | {slurm_note} |")
    L.append("")
    L.append("## Summary of this run")
    L.append("")
    L.append("| benchmark | status | seconds | command |")
    L.append("|---|---|---:|---|")
    for o in outcomes:
        cmd = "<br>".join("`" + " ".join(a) + "`" for a in o.argv) or "-"
        status = o.status + (f" ({o.note})" if o.note else "")
        L.append(f"| {o.bench.title} | {status} | {o.seconds:.0f} | {cmd} |")
    for b in kept:
        row = old_rows.get(b.title)
        if row:
            cells = row.split(" | ")
            cells[1] = cells[1].replace(" (earlier run, not re-run)", "") + " (earlier run, not re-run)"
            L.append(" | ".join(cells))
    if kept:
        L.append("")
        L.append("Not re-run this time (`--only`): " + ", ".join(b.title for b in kept) + "; their sections below "
                 "are copied from the earlier file as they were.")
    L.append("")
    L.extend(workloads_section())
    L.extend(MEANING.splitlines())
    L.append("")
    if analysis:
        L.append(MARK_START)
        L.append(analysis)
        L.append(MARK_END)
        L.append("")
    for o in outcomes:
        L.append(f"## {o.bench.title}")
        L.append("")
        L.append(o.bench.what)
        L.append("")
        if o.argv:
            L.append("Command" + ("s" if len(o.argv) > 1 else "") + ": " + "; ".join("`" + " ".join(a) + "`" for a in o.argv))
            L.append("")
        if o.status == "missing":
            L.append(f"**Not measured:** {o.note}.")
            L.append("")
            continue
        if o.status != "ok":
            L.append(f"**{o.status.upper()}:** {o.note}. What it printed is kept below as it was.")
            L.append("")
        if o.bench.key == "quality" and o.json_data:
            found = quality_findings(o.json_data)
            if found:
                L.append("Read off the ratios (per seed, then mean ±sd; below 1 = msched better):")
                L.append("")
                L.extend(found)
                L.append("")
        if o.bench.key in figures:
            L.append(f"![{o.bench.title}]({figures[o.bench.key]})")
            L.append("")
        text = _strip_ansi(o.output).rstrip()
        if o.bench.key == "quality" and o.json_data and o.json_data.get("summary"):
            L.extend(quality_markdown(o.json_data))
            if text:
                L.append("<details><summary>What the benchmark printed (with the estimate-accuracy table)</summary>")
                L.append("")
                L.append("```")
                L.append(text[-20000:])
                L.append("```")
                L.append("</details>")
                L.append("")
        elif text:
            L.append("```")
            L.append(text[-12000:])
            L.append("```")
            L.append("")
    for b in kept:
        L.append(old_sections[b.title].rstrip("\n").replace(f"## {b.title}", f"## {b.title} (earlier run)", 1))
        L.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(L).rstrip() + "\n")


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes (make bench-quick)")
    mode.add_argument("--full", action="store_true", help="full sizes; rewrites BENCHMARKS.md (make bench)")
    ap.add_argument("--write", action="store_true", help="write BENCHMARKS.md even with --quick")
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(b.key for b in BENCHES)}")
    ap.add_argument("--no-slurm-up", action="store_true",
                    help="do not start the local dev cluster for the Slurm benchmarks when it is down")
    ap.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md", help="where to write the markdown")
    args = ap.parse_args(argv)
    run_mode = "quick" if args.quick else "full"
    selected = list(BENCHES)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        bad = [k for k in keys if k not in {b.key for b in BENCHES}]
        if bad:
            ap.error(f"unknown benchmark(s) {', '.join(bad)}; choose from {', '.join(b.key for b in BENCHES)}")
        selected = [b for b in BENCHES if b.key in keys]

    outcomes: list[Outcome] = []
    start = time.perf_counter()
    env = dict(os.environ)
    slurm_note = "not needed"
    if any(b.slurm for b in selected):
        env, slurm_note = slurm_env(start=not args.no_slurm_up)
        print(f"Slurm: {slurm_note}", flush=True)
    rawdir = BENCH / "out" / run_mode          # raw JSON of our benchmarks (git-ignored)
    rawdir.mkdir(parents=True, exist_ok=True)
    for b in selected:
        print(f"\n=== {b.title} (bench/{b.script}, {run_mode}) ===", flush=True)
        for stale in (rawdir / f"{b.key}.json",):
            stale.unlink(missing_ok=True)
        o = run_bench(b, run_mode, rawdir, env if b.slurm else dict(os.environ))
        outcomes.append(o)
        if o.output.strip():
            print(_strip_ansi(o.output).rstrip(), flush=True)
        print(f"--- {b.key}: {o.status}{' (' + o.note + ')' if o.note else ''} in {o.seconds:.0f} s", flush=True)

    figures: dict[str, str] = {}
    if args.full or args.write:
        for o in outcomes:
            if o.json_data is None:
                continue
            target = FIGURES / f"{o.bench.key}.png"
            drawn = (plot_quality if o.bench.key == "quality" else plot_profiler)(o.json_data, target)
            if drawn:
                figures[o.bench.key] = str(target.relative_to(args.out.resolve().parent)) \
                    if target.is_relative_to(args.out.resolve().parent) else str(target)
        write_markdown(outcomes, run_mode, figures, args.out, raw, slurm_note, keep_others=bool(args.only))
        print(f"\nwrote {args.out}" + (f" and {len(figures)} figure(s) under bench/figures/" if figures else ""))

    print("\n=== summary ===")
    for o in outcomes:
        print(f"{o.bench.key:9s} {o.status:8s} {o.seconds:6.0f} s  {o.note}")
    print(f"total {time.perf_counter() - start:.0f} s")
    # a benchmark whose script does not exist yet is reported, not an error; one that fails is
    return 0 if all(o.status in ("ok", "missing") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
