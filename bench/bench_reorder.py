"""A whole `msched reorder` round, end to end: Slurm reads, planning, writes, database recording.

    python bench/bench_reorder.py [--pending 200] [--sim-pending 10000] [--sim-gpus 1000] [--json FILE]
                                  [--quick | --full] [--no-real] [--no-sim]

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
import shutil
import subprocess
import sys
import tempfile
import time
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


def site(tmp: Path, name: str) -> Config:
    return Config(state_dir=tmp / name, performance=str(PERF), cluster_name=f"bench-{name}", backend="cli")


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
    args = ap.parse_args()
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
