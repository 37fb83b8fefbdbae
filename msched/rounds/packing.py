"""The round's packing step: Slurm's shard jobs -> msched.policy.packing -> priority/feature updates.

A shard job is one msub submitted as such: its tag carries `pack` (msched.msub.packing), it asks
for no whole GPU, and every partition it names holds shard nodes. Anything else is never touched here
(a plain job, a gpu job whose owner wrote `pack=` into a comment, a job in another partition). A user
can still forge `pack=` on a GPU-less job in the shard partition: it is then ordered among the shard
jobs (the priorities they hold), which is what its owner could have had by submitting it with --pack. Shard nodes are the GPU nodes carrying the `shard` feature (the site configuration
the README describes: `Feature=<type>,shard`). Pure glue: reading jobs, the estimator's iteration-time
source and the interference model; the decision is `pair_shard_jobs`'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from msched.policy.packing import PackingPlan, ShardJob, pair_shard_jobs
from msched.slurm.base import SlurmJob, SlurmNode
from msched.slurm.feature_expr import combine, split

log = logging.getLogger("msched.rounds.packing")
SHARD_FEATURE = "shard"


def is_shard_job(job: SlurmJob, shard_partitions: frozenset[str] | None = None) -> bool:
    tag = job.tag
    if tag is None or tag.pack is None or job.num_gpus > 0:
        return False
    parts = [p for p in (job.partition or "").split(",") if p]
    return shard_partitions is None or (bool(parts) and all(p in shard_partitions for p in parts))


def shard_jobs(jobs: Sequence[SlurmJob], times, canon: Callable[[str], str],  # noqa: ANN001
               estimator=None, shard_partitions: frozenset[str] | None = None) -> list[ShardJob]:  # noqa: ANN001
    from msched.estimate.interference import InterferenceError, peak_gb, speeds_from_tag

    out = []
    for job in jobs:
        if not is_shard_job(job, shard_partitions) or not (job.is_pending or job.is_running):
            continue
        if job.is_pending and (job.priority <= 0 or job.reason.startswith(("JobHeld", "Dependency"))):
            continue                          # held or waiting: never written (as in build_snapshot)
        tag = job.tag
        try:
            speeds = speeds_from_tag(tag, times) if times is not None else None
        except (InterferenceError, ValueError, KeyError) as exc:
            log.warning("job %s: no speeds for packing (%s)", job.job_id, exc)
            speeds = None
        try:
            length = min(estimator(job, tag).values(), default=0.0) if estimator is not None else 0.0
        except Exception as exc:  # noqa: BLE001 - a bad tag must not stop the round
            log.warning("job %s: no estimate for packing (%s)", job.job_id, exc)
            length = 0.0
        peak = tag.mem if tag.mem is not None else peak_gb(tag.model, tag.bs)    # msub's memory estimate first
        out.append(ShardJob(job.job_id, job.priority, speeds, peak, job.is_running,
                            canon(job.gpu_type) if job.gpu_type else None, job.start_time or 0.0, length))
    return out


def packing_round(jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], estimator,  # noqa: ANN001
                  gpu_type_of: Callable[[str], str] | None = None, *, threshold: float | None = None
                  ) -> tuple[list, PackingPlan | None]:
    """(the updates that bring Slurm's shard jobs to the pairing, the pairing) — ([], None) when the
    cluster has no shard nodes or no shard job waits. Never raises for one bad job."""
    from msched.estimate.interference import DEFAULT_THRESHOLD, InterferenceError, load_model, type_usable_gb
    from msched.rounds.core import Update

    canon = gpu_type_of or (lambda name: name.strip().lower())
    types = list(dict.fromkeys(canon(n.gpu_type) for n in nodes
                               if n.gpu_type and n.gpus > 0 and n.usable and SHARD_FEATURE in n.features))
    parts = frozenset(p for n in nodes if SHARD_FEATURE in n.features for p in n.partitions)
    if not types or not any(is_shard_job(j, parts) and j.is_pending for j in jobs):
        return [], None
    try:
        model = load_model()
    except InterferenceError as exc:
        log.warning("packing skipped this round: %s", exc)
        return [], None
    times = getattr(getattr(estimator, "inner", estimator), "times", None)
    known = shard_jobs(jobs, times, canon, estimator, parts)
    plan = pair_shard_jobs(known, model.combined_throughput, types, type_usable_gb,
                           threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
                           slower=model.slower_speed)
    by_id = {j.job_id: j for j in jobs}
    updates = []
    for job_id, gpu_type in plan.gpu_types.items():
        job = by_id[job_id]
        user_part, mine = split(job.features or "", lambda n: canon(n) if canon(n) in types else None)
        if set(mine) != {gpu_type}:
            expr = combine(user_part, [gpu_type])
            if expr is not None and expr != job.features:
                updates.append(Update(job_id, "features", expr, job.features))
    for job_id, prio in plan.priorities.items():
        if prio != by_id[job_id].priority and prio >= 1:
            updates.append(Update(job_id, "priority", int(prio), by_id[job_id].priority))
    return updates, plan
