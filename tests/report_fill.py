"""A small, realistic reorderer history written through the store's own API (records.py), for the
report tests: tagged jobs of four similarity groups on two GPU types, rounds every 10 minutes with
plans and estimates, completions with actual runtimes, one failed round and one starving job.

The schedule is made by a tiny list scheduler here (earliest free GPU), and each group's actual
runtime is its estimate times a fixed factor, so the report's ratios can be checked against the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from msched.policy.snapshot import ClusterSnapshot, JobDecision, NodeState, PendingJob, Plan, RunningJob
from msched.slurm.base import SlurmJob
from msched.store.writes import ingest_jobs, record_completions, record_round
from msched.tag import JobTag, with_tag

GPUS = {"a100": 4, "titanv": 4}
# per-iteration seconds by reference and type (shape from the shared table: VGG gains most on a100,
# DenseNet runs better on titanv); and how far each group's actual runtime is from its estimate
SPEED = {"resnet50": {"a100": 0.060, "titanv": 0.085}, "vgg16": {"a100": 0.070, "titanv": 0.160},
         "mobilenet_v2": {"a100": 0.030, "titanv": 0.036}, "densenet121": {"a100": 0.090, "titanv": 0.080}}
GROUP = {"resnet50": "resnet", "vgg16": "vgg", "mobilenet_v2": "mobilenet", "densenet121": "densenet"}
ACTUAL_FACTOR = {"resnet": 1.0, "vgg": 1.25, "mobilenet": 0.9, "densenet": 2.0}
HOURS = 6.0
ROUND_S = 600.0


@dataclass
class SynthJob:
    job_id: str
    model: str
    submit: float
    iters: int
    gpu_type: str = ""
    start: float | None = None
    end: float | None = None

    @property
    def est(self) -> dict[str, float]:
        return {t: self.iters * s for t, s in SPEED[self.model].items()}

    def tag(self) -> JobTag:
        return JobTag(model=self.model, ref=self.model, group=GROUP[self.model], sim=1.0, flops=1.0,
                      iters=self.iters, bs=32, added="a100|titanv")


def schedule(now: float) -> list[SynthJob]:
    t0 = now - HOURS * 3600
    models = list(SPEED)
    jobs = [SynthJob(str(1000 + i), models[i % 4], t0 + i * 420.0, 60000 + 20000 * (i % 5)) for i in range(40)]
    free = {(t, g): t0 for t in GPUS for g in range(GPUS[t])}
    for j in jobs:
        # earliest completion over the GPUs, as the policy would choose
        (t, g), start = min(((k, max(v, j.submit)) for k, v in free.items()),
                            key=lambda kv: kv[1] + j.est[kv[0][0]])
        start += 30.0   # Slurm's own start latency
        if start >= now:
            continue     # still pending
        j.gpu_type, j.start = t, start
        j.end = start + j.est[t] * ACTUAL_FACTOR[GROUP[j.model]]
        free[(t, g)] = j.end
    # one job whose request nothing can run: pending for 30 hours, past the starvation age
    jobs.append(SynthJob("999", "vgg16", now - 30 * 3600, 50000))
    return jobs


def slurm_view(j: SynthJob, at: float) -> SlurmJob | None:
    if j.submit > at:
        return None
    if j.start is None or at < j.start:
        state, start, end, gtype = "PENDING", None, None, None
    elif j.end is not None and at >= j.end:
        state, start, end, gtype = "COMPLETED", j.start, j.end, j.gpu_type
    else:
        state, start, end, gtype = "RUNNING", j.start, None, j.gpu_type
    return SlurmJob(job_id=j.job_id, state=state, name=f"train-{j.model}", user="alice", submit_time=j.submit,
                    start_time=start, end_time=end, time_limit_s=86400.0, num_gpus=1,
                    comment=with_tag(j.tag(), None), gpu_type=gtype, features="a100|titanv")


def fill(store, now: float, name: str = "testcluster") -> list[SynthJob]:
    """Write the history into `store`; returns the jobs (with their true start/end) for checks."""
    jobs = schedule(now)
    run = store.run_id("slurm", name, gpus=GPUS)
    t = now - HOURS * 3600 + 60
    k = 0
    while t <= now:
        views = [v for j in jobs if (v := slurm_view(j, t)) is not None]
        pending = [v for v in views if v.state == "PENDING"]
        running = [v for v in views if v.state == "RUNNING"]
        by_id = {j.job_id: j for j in jobs}
        nodes = tuple(NodeState(f"n-{ty}", ty, n, n - sum(1 for v in running if v.gpu_type == ty))
                      for ty, n in GPUS.items())
        snap = ClusterSnapshot(
            now=t, nodes=nodes,
            running=tuple(RunningJob(v.job_id, v.gpu_type, 1, v.start_time + by_id[v.job_id].est[v.gpu_type])
                          for v in running),
            pending=tuple(PendingJob(v.job_id, v.submit_time, 1, est_runtime_s=by_id[v.job_id].est)
                          for v in pending))
        decisions = [JobDecision(v.job_id, 1000 - i, (by_id[v.job_id].gpu_type or "a100",),
                                 est_runtime_s=by_id[v.job_id].est) for i, v in enumerate(pending)]
        result = SimpleNamespace(
            time=t, snapshot=snap, plan=Plan("msched", decisions, est_makespan_end=t + 3600.0),
            jobs=views, updates=[SimpleNamespace(job_id=d.job_id) for d in decisions[:2]], skipped=[],
            plan_seconds=0.002 + 0.0001 * len(pending), update_calls=min(2, len(decisions)))
        with store.write() as s:
            ingest_jobs(s, run, views, now=t)
            record_completions(s, run, [v for v in views if v.state != "PENDING"], now=t)
            if k == 5:
                record_round(s, run, None, error="squeue: error: Unable to contact slurm controller", time=t)
            else:
                record_round(s, run, result)
        t += ROUND_S
        k += 1
    with store.write() as s:
        final = [v for j in jobs if (v := slurm_view(j, now)) is not None]
        record_completions(s, run, final, now=now)
    return jobs
