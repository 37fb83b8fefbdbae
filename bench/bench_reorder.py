"""A whole `msched reorder` round, end to end: Slurm reads, planning, writes, database recording.

    python bench/bench_reorder.py [--pending 200] [--sim-pending 10000] [--sim-gpus 1000] [--json FILE]
                                  [--quick | --full] [--no-real] [--no-sim]
    python bench/bench_reorder.py --settle 1000,5000 [--json FILE]    # rounds that settle (real cluster)
    python bench/bench_reorder.py --online-churn 400,3000 [--seeds 1,2,3] [--planner greedy]   # writes/job
    python bench/bench_reorder.py --queue-memory 10000,10000     # peak RSS of reading squeue --json
    python bench/bench_reorder.py --settle 10000 --own-process --no-sim   # each round a process: phases
    python bench/bench_reorder.py --snapshot-caches 10000          # build_snapshot with and without its caches
    python bench/bench_reorder.py --queue-reads 10000              # the tight queue read against squeue --json
    python bench/bench_reorder.py --settle 10000 --own-process --no-sim --queue-read json   # rounds, --json read

1. Real cluster (needs SLURM_CONF pointing at a running cluster, e.g. `make slurm-up`; skipped with a
   line otherwise): all GPUs held by untagged blockers, `--pending` jobs submitted as msub does
   (untyped gres, tag in the comment, a GPU-type constraint msub picked at random), then rounds
   through the command-line backend and a SQLite store. Round 1 writes the way rounds did before
   `update_jobs` (one `set_features`/`set_priority` call per change: a squeue + an scontrol per
   priority, an scontrol per retype); the queue is then put back as it was (every job's priority and
   constraint as submitted) and round 2 writes the same plan through the batched `update_jobs` (one
   squeue + one scontrol per field); round 3 follows at once (nothing changed: it should write
   little). A warm-up round before round 1 ingests the new jobs into the database and fills the
   client's caches, so rounds 1 and 2 do the same work but for the writes (its own line is printed
   too). Each line also counts the Slurm processes the round started. Every job is cancelled at the end.
2. Simulated cluster (slurm_sim's SimClient, the same Reorderer code): `--sim-pending` jobs on
   `--sim-gpus` GPUs of 6 types, same two rounds, to time ingestion and recording at scale.

For each round it prints the wall time (and this process's CPU time: on a busy machine the simulated
round's wall time mostly measures the other processes) and its parts (Slurm reads, snapshot + plan, Slurm writes,
database), and the Slurm update calls next to the fewest possible for the same change: managed pending
jobs minus the longest run already in the planned order (priorities), plus the retyped jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from msched.config import DATA_DIR, Config  # noqa: E402
from msched.estimate.perf_table import PerfTable  # noqa: E402
from msched.policy.priorities import fewest_moves  # noqa: E402
from msched.rounds.reorder import Reorderer, open_site_store  # noqa: E402
from msched.slurm.base import JobRequest, JobUpdate, SlurmClient  # noqa: E402
from msched.tag import JobTag, with_tag  # noqa: E402

PERF = Path(DATA_DIR) / "gpu_performance.csv"
TRUTH = Path(DATA_DIR) / "measured_perf.csv"
SIM_TYPES = ("a100", "titanrtx", "titanv", "rtx2080ti", "titanxp", "gtx1080ti")


class CountingClient(SlurmClient):
    """Delegates to a real client; counts and times every call (what a round costs in Slurm terms).

    batched=False: a round's writes take SlurmClient's default `update_jobs`, one `set_features` /
    `set_priority` of the inner client per change (how rounds wrote before batching); True: the inner
    client's own `update_jobs`."""

    def __init__(self, inner: SlurmClient, *, batched: bool = True):
        self.inner = inner
        self.batched = batched
        self.name = f"counting({inner.name})"
        self.reset()

    def reset(self) -> None:
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def _timed(self, name: str, fn, *args, **kwargs):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def now(self) -> float:
        return self.inner.now()

    def submit(self, request: JobRequest) -> str:
        return self.inner.submit(request)

    def jobs(self, states=("PENDING", "RUNNING")):  # noqa: ANN001, ANN201
        return self._timed("jobs", self.inner.jobs, states)

    def finished_jobs(self, since=None):  # noqa: ANN001, ANN201
        return self._timed("finished_jobs", self.inner.finished_jobs, since)

    def nodes(self):  # noqa: ANN201
        return self._timed("nodes", self.inner.nodes)

    def update_jobs(self, updates):  # noqa: ANN001, ANN201
        if self.batched:
            return self._timed("update_jobs", self.inner.update_jobs, updates)
        return SlurmClient.update_jobs(self, updates)      # per change, through the two methods below

    def set_priority(self, job_id: str, priority: int) -> None:
        self._timed("set_priority", self.inner.set_priority, job_id, priority)

    def set_features(self, job_id: str, features: str) -> None:
        self._timed("set_features", self.inner.set_features, job_id, features)

    def hold(self, job_id: str) -> None:
        self.inner.hold(job_id)

    def release(self, job_id: str) -> None:
        self.inner.release(job_id)

    def cancel(self, job_id: str) -> None:
        self.inner.cancel(job_id)


def counting_cli(config: Config):  # noqa: ANN201
    """The command-line client, counting the Slurm processes it starts (each goes through `_exec`)."""
    from msched.slurm.cli import CliClient

    class ProcessCountingCli(CliClient):
        processes: dict[str, int]

        def _exec(self, argv, **kwargs):  # noqa: ANN001, ANN003, ANN202
            self.processes[argv[0]] = self.processes.get(argv[0], 0) + 1
            return super()._exec(argv, **kwargs)

    client = ProcessCountingCli(config)
    client.processes = {}
    return client


def fewest_possible(result) -> tuple[int, int]:  # noqa: ANN001
    """(fewest update calls for this plan, retyped jobs): priorities outside the longest run already in
    the planned order, plus one features update per retyped job."""
    current = {p.job_id: p.priority for p in result.snapshot.pending}
    order = [d.job_id for d in sorted(result.plan.decisions, key=lambda d: -d.priority)]
    retyped = sum(1 for u in result.updates if u.field == "features")
    return fewest_moves(order, {j: current[j] for j in order}) + retyped, retyped


def measure_round(reorderer: Reorderer, client: CountingClient) -> dict:
    client.reset()
    procs = getattr(client.inner, "processes", None)
    if procs is not None:
        procs.clear()
    t0, c0 = time.perf_counter(), time.process_time()
    out = reorderer.round()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    r = out.result
    if r is None:                    # Slurm as the last round left it: not planned (Reorderer.skip_unchanged)
        return {"writes": "none (unchanged)", "slurm_processes": sum(procs.values()) if procs is not None else None,
                "slurm_process_kinds": dict(procs) if procs is not None else None, "pending": out.pending,
                "managed": 0, "running": out.running, "wall_s": wall, "cpu_s": cpu,
                "read_s": client.seconds.get("jobs", 0.0) + client.seconds.get("nodes", 0.0), "snapshot_s": 0.0,
                "plan_s": 0.0, "write_s": 0.0, "finished_read_s": client.seconds.get("finished_jobs", 0.0),
                "db_s": out.db_seconds, "other_s": 0.0, "update_calls": 0, "fewest": 0, "retyped": 0, "skipped": 0,
                "read_calls": client.calls.get("jobs", 0) + client.calls.get("nodes", 0), "unchanged": True}
    fewest, retyped = fewest_possible(r)
    reads = client.seconds.get("jobs", 0.0) + client.seconds.get("nodes", 0.0)
    writes = sum(client.seconds.get(k, 0.0) for k in ("set_priority", "set_features", "update_jobs"))
    finished = client.seconds.get("finished_jobs", 0.0)
    return {
        "writes": "batched" if client.batched else "per change",
        "slurm_processes": sum(procs.values()) if procs is not None else None,
        "slurm_process_kinds": dict(procs) if procs is not None else None,
        "pending": len(r.snapshot.pending), "managed": len(r.plan.decisions), "running": len(r.snapshot.running),
        "wall_s": wall, "cpu_s": cpu, "read_s": reads, "snapshot_s": r.snapshot_seconds, "plan_s": r.plan_seconds,
        "write_s": writes, "finished_read_s": finished,
        "db_s": out.db_seconds,
        "other_s": max(0.0, wall - reads - writes - finished - r.snapshot_seconds - r.plan_seconds - out.db_seconds),
        "update_calls": r.update_calls, "fewest": fewest, "retyped": retyped, "skipped": len(r.skipped),
        "read_calls": client.calls.get("jobs", 0) + client.calls.get("nodes", 0),
    }


def show(label: str, m: dict) -> None:
    ratio = m["update_calls"] / m["fewest"] if m["fewest"] else (0.0 if m["update_calls"] == 0 else float("inf"))
    print(f"{label}: {m['pending']} pending ({m['managed']} managed), {m['running']} running: "
          f"round {m['wall_s']:.2f} s (this process's CPU {m['cpu_s']:.2f} s) = Slurm reads {m['read_s']:.2f} s ({m['read_calls']} calls) + snapshot "
          f"{m['snapshot_s'] * 1000:.0f} ms + plan {m['plan_s'] * 1000:.0f} ms + Slurm writes {m['write_s']:.2f} s "
          f"+ finished-job read {m['finished_read_s']:.2f} s + database {m['db_s']:.2f} s + other "
          f"{m['other_s']:.2f} s; "
          f"update calls {m['update_calls']}, fewest possible {m['fewest']} ({m['retyped']} retyped), "
          f"ratio {ratio:.2f}; skipped {m['skipped']}")
    if m.get("slurm_processes") is not None:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(m["slurm_process_kinds"].items()))
        print(f"    writes {m['writes']}: {m['slurm_processes']} Slurm processes in the round ({kinds})")


def restore(inner: SlurmClient, original: dict[str, tuple[int, str]]) -> int:
    """Put the bench's pending jobs back to their priority and constraint as read before the rounds."""
    now = {j.job_id: (j.priority, j.features) for j in inner.jobs(states=("PENDING",))}
    back = [JobUpdate(job_id, priority=prio, features=feat) for job_id, (prio, feat) in original.items()
            if job_id in now and now[job_id] != (prio, feat) and prio > 0]
    results = inner.update_jobs(back)
    return sum(1 for r in results if r.ok)


# ------------------------------------------------------------------------- the busy queue (issue 21)
BUSY_TYPES = ("a100", "titanv", "rtx2080ti", "titanxp")      # the dev cluster: 4 nodes x 4 GPUs


def busy_models(perf: PerfTable, truth: PerfTable | None = None, types=BUSY_TYPES) -> list[str]:  # noqa: ANN001
    """Five tagged models: those with rows for every type (and in the truth table when one is given)."""
    return [m for m in models_of(perf, types) if truth is None or truth.has_model(m)][:5]


def busy_queue_requests(n_pending: int, models: list[str], seed: int = 0, types=BUSY_TYPES,  # noqa: ANN001
                        plain_share: float = 0.2, sim: bool = False) -> list[JobRequest]:
    """The queue of issue 21: `n_pending` jobs, `plain_share` of them plain (no tag, never written), the
    rest tagged as msub tags them (untyped gres, a GPU-type constraint msub picked, the tag) from
    `models`. `sim=True` adds what the simulator needs to know each job's true runtime. On the real
    cluster a job that starts holds its GPUs (`sleep 3600`, cancelled with the rest at the end): with
    `sleep 1`, a GPU freed by an event ran queue jobs back to back, so the queue drained between rounds,
    more the slower the rounds, and a round said to change "nothing" or one arrival saw departures too."""
    rng = random.Random(seed)
    wrap = "sleep 1" if sim else "sleep 3600"
    out = []
    for i in range(n_pending):
        if rng.random() < plain_share:
            secs = rng.uniform(600, 7200)
            out.append(JobRequest(name=f"plain-{i}", num_gpus=rng.choice((1, 1, 2)), time_limit_s=4 * 3600,
                                  wrap=wrap, extra={"runtime_s": secs} if sim else {"--output": "/dev/null"}))
            continue
        m = rng.choice(models)
        first = rng.choice(types)
        iters = int(10 ** rng.uniform(3, 4.5))
        tag = JobTag(model=m, ref=m, group=m, sim=1.0, flops=1.0, iters=iters, bs=12, added=first, ver="bench")
        extra = {"model": m, "iterations": iters, "batch_size": 12} if sim else {"--output": "/dev/null"}
        out.append(JobRequest(name=f"bench-{i}", num_gpus=rng.choice((1, 1, 2, 4)), constraint=first,
                              comment=with_tag(tag, None), wrap=wrap, time_limit_s=4 * 3600, extra=extra))
    return out


def busy_sim(n_pending: int, seed: int = 0, *, equal_priority: bool = True, plain_share: float = 0.2,  # noqa: ANN201
             arrival_gap_s: float = 0.0):
    """The dev cluster's shape in the simulator (4 types x 4 GPUs, one node each), every GPU held by a
    single-GPU plain blocker (1-2 h; time limit 2 h), `n_pending` jobs behind them. `equal_priority`:
    every pending job at priority 1, as the dev cluster's multifactor with zero weights gives them.
    Returns (client, blocker ids, the estimator's table)."""
    from slurm_sim.client import SimClient

    truth = PerfTable.load(TRUTH)
    perf = PerfTable.load(PERF)
    c = SimClient.from_spec(",".join(f"{t}:4x1" for t in BUSY_TYPES), truth=truth)
    rng = random.Random(seed + 1)
    blockers = [c.submit(JobRequest(name="blocker", num_gpus=1, constraint=t, time_limit_s=7200,
                                    extra={"runtime_s": 3600 + rng.uniform(0, 3000)}))
                for t in BUSY_TYPES for _ in range(4)]
    c.advance(0)
    for req in busy_queue_requests(n_pending, busy_models(perf, truth), seed, sim=True, plain_share=plain_share):
        c.submit(req)
        if arrival_gap_s:                   # submitted one by one (an online burst), not as one batch
            c.advance(arrival_gap_s)
    if equal_priority:
        for job in list(c.sim.active.values()):
            if job.state == "PENDING":
                c.sim.set_priority(job, 1)
                job.writes = 0                 # setting up the queue is not msched's churn
    c.advance(0)
    return c, blockers, perf


def site(tmp: Path, name: str, **settings) -> Config:  # noqa: ANN003 - Config keys (write_budget, ...)
    return Config(state_dir=tmp / name, performance=str(PERF), cluster_name=f"bench-{name}", backend="cli",
                  **settings)


def models_of(perf: PerfTable, types) -> list[str]:  # noqa: ANN001
    return sorted(m for m in perf.models() if set(types) <= set(perf.types_for(m)))


def slurm_available() -> str | None:
    """None when a cluster answers; otherwise why not."""
    if not os.environ.get("SLURM_CONF"):
        return "SLURM_CONF is not set (start one with `make slurm-up` and export SLURM_CONF)"
    if not shutil.which("squeue"):
        return "the Slurm client commands are not installed"
    try:
        proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scontrol ping failed: {exc}"
    if proc.returncode != 0 or "UP" not in proc.stdout:
        return f"the controller does not answer: {(proc.stdout + proc.stderr).strip().splitlines()[:1]}"
    return None


def real_round(n_pending: int, tmp: Path, seed: int) -> dict | None:
    why = slurm_available()
    if why:
        print(f"real cluster: skipped ({why})")
        return None
    cfg = site(tmp, "real")
    inner = counting_cli(cfg)
    nodes = [n for n in inner.nodes() if n.gpu_type and n.usable]
    types = sorted({n.gpu_type for n in nodes})
    perf = PerfTable.load(cfg.performance)
    models = models_of(perf, types)
    if not models:
        print(f"real cluster: skipped (no model in {PERF.name} has rows for all of {', '.join(types)})")
        return None
    rng = random.Random(seed)
    ids: list[str] = []
    try:
        t0 = time.perf_counter()
        for n in nodes:     # blockers: untagged, holding every GPU
            ids.append(inner.submit(JobRequest(name="bench-blocker", num_gpus=n.gpus, wrap="sleep 3600",
                                               time_limit_s=7200, extra={"--nodelist": n.name,
                                                                         "--output": "/dev/null"})))
        for i in range(n_pending):
            m = rng.choice(models)
            first = rng.choice(types)
            tag = JobTag(model=m, ref=m, group=m, sim=1.0, flops=1.0, iters=int(10 ** rng.uniform(3, 4.5)),
                         bs=12, added=first, ver="bench")
            ids.append(inner.submit(JobRequest(name=f"bench-{i}", num_gpus=rng.choice((1, 1, 2, 4)),
                                               constraint=first, comment=with_tag(tag, None), wrap="sleep 1",
                                               time_limit_s=4 * 3600, extra={"--output": "/dev/null"})))
        submit_s = time.perf_counter() - t0
        print(f"real cluster: submitted {len(nodes)} blockers + {n_pending} jobs in {submit_s:.1f} s "
              f"({len(nodes)} nodes, types {', '.join(types)})")
        pending_ids = set(ids[len(nodes):])
        original = {j.job_id: (j.priority, j.features) for j in inner.jobs(states=("PENDING",))
                    if j.job_id in pending_ids}
        client = CountingClient(inner)
        store = open_site_store(cfg)
        reorderer = Reorderer(cfg, client, store)
        warm = measure_round(reorderer, client)
        show("real warm-up round (ingests the jobs; not compared)", warm)
        print(f"    queue put back as submitted: {restore(inner, original)} jobs")
        client.batched = False
        r1 = measure_round(reorderer, client)
        show("real round 1 (before: one Slurm call per change)", r1)
        print(f"    queue put back as submitted: {restore(inner, original)} jobs")
        client.batched = True
        r2 = measure_round(reorderer, client)
        show("real round 2 (after: batched update_jobs)", r2)
        r3 = measure_round(reorderer, client)
        show("real round 3 (nothing changed)", r3)
        print(f"real rounds, before -> after batching (same run, same queue): round {r1['wall_s']:.2f} s -> "
              f"{r2['wall_s']:.2f} s, Slurm writes {r1['write_s']:.2f} s -> {r2['write_s']:.2f} s, Slurm processes "
              f"{r1['slurm_processes']} -> {r2['slurm_processes']}, for {r1['update_calls']} -> {r2['update_calls']} "
              f"updates")
        store.dispose()
        return {"warmup": warm, "round1": r1, "round2": r2, "round3": r3, "submit_s": submit_s}
    finally:
        for k in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[k:k + 500]], capture_output=True, timeout=120)


def sim_round(n_pending: int, n_gpus: int, tmp: Path, seed: int) -> dict:
    from slurm_sim.client import SimClient

    cfg = site(tmp, "sim")
    truth = PerfTable.load(TRUTH if TRUTH.exists() else PERF)
    perf = PerfTable.load(cfg.performance)
    per_type = n_gpus // len(SIM_TYPES)
    spec = ",".join(f"{t}:{s}x{max(1, per_type // s)}" for t, s in
                    ((t, 8 if t in ("a100", "titanrtx") else 4) for t in SIM_TYPES))
    inner = SimClient.from_spec(spec, truth=truth)
    gpus = sum(n.gpus for n in inner.nodes())
    models = [m for m in models_of(perf, ("a100",)) if truth.has_model(m)]
    rng = random.Random(seed)
    t0 = time.perf_counter()
    for i in range(n_pending):
        m = rng.choice(models)
        iters = int(10 ** rng.uniform(3, 5))
        first = rng.choice(SIM_TYPES)
        tag = JobTag(model=m, ref=m, group=m, sim=1.0, flops=1.0, iters=iters, bs=12, added=first, ver="bench")
        g = rng.choices((1, 2, 4, 8), (0.7, 0.1, 0.15, 0.05))[0]
        inner.submit(JobRequest(name=f"sim-{i}", num_gpus=g, comment=with_tag(tag, None), constraint="",
                                extra={"model": m, "iterations": iters, "batch_size": 12}))
    inner.advance(1)          # the simulated Slurm starts what fits: the GPUs fill, the rest waits
    submit_s = time.perf_counter() - t0
    print(f"simulated cluster {spec} ({gpus} GPUs): {n_pending} jobs submitted in {submit_s:.1f} s")
    client = CountingClient(inner)
    store = open_site_store(cfg)
    reorderer = Reorderer(cfg, client, store, run_kind="sim", run_name="bench-sim")
    r1 = measure_round(reorderer, client)
    show("sim round 1", r1)
    inner.advance(60)
    r2 = measure_round(reorderer, client)
    show("sim round 2 (60 s later)", r2)
    store.dispose()
    return {"round1": r1, "round2": r2, "gpus": gpus, "spec": spec}


_SDIAG_UPDATE = re.compile(r"REQUEST_UPDATE_JOB\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)")


def sdiag_updates() -> tuple[int, float]:
    """(REQUEST_UPDATE_JOB RPCs so far, controller seconds spent in them), from `sdiag`: the honest count
    of what rounds cost slurmctld (every scontrol update is one such RPC under the job write lock)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=60).stdout
    m = _SDIAG_UPDATE.search(out)
    return (int(m.group(1)), int(m.group(2)) / 1e6) if m else (0, 0.0)


def _wait(predicate, timeout: float, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def real_settle(n_pending: int, tmp: Path, seed: int = 0, *, ends: int = 4, log=print,  # noqa: ANN001
                write_budget: int | None = None, own_process: bool = False, tight: bool = True,
                profile_dir: Path | None = None, events: int = 2, alternate: Path | None = None) -> dict | None:
    """Issue 21 on the real dev cluster: every GPU held by single-GPU plain blockers, `n_pending` jobs
    behind them (`busy_queue_requests`), then rounds through the command-line backend and a SQLite store:
    the burst's first round, four rounds on the unchanged queue (the later ones light once it settled),
    twice a round after `ends` blockers end (one per node in turn) followed by two rounds on the unchanged
    queue, a round after one arrival. Each round: REQUEST_UPDATE_JOB RPCs counted by sdiag
    (and their controller time), wall time, the held plan's estimated makespan, moves and what they buy.
    Every job is cancelled at the end. None (with a line) when no cluster answers. `own_process`: each
    round runs in a new Python process (bench/round_phases.py under `-X importtime`), as cron runs
    `msched reorder`: its wall time is the whole process's (start and imports included), its CPU time
    and peak RSS the process's own, beside the Slurm commands' CPU and peak RSS, and the round's phases.
    `tight`: config tight_queue (the queue read by fixed-width `squeue -O`; False: `squeue --json`).
    `profile_dir` (with `own_process`): each round's process sampled by py-spy (on-CPU stacks, 250 Hz,
    collapsed: `round-<k>.txt`; `bench/round_phases.py --stacks FILE` sums them by phase). `events`: how many
    times `ends` running jobs end (2 by default; past the blockers, running jobs of the queue end, one per node).
    `alternate` (with `own_process`): another msched tree (its msched/ and bench/, e.g. `git archive` of an
    older commit); every other event's rounds run its round_phases.py, so before and after are measured
    alternately on one queue, at the same load (each round's "tree": "this" or "alternate")."""
    from msched.slurm.cli import CliClient

    why = slurm_available()
    if why:
        log(f"real cluster: skipped ({why})")
        return None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    cfg = site(tmp, f"settle-{n_pending}", tight_queue=tight,
               **({} if write_budget is None else {"write_budget": write_budget}))
    client = CliClient(cfg)
    nodes = [n for n in client.nodes() if n.gpu_type and n.usable]
    types = tuple(sorted({n.gpu_type for n in nodes}))
    perf = PerfTable.load(cfg.performance)
    models = busy_models(perf, types=types)
    ids: list[str] = []
    out: dict = {"pending": n_pending, "rounds": []}
    try:
        blockers = [client.submit(JobRequest(name="settle-blocker", num_gpus=1, wrap="sleep 3600", time_limit_s=7200,
                                             extra={"--nodelist": n.name, "--output": "/dev/null"}))
                    for n in nodes for _ in range(n.gpus)]
        ids += blockers
        _wait(lambda: sum(j.is_running for j in client.jobs() if j.job_id in set(blockers)) == len(blockers),
              120, "the blockers to run")
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:         # sbatch processes, four at a time
            ids += list(pool.map(client.submit, busy_queue_requests(n_pending, models, seed, types)))
        out["submit_s"] = time.perf_counter() - t0
        log(f"real cluster: {len(blockers)} blockers + {n_pending} jobs submitted in {out['submit_s']:.0f} s")
        store = open_site_store(cfg)
        reorderer = Reorderer(cfg, client, store, publish=False)

        tree = {"which": "this"}

        def measured(label: str) -> dict:
            if own_process:
                return measured_apart(label)
            c0, s0 = sdiag_updates()
            w0, cpu0 = time.perf_counter(), time.process_time()
            o = reorderer.round()
            wall, cpu = time.perf_counter() - w0, time.process_time() - cpu0
            c1, s1 = sdiag_updates()
            r = o.result
            m = {"label": label, "writes": c1 - c0, "controller_s": s1 - s0, "wall_s": wall, "cpu_s": cpu,
                 "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                 "load1": os.getloadavg()[0], "unchanged": r is None}
            if r is None:           # Slurm as the last round left it: the round did not plan
                m.update(pending=o.pending, update_calls=0, plan_s=0.0, moved=0, kept=0, held_back=0)
                what = "not planned: Slurm unchanged)"
            else:
                st = r.settle
                m.update(pending=len(r.snapshot.pending), update_calls=r.update_calls, plan_s=r.plan_seconds,
                         est_makespan_s=r.plan.est_makespan_end - r.time, moved=st.moved, kept=st.kept,
                         held_back=st.held_back, buys=st.buys())
                what = (f"plan {r.plan_seconds:.2f} s), est. makespan {m['est_makespan_s']:.0f} s; moved {st.moved}, "
                        f"kept {st.kept}, waiting {st.held_back}; buys {st.buys()}")
            out["rounds"].append(m)
            log(f"  {label}: {m['pending']} pending, {m['writes']} REQUEST_UPDATE_JOB ({m['controller_s'] * 1000:.0f} ms "
                f"of controller time), round {wall:.2f} s (CPU {cpu:.2f} s, {what}; "
                f"peak RSS {m['peak_rss_mb']:.0f} MB, load {m['load1']:.1f}")
            return m

        def measured_apart(label: str) -> dict:
            from round_phases import import_seconds

            bench_dir = Path(alternate) / "bench" if tree["which"] == "alternate" else Path(__file__).parent
            argv = [sys.executable, "-X", "importtime", str(bench_dir / "round_phases.py"),
                    str(tmp), f"settle-{n_pending}", str(write_budget or 0), "tight" if tight else "json"]
            if profile_dir is not None:     # sampled, on-CPU only: the phases' shares without cProfile's overhead
                spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
                argv = [spy, "record", "-r", "250", "-f", "raw", "-o",
                        str(profile_dir / f"round-{len(out['rounds']) + 1:02d}.txt"), "--", *argv]
            c0, s0 = sdiag_updates()
            w0 = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            wall = time.perf_counter() - w0
            c1, s1 = sdiag_updates()
            if proc.returncode != 0:
                raise RuntimeError(f"the round's process failed: {proc.stderr.strip().splitlines()[-1:]}")
            m = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
            m.update(label=label, writes=c1 - c0, controller_s=s1 - s0, wall_s=wall, load1=os.getloadavg()[0],
                     import_s=import_seconds(proc.stderr), tree=tree["which"])
            out["rounds"].append(m)
            what = ("light: not read, not planned" if m["light"] else "not planned: Slurm unchanged") \
                if m["unchanged"] else (
                f"plan {m['plan_s']:.2f} s; est. makespan {m['est_makespan_s']:.0f} s; moved {m['moved']}, "
                f"kept {m['kept']}, waiting {m['held_back']}; buys {m['buys']}")
            ph = m["phases"]
            why = f" ({m['read_because']})" if m.get("read_because") else ""    # an older tree's has none
            parts = ", ".join(f"{k} {ph[k]:.2f}" for k in ("digest", "scheduler", "squeue", "sinfo", "snapshot",
                                                          "planner", "settle", "writes", "finished", "store")
                              if k in ph)
            log(f"  {label} [{tree['which']}]: {m['pending']} pending, {m['writes']} REQUEST_UPDATE_JOB "
                f"({m['controller_s'] * 1000:.0f} ms of controller time), queue read {m.get('queue_read') or '-'}{why}, process {wall:.2f} s wall (imports {m['import_s']:.2f} s, round "
                f"{m['round_s']:.2f} s: {parts}), CPU {m['cpu_s']:.2f} s, peak RSS {m['peak_rss_mb']:.0f} MB; "
                f"Slurm commands CPU {m['slurm_cpu_s']:.2f} s, largest RSS {m['slurm_peak_rss_mb']:.0f} MB; "
                f"{what}; load {m['load1']:.1f}")
            return m

        def end_some(event: int) -> None:
            """`ends` blockers end, one per node in turn; each event a different one on each node. Once the
            blockers are spent, running jobs of the queue end (the first submitted on each node in turn)."""
            per = len(blockers) // max(1, len(nodes))
            if event < per:
                ended = [blockers[(k * per + event) % len(blockers)] for k in range(ends)]
            else:
                mine = set(ids)
                on_node: dict[str, list[str]] = {}
                for j in sorted((j for j in client.jobs() if j.is_running and j.job_id in mine),
                                key=lambda j: int(j.job_id)):
                    on_node.setdefault(j.nodes, []).append(j.job_id)
                ended = [on_node[n][0] for n in sorted(on_node)][:ends]
            subprocess.run(["scancel", *ended], capture_output=True, timeout=60)
            gone = set(ended)
            _wait(lambda: not gone & {j.job_id for j in client.jobs() if j.is_running}, 60,
                  "the ended blockers to leave")
            time.sleep(2)                               # Slurm starts what the freed GPUs take

        measured("round 1 (the burst)")
        for k in range(2, 6):
            measured(f"round {k} (nothing changed)")
        for event in range(events):
            tree["which"] = "alternate" if alternate is not None and own_process and event % 2 else "this"
            end_some(event)
            measured(f"after {ends} running jobs end (event {event + 1})")
            measured("again (nothing changed)")
            measured("again (nothing changed)")
        tree["which"] = "this"
        arrival = busy_queue_requests(1, models, seed + 99, types, plain_share=0.0)[0]
        ids.append(client.submit(arrival))
        measured("after one arrival")
        store.dispose()
        return out
    finally:
        for k in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[k:k + 500]], capture_output=True, timeout=120)


def sim_settle(n_pending: int, seed: int = 0, *, ends: int = 4, log=print,  # noqa: ANN001
               write_budget: int | None = None) -> dict:
    """`real_settle`'s rounds on the simulator (`busy_sim`: the dev cluster's shape, the same queue),
    through the round core with the incumbent carried from round to round (an empty one first, as the
    reorderer's first round reads from an empty store); writes are the round's
    Slurm update calls. For sizes the dev cluster cannot take (MaxJobCount) and a machine without Slurm."""
    from msched.estimate.estimators import TagEstimator
    from msched.policy import get_policy
    from msched.rounds.core import run_round
    from msched.rounds.settle import Incumbent, SettleOptions

    c, blockers, perf = busy_sim(n_pending, seed)
    options = SettleOptions() if write_budget is None else SettleOptions(write_budget=write_budget)
    est = TagEstimator(perf)
    policy = get_policy("msched")
    out: dict = {"pending": n_pending, "rounds": []}
    state = {"incumbent": Incumbent()}        # as the reorderer's first round reads an empty store

    def measured(label: str) -> dict:
        w0, cpu0 = time.perf_counter(), time.process_time()
        r = run_round(c, policy, est, incumbent=state["incumbent"], settle_options=options)
        wall, cpu = time.perf_counter() - w0, time.process_time() - cpu0
        state["incumbent"] = r.incumbent
        st = r.settle
        m = {"label": label, "pending": len(r.snapshot.pending), "writes": r.update_calls, "wall_s": wall,
             "cpu_s": cpu, "plan_s": r.plan_seconds, "est_makespan_s": r.plan.est_makespan_end - r.time,
             "moved": st.moved, "kept": st.kept, "held_back": st.held_back, "buys": st.buys(),
             "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        out["rounds"].append(m)
        log(f"  {label}: {m['pending']} pending, {m['writes']} writes, round {wall:.2f} s (CPU {cpu:.2f} s, plan "
            f"{r.plan_seconds:.2f} s), est. makespan {m['est_makespan_s']:.0f} s; moved {st.moved}, kept {st.kept}, "
            f"waiting {st.held_back}; buys {st.buys()}; peak RSS {m['peak_rss_mb']:.0f} MB")
        c.advance(1)
        return m

    log(f"simulated dev cluster (4 types x 4 GPUs, all busy), {n_pending} pending:")
    for k in range(1, 4):
        measured("round 1 (the burst)" if k == 1 else f"round {k}")
    for b in blockers[::max(1, len(blockers) // ends)][:ends]:
        c.cancel(b)
    c.advance(0)
    measured(f"after {ends} running jobs end")
    measured("again")
    return out


def online_churn(n_jobs: int = 400, gap_s: float = 3000.0, seeds: tuple[int, ...] = (1, 2, 3, 4, 5),
                 heads: tuple[float | None, ...] = (None, 1.0), planner: str = "greedy", log=print,  # noqa: ANN001
                 replans: tuple[float | None, ...] = (None,)) -> dict:
    """Writes per job beside makespan and mean JCT on an online trace (`slurm_sim.trace.synth`, Poisson
    arrivals `gap_s` apart, the dev cluster's 4 types x 4 GPUs): each seed replayed with each `heads`
    setting (SettleOptions.head_gpus; None writes the whole queue at once, as rounds did before) and each
    `replans` setting (SettleOptions.replan_head; None plans the whole queue every round)."""
    import dataclasses

    from msched.rounds.settle import SettleOptions
    from slurm_sim.cluster import parse_cluster
    from slurm_sim.compare import Classifier, SimSetup, replay
    from slurm_sim.trace import synth

    truth, perf = PerfTable.load(TRUTH), PerfTable.load(PERF)
    models = busy_models(perf, truth)
    setup = SimSetup(parse_cluster(",".join(f"{t}:4x1" for t in BUSY_TYPES)), truth, perf,
                     Classifier(models, truth), policy_options={"planner": planner})
    out: dict = {"jobs": n_jobs, "gap_s": gap_s, "planner": planner, "runs": []}
    for seed in seeds:
        trace = synth(n_jobs, models, truth, seed=seed, arrival=f"poisson:{gap_s:g}", max_gpus=4)
        for head in heads:
            for replan in replans:
                opts = SettleOptions(head_gpus=head, replan_head=replan)
                m = replay(trace, "msched", dataclasses.replace(setup, settle=opts)).metrics
                run = {"seed": seed, "head_gpus": head, "replan_head": replan, "writes_per_job": m["writes_per_job"],
                       "makespan_s": m["makespan_s"], "mean_jct_s": m["mean_jct_s"]}
                out["runs"].append(run)
                log(f"  seed {seed} head {head if head is not None else 'all'} replan {replan or 'all'}: "
                    f"{m['writes_per_job']:.2f} writes/job, makespan {m['makespan_s']:,.0f} s, "
                    f"mean JCT {m['mean_jct_s']:,.0f} s")
    for head in heads:
        for replan in replans:
            runs = [r for r in out["runs"] if r["head_gpus"] == head and r["replan_head"] == replan]
            log(f"head {head if head is not None else 'all'} replan {replan or 'all'}: "
                f"mean {sum(r['writes_per_job'] for r in runs) / len(runs):.2f} "
                f"writes/job, makespan {sum(r['makespan_s'] for r in runs) / len(runs):,.0f} s, "
                f"mean JCT {sum(r['mean_jct_s'] for r in runs) / len(runs):,.0f} s")
    return out


def squeue_document(path: Path, n_pending: int, n_finished: int) -> int:
    """A `squeue --json` document of `n_pending` pending and `n_finished` completed jobs, each a copy of
    a recorded job of that state (tests/data/slurm/squeue.json: ~3.3 KB a record, as the dev cluster's
    10,000-job document is 32 MB) under its own id. Returns its size in bytes."""
    recorded = json.loads((Path(__file__).resolve().parent.parent / "tests" / "data" / "slurm" / "squeue.json")
                          .read_bytes().decode("utf-8", errors="replace"))
    model = {s: next(j for j in recorded["jobs"] if j["job_state"] == s) for s in ("PENDING", "COMPLETED")}
    with path.open("w") as f:
        f.write('{"meta": ' + json.dumps(recorded["meta"]) + ', "errors": [], "jobs": [')
        for k in range(n_pending + n_finished):
            job = dict(model["PENDING" if k < n_pending else "COMPLETED"], job_id=100000 + k)
            f.write((", " if k else "") + json.dumps(job))
        f.write("]}")
    return path.stat().st_size


def queue_read_memory(n_pending: int = 10_000, n_finished: int = 10_000) -> dict:
    """Peak RSS of a fresh process that reads the queue through CliClient (a stand-in squeue printing
    `squeue_document`), streamed as the client reads it now and read whole as it did before (the
    bytes, then their text, then the records), next to the process's RSS after its imports."""
    code = """
import json, resource, sys
from msched.config import Config
from msched.slurm.cli import CliClient, parse_squeue
c = CliClient(Config(), bin_dir=sys.argv[1]); c._node_types = {}
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if sys.argv[2] == "stream":
    jobs = c._queue()
else:
    jobs = parse_squeue(c._run_bytes(["squeue", "--json"]).decode("utf-8", errors="replace"), c.config, {})
print(json.dumps({"jobs": len(jobs), "imports_mb": base,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
    out: dict = {"pending": n_pending, "finished": n_finished}
    with tempfile.TemporaryDirectory(prefix="bench-squeue-") as d:
        doc = Path(d) / "squeue.json"
        out["document_mb"] = squeue_document(doc, n_pending, n_finished) / 2**20
        fake = Path(d) / "squeue"
        fake.write_text(f"#!/bin/sh\nexec cat {doc}\n")
        fake.chmod(0o755)
        (Path(d) / "sinfo").write_text("#!/bin/sh\nexit 0\n")      # no node: the jobs' nodes stay untyped
        (Path(d) / "sinfo").chmod(0o755)
        for how in ("stream", "whole"):
            proc = subprocess.run([sys.executable, "-c", code, d, how], capture_output=True, text=True, timeout=600,
                                  cwd=Path(__file__).resolve().parent.parent)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.strip().splitlines()[-1:])
            out[how] = json.loads(proc.stdout)
    print(f"queue read, {n_pending} pending + {n_finished} finished ({out['document_mb']:.0f} MB of squeue --json): "
          f"peak RSS streamed {out['stream']['peak_rss_mb']:.0f} MB, read whole {out['whole']['peak_rss_mb']:.0f} MB "
          f"(after imports {out['stream']['imports_mb']:.0f} MB)")
    return out


def queue_reads(n_pending: int, seed: int = 0, repeats: int = 5, log=print) -> dict | None:  # noqa: ANN001
    """The queue read alone, tight (`squeue -O` at fixed widths, msched.slurm.cli.tight) against
    `squeue --json`, on the real dev cluster: 16 single-GPU blockers running and `n_pending` jobs of
    `busy_queue_requests` behind them. Alternating, `repeats` times each, every read in a fresh process
    (bench/round_phases.py --read): wall, that process's CPU for the read (its parse included), squeue's
    own CPU and peak RSS, the process's peak RSS, and that both reads gave the same jobs."""
    from msched.slurm.cli import CliClient

    why = slurm_available()
    if why:
        log(f"real cluster: skipped ({why})")
        return None
    client = CliClient(Config(backend="cli"))
    nodes = [n for n in client.nodes() if n.gpu_type and n.usable]
    types = tuple(sorted({n.gpu_type for n in nodes}))
    models = busy_models(PerfTable.load(str(PERF)), types=types)
    ids: list[str] = []
    out: dict = {"pending": n_pending, "reads": {"tight": [], "json": []}}
    try:
        ids += [client.submit(JobRequest(name="reads-blocker", num_gpus=1, wrap="sleep 3600", time_limit_s=7200,
                                         extra={"--nodelist": n.name, "--output": "/dev/null"}))
                for n in nodes for _ in range(n.gpus)]
        with ThreadPoolExecutor(4) as pool:
            ids += list(pool.map(client.submit, busy_queue_requests(n_pending, models, seed, types)))
        script = str(Path(__file__).with_name("round_phases.py"))
        order: list[tuple[str, str]] = []          # (read, digest of its jobs), in the order read
        for k in range(repeats):
            for how in (("tight", "json") if k % 2 == 0 else ("json", "tight")):
                proc = subprocess.run([sys.executable, script, "--read", how], capture_output=True, text=True,
                                      timeout=600)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr.strip().splitlines()[-1:])
                m = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
                m["load1"] = os.getloadavg()[0]
                out["reads"][how].append(m)
                order.append((how, m["digest"]))
                log(f"  {how}: {m['jobs']} jobs read {m['read']}, {m['wall_s']:.2f} s wall, parse+read CPU "
                    f"{m['cpu_s']:.2f} s, squeue CPU {m['slurm_cpu_s']:.2f} s, squeue RSS {m['slurm_peak_rss_mb']:.0f} MB, "
                    f"process RSS {m['peak_rss_mb']:.0f} MB, {m['bytes'] / 2**20:.1f} MB read, load {m['load1']:.1f}")
        # the queue may change between two reads (a reason Slurm rewrites): compare each read with the next
        # one of the other kind, and say where the queue itself changed (two reads of one kind differ)
        pairs = [(a[1] == b[1]) for a, b in zip(order, order[1:], strict=False) if a[0] != b[0]]
        changes = sum(1 for a, b in zip(order, order[1:], strict=False) if a[0] == b[0] and a[1] != b[1])
        out.update(order=order, agreeing_pairs=sum(pairs), pairs=len(pairs), queue_changes_seen=changes)
        log(f"queue reads at {n_pending} pending: {sum(pairs)} of {len(pairs)} adjacent tight/json pairs read the "
            f"same jobs; the queue changed {changes} time(s) between two reads of one kind")
        out["dry_runs"] = _dry_runs_both_ways(log)
        return out
    finally:
        for k in range(0, len(ids), 500):
            subprocess.run(["scancel", *ids[k:k + 500]], capture_output=True, timeout=120)


def _dry_runs_both_ways(log=print) -> dict:  # noqa: ANN001
    """A dry-run round (reads and plans, writes nothing) with the tight read on and off at the same clock,
    each twice, alternating: whether they read the same jobs and make the same plan and updates, each
    one's estimated makespan, and whether the planner's CPU-time safety net (plan_time_s) cut its
    search (then the plan depends on how fast this loaded machine ran, not on the read)."""
    from msched.slurm.cli import CliClient

    now = time.time()
    got: dict = {"tight": [], "json": []}
    state = tempfile.mkdtemp(prefix="bench-dry-")         # no store: every job planned as new
    for k in range(4):
        how = ("tight", "json")[k % 2]
        cfg = Config(backend="cli", performance=str(PERF), tight_queue=how == "tight", state_dir=state)
        reorderer = Reorderer(cfg, CliClient(cfg), None, publish=False)
        r = reorderer.round(dry_run=True, now=now).result
        search = dict(getattr(reorderer.policy, "last_search", None) or {})
        got[how].append({"jobs": r.jobs, "decisions": [(d.job_id, d.priority, d.gpu_types) for d in r.plan.decisions],
                         "updates": r.updates, "est_makespan_s": r.plan.est_makespan_end - now,
                         "timed_out": bool(search.get("timed_out")), "evals": search.get("evals")})
    out = {}
    for k in range(2):
        a, b = got["tight"][k], got["json"][k]
        out[f"pair{k + 1}"] = {"same_jobs": a["jobs"] == b["jobs"], "same_plan": a["decisions"] == b["decisions"],
                               "same_updates": a["updates"] == b["updates"],
                               "est_makespan_s": [a["est_makespan_s"], b["est_makespan_s"]],
                               "timed_out": [a["timed_out"], b["timed_out"]], "evals": [a["evals"], b["evals"]]}
        log(f"  dry runs, pair {k + 1} (tight, json): {out[f'pair{k + 1}']}")
    return out


def snapshot_caches(n_pending: int = 10_000, repeats: int = 5, seed: int = 1) -> dict:
    """`build_snapshot` with its caches and without (`caches=False`), alternating, on `busy_sim`'s queue of
    `n_pending` jobs, each build from fresh job objects (as Slurm's client hands a round: the per-object
    memo never hits): this process's CPU seconds per build, and the medians' ratio."""
    import copy

    from msched.estimate.estimators import TagEstimator
    from msched.estimate.runtime import times_for
    from msched.rounds.core import build_snapshot

    c, _blockers, perf = busy_sim(n_pending, seed)
    jobs, nodes = c.jobs(), c.nodes()
    est = TagEstimator(times_for(Config(performance=str(PERF)), perf))
    cpu: dict[str, list[float]] = {"cached": [], "uncached": []}
    for _ in range(repeats):
        for label, caches in (("uncached", False), ("cached", True)):
            fresh = [copy.copy(j) for j in jobs]
            c0 = time.process_time()
            build_snapshot(fresh, nodes, est, c.now(), caches=caches)
            cpu[label].append(time.process_time() - c0)
    med = {k: sorted(v)[len(v) // 2] for k, v in cpu.items()}
    out = {"pending": n_pending, "cpu_s": cpu, "median_s": med, "ratio": med["uncached"] / med["cached"],
           "load1": os.getloadavg()[0]}
    print(f"snapshot of {n_pending} pending, fresh job objects: cached {med['cached']:.3f} s CPU, uncached "
          f"{med['uncached']:.3f} s (median of {repeats}; x{out['ratio']:.2f}), load {out['load1']:.1f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=200, help="jobs queued on the real cluster")
    ap.add_argument("--sim-pending", type=int, default=10_000)
    ap.add_argument("--sim-gpus", type=int, default=1_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (50 real, 2,000 simulated jobs)")
    ap.add_argument("--full", action="store_true", help="the default sizes")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--no-sim", action="store_true")
    ap.add_argument("--settle", default="", metavar="N[,N...]",
                    help="only the rounds-settle scenario (simulated, then the real cluster unless --no-real) "
                         "at these queue lengths (e.g. 1000,5000)")
    ap.add_argument("--budget", type=int, default=None,
                    help="the settle scenario's write budget per round (default: the config's write_budget)")
    ap.add_argument("--events", type=int, default=2, help="the settle scenario's events (4 running jobs end)")
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="with --settle --own-process: py-spy's samples of each round in DIR (round-<k>.txt; "
                         "needs py-spy: pip install py-spy)")
    ap.add_argument("--alternate", type=Path, default=None, metavar="TREE",
                    help="with --settle --own-process: every other event's rounds run TREE's bench/round_phases.py "
                         "(another msched tree, e.g. an older commit's git archive): before/after on one queue")
    ap.add_argument("--own-process", action="store_true",
                    help="the settle scenario's rounds each in a new process, as cron runs `msched reorder`")
    ap.add_argument("--online-churn", default="", metavar="JOBS,GAP_S",
                    help="only writes per job on an online trace (e.g. 400,3000), whole queue vs head, per --seeds")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="the online-churn seeds (default 1-5)")
    ap.add_argument("--heads", default="all,1", help="the online-churn head sizes, places per GPU ('all': the "
                                                     "whole queue; default all,1)")
    ap.add_argument("--replans", default="all", help="the online-churn replan_head settings, places per GPU "
                                                     "('all': the whole queue; e.g. all,8)")
    ap.add_argument("--planner", default="greedy", choices=("greedy", "optimize", "cpsat"),
                    help="the online-churn planner (default greedy: one plan per snapshot)")
    ap.add_argument("--queue-memory", default="", metavar="PENDING,FINISHED",
                    help="only the queue read's peak memory (a stand-in squeue; e.g. 10000,10000)")
    ap.add_argument("--queue-read", default="tight", choices=("tight", "json"),
                    help="the settle scenario's queue read (config tight_queue; default tight)")
    ap.add_argument("--queue-reads", type=int, default=0, metavar="PENDING",
                    help="only the queue read, tight against squeue --json, on the real cluster")
    ap.add_argument("--snapshot-caches", type=int, default=0, metavar="PENDING",
                    help="only build_snapshot with and without its caches (e.g. 10000)")
    args = ap.parse_args()
    if args.snapshot_caches:
        res = snapshot_caches(args.snapshot_caches)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return
    if args.online_churn:
        jobs, gap = args.online_churn.split(",")
        heads = tuple(None if h.strip() == "all" else float(h) for h in args.heads.split(","))
        replans = tuple(None if h.strip() == "all" else float(h) for h in args.replans.split(","))
        res = online_churn(int(jobs), float(gap), tuple(int(x) for x in args.seeds.split(",")), heads,
                           planner=args.planner, replans=replans)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return
    if args.queue_reads:
        res = queue_reads(args.queue_reads, args.seed)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return
    if args.queue_memory:
        res = queue_read_memory(*(int(x) for x in args.queue_memory.split(",")))
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return
    if args.settle:
        sizes = [int(x) for x in args.settle.split(",") if x.strip()]
        res: dict = {}
        with tempfile.TemporaryDirectory(prefix="bench-settle-") as d:
            for n in sizes:
                res[str(n)] = {"sim": sim_settle(n, args.seed, write_budget=args.budget) if not args.no_sim else None,
                               "real": real_settle(n, Path(d), args.seed, write_budget=args.budget,
                                                   own_process=args.own_process, tight=args.queue_read == "tight",
                                                   profile_dir=args.profile, events=args.events,
                                                   alternate=args.alternate)
                               if not args.no_real else None}
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return
    if args.quick:
        args.pending, args.sim_pending = min(args.pending, 50), min(args.sim_pending, 2000)
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-reorder-") as d:
        tmp = Path(d)
        if not args.no_real:
            out["real"] = real_round(args.pending, tmp, args.seed)
        if not args.no_sim:
            out["sim"] = sim_round(args.sim_pending, args.sim_gpus, tmp, args.seed)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
