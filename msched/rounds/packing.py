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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from msched.policy.packing import PackingPlan, ShardJob, pair_shard_jobs, pair_value, shard_exclusions
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
               estimator=None, shard_partitions: frozenset[str] | None = None,  # noqa: ANN001
               planned: dict[str, int] | None = None, nodes: Sequence[SlurmNode] | None = None) -> list[ShardJob]:
    """The pairing's view of Slurm's shard jobs. `nodes` (the cluster's): each pending job's `reach`, the
    shard types its owner's own request reaches (`ShardJob.reach`; None without nodes: any)."""
    from msched.estimate.interference import InterferenceError, peak_gb, speeds_from_tag

    reach_of = _Reach(nodes, canon) if nodes is not None else None
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
        prio = (planned or {}).get(job.job_id, job.priority) if job.is_pending else job.priority
        packed = tuple(canon(t) for t in (tag.added or "").split("|") if t) if tag is not None else ()
        out.append(ShardJob(job.job_id, prio, speeds, peak, job.is_running,
                            canon(job.gpu_type) if job.gpu_type else None, job.start_time or 0.0, length, packed,
                            reach_of(job) if reach_of is not None and job.is_pending else None))
    return out


class _Reach:
    """The shard types a pending shard job's own request reaches: the types of the shard nodes in its
    partitions whose features satisfy the owner's part of its constraint (msched's GPU-type terms
    removed: those are the round's to write). The pairing writes a pair's type as the job's feature
    (`packing_round`); a type outside this set would leave the job unable to start (pack14's gap: the
    owner's `bigmem` only on V100 nodes, or a partition holding only P100 shard nodes). A constraint
    msched cannot read reaches nothing: the job is paired with no one and written no type. Kept per
    (constraint, partitions), which many jobs share."""

    def __init__(self, nodes: Sequence[SlurmNode], canon: Callable[[str], str]) -> None:
        shard = [n for n in nodes if n.gpu_type and n.gpus > 0 and SHARD_FEATURE in n.features]
        self._types = tuple(dict.fromkeys(canon(n.gpu_type) for n in shard))
        self._nodes = [(canon(n.gpu_type), n.gpus, n.features, n.partitions) for n in shard]
        self._canon = canon
        self._kept: dict[tuple[str, str], tuple[str, ...]] = {}

    def __call__(self, job: SlurmJob) -> tuple[str, ...]:
        key = (job.features or "", job.partition or "")
        hit = self._kept.get(key)
        if hit is None:
            hit = self._kept[key] = self._read(*key)
        return hit

    def _read(self, features: str, partition: str) -> tuple[str, ...]:
        from msched.policy.feasibility import node_sizes
        from msched.slurm.feature_expr import ConstraintError

        canon, types = self._canon, self._types
        user_part, _types = split(features, lambda n: canon(n) if canon(n) in types else None)
        try:
            sizes = node_sizes(self._nodes, constraint=user_part, partitions=partition.split(","))
        except ConstraintError as exc:
            log.warning("%s; shard job paired on no type", exc)
            return ()
        return tuple(t for t in types if t in sizes)


def shard_partitions(nodes: Sequence[SlurmNode]) -> frozenset[str]:
    """Partitions that hold shard nodes (a shard job names only these)."""
    return frozenset(p for n in nodes if SHARD_FEATURE in n.features for p in n.partitions)


def planned_shard_job(job: SlurmJob, shard_parts: frozenset[str]) -> SlurmJob | None:
    """A pending shard job as the planner sees it: a 1-GPU job (it takes a GPU of its own unless a
    partner's shard is open, so a whole GPU is the planner's safe view), so that it gets the planner's
    order and GPU type like every managed job instead of waiting outside the plan. None for any other
    GPU-less job (left out, as before). The pairing then reorders the shard jobs among the priorities
    the planner gave them (`with_pairing`)."""
    if not shard_parts or not job.is_pending or not is_shard_job(job, shard_parts):
        return None
    return replace(job, num_gpus=1)


def with_pairing(wanted: list, shard_updates: list, plan: PackingPlan | None) -> list:
    """The round's updates with the pairing's last word on shard jobs: the planner's priority (and,
    where the pairing names one, GPU type) for each job the pairing ordered is replaced by the
    pairing's, which permutes the planner's priorities of those jobs (`packing_round(planned=...)`)."""
    if plan is None:
        return wanted + shard_updates
    mine = {(j, "priority") for j in plan.priorities} | {(j, "features") for j in plan.gpu_types}
    return [u for u in wanted if (u.job_id, u.field) not in mine] + shard_updates


SHARDS_PER_GPU = 2        # the dev cluster's and the bench's gres.conf (README: sharing GPUs through shards)


def shard_view(jobs: Sequence[SlurmJob], nodes: Sequence, running: Sequence, estimator, now: float,  # noqa: ANN001, PLR0913
               canon: Callable[[str], str], shard_parts: frozenset[str] | None = None,
               shards_per_gpu: Mapping[str, int] | None = None) -> tuple[tuple, tuple, tuple]:
    """The snapshot's view of GPUs that shard jobs hold: (nodes with those GPUs taken, running jobs with
    one entry per such GPU, `ShardGpu`s). Slurm shows a shard job with no GPUs (and real Slurm counts a
    GPU that shards use as no `gpu` allocation), so without this the planner sees such a GPU free or
    busy for an unknown time. Which jobs share a GPU: the GPU index Slurm reports (`SlurmJob.gpu_index`,
    `_by_gpu`). `shard_parts`: the partitions of shard nodes
    (a GPU-less job elsewhere whose comment claims `pack` holds no GPU here). A job's end: its solo estimate on its type, stretched by its predicted own
    speed beside a partner (msched.estimate.interference); a GPU frees when its last job ends. Pure
    apart from the estimator; never raises for one bad job. `shards_per_gpu`: per node, as Slurm
    configured it (`SlurmNode.shards_per_gpu`, from sinfo's Gres; SHARDS_PER_GPU where unknown); a GPU's
    `held` counts each job's shards (a 2-shard job fills a 2-shard GPU), never the node's GresUsed."""
    from msched.policy.snapshot import NodeState, RunningJob, ShardGpu
    from msched.rounds.core import _end_of, _estimate_on

    per_node: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        if job.is_running and job.num_gpus <= 0 and job.nodes and is_shard_job(job, shard_parts):
            per_node.setdefault(job.nodes.split(",")[0], []).append(job)
    if not per_node:
        return tuple(nodes), tuple(running), ()
    type_of = {n.name: n.gpu_type for n in nodes}
    try:
        from msched.estimate.interference import InterferenceError, load_model, speeds_from_tag
        model = load_model()
        times = getattr(getattr(estimator, "inner", estimator), "times", None)
    except InterferenceError:
        model = times = None
    gpus, extra = [], []
    for name, held in per_node.items():
        gtype = type_of.get(name) or (canon(held[0].gpu_type) if held[0].gpu_type else None)
        if gtype is None:
            continue
        per_gpu = (shards_per_gpu or {}).get(name) or SHARDS_PER_GPU
        for group in _by_gpu(held, per_gpu):
            speeds = {}
            if model is not None and times is not None and len(group) > 1:
                for j in group:
                    try:
                        speeds[j.job_id] = speeds_from_tag(j.tag, times)
                    except (InterferenceError, ValueError, KeyError):
                        speeds[j.job_id] = None
            ends, predicted = [], []
            for j in group:
                est = _estimate_on(j, j.tag, gtype, estimator)
                own = speeds.get(j.job_id)
                partner = next((speeds.get(o.job_id) for o in group if o is not j), None)
                v = None
                if own is not None and partner is not None:
                    try:
                        v = model.own_speed(own, partner, gtype)
                    except InterferenceError:
                        v = None
                if est is not None and v:
                    est = est / max(0.1, v)
                predicted.append(v)
                ends.append(_end_of(j, est, now)[0])
            last = max(ends)
            gpus.append(ShardGpu(name, gtype, tuple(j.job_id for j in group), last, per_gpu,
                                 tuple(predicted) if len(group) > 1 else (), sum(max(1, j.shards) for j in group)))
            extra.append(RunningJob(group[ends.index(last)].job_id, gtype, 1, last, (name,)))
    held_on = {}
    for g in gpus:
        held_on[g.node] = held_on.get(g.node, 0) + 1
    by_gpu_jobs: dict[str, float] = {}
    for r in running:
        for h in r.nodes:
            by_gpu_jobs[h] = by_gpu_jobs.get(h, 0.0) + r.num_gpus / max(1, len(r.nodes))
    out_nodes = tuple(NodeState(n.name, n.gpu_type, n.gpus, max(0, min(
        n.gpus_free, n.gpus - held_on[n.name] - round(by_gpu_jobs.get(n.name, 0.0)))))
        if n.name in held_on else n for n in nodes)
    return out_nodes, (*running, *extra), tuple(gpus)


def _by_gpu(held: list[SlurmJob], per_gpu: int = SHARDS_PER_GPU) -> list[list[SlurmJob]]:
    """One node's running shard jobs grouped by the GPU they share. Slurm says which GPU each holds
    (squeue's gres_detail, `SlurmJob.gpu_index`): jobs with the same one index share it, whatever order
    they started in (after a departure, two jobs alone on two GPUs stay apart). When any job's GPU is
    not known (a single-index read failed), the node falls back to start order, each job on the first GPU
    with room for its shards (`per_gpu`, the node's shards per GPU, a GPU), else a GPU of its own: as
    Slurm placed them (tests/data/slurm/shards_cases.json: a 2-shard job beside a 1-shard one's open
    shard took an empty GPU); exact until a job leaves."""
    held = sorted(held, key=lambda j: (j.start_time or 0.0, j.job_id))
    if all(len(j.gpu_index) == 1 for j in held):
        groups: dict[int, list[SlurmJob]] = {}
        for j in held:
            groups.setdefault(j.gpu_index[0], []).append(j)
        return [groups[k] for k in sorted(groups)]
    out: list[list[SlurmJob]] = []
    room: list[int] = []
    for j in held:
        need = max(1, j.shards)
        k = next((k for k, r in enumerate(room) if r >= need), len(out))
        if k == len(out):
            out.append([])
            room.append(per_gpu)
        out[k].append(j)
        room[k] -= need
    return out


def packing_round(jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], estimator,  # noqa: ANN001
                  gpu_type_of: Callable[[str], str] | None = None, *, threshold: float | None = None,
                  planned: Sequence = (), guard: str = "bound", exclude: bool = False) -> tuple[list, PackingPlan | None]:
    """(the updates that bring Slurm's shard jobs to the pairing, the pairing) — ([], None) when the
    cluster has no shard nodes or no shard job waits. `planned`: the round's other updates; the
    priorities they give shard jobs (the planner's) are the ones the pairing permutes. Never raises
    for one bad job. `guard`: config `pack_guard` ("bound": the quantile guard's `guard_slower` and
    both jobs on their best shard type; "mean": the mean forest's `slower_speed`). `exclude` (config
    `pack_exclude`): the plan also says which shard nodes each pending shard job must not start on
    (`PackingPlan.excluded`, `exclusions`), which the round writes as ExcNodeList
    (msched.rounds.holds.apply_exclusions)."""
    from msched.estimate.interference import DEFAULT_THRESHOLD, InterferenceError, load_model, type_usable_gb
    from msched.rounds.core import Update

    canon = gpu_type_of or (lambda name: name.strip().lower())
    types = list(dict.fromkeys(canon(n.gpu_type) for n in nodes
                               if n.gpu_type and n.gpus > 0 and n.usable and SHARD_FEATURE in n.features))
    parts = shard_partitions(nodes)
    if not types or not any(is_shard_job(j, parts) and j.is_pending for j in jobs):
        return [], None
    try:
        model = load_model()
        slower = model.slower_for(guard)
    except InterferenceError as exc:
        log.warning("packing skipped this round: %s", exc)
        return [], None
    times = getattr(getattr(estimator, "inner", estimator), "times", None)
    known = shard_jobs(jobs, times, canon, estimator, parts,
                       {u.job_id: int(u.value) for u in planned if u.field == "priority"}, nodes)
    plan = pair_shard_jobs(known, model.combined_throughput, types, type_usable_gb,
                           threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
                           slower=slower, own=model.own_speed, best_type=guard == "bound")
    by_id = {j.job_id: j for j in jobs}
    if exclude:
        threshold_ = DEFAULT_THRESHOLD if threshold is None else threshold
        plan = plan._replace(excluded=exclusions(
            jobs, known, nodes, canon, types,
            lambda a, b, t: pair_value(a, b, t, model.combined_throughput, type_usable_gb(t), threshold_, slower)
            is not None, plan.priorities))
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


def exclusions(jobs: Sequence[SlurmJob], known: Sequence[ShardJob], nodes: Sequence[SlurmNode],
               canon: Callable[[str], str], types: Sequence[str],
               ok: Callable[[ShardJob, ShardJob, str], bool],
               priorities: Mapping[str, int] | None = None) -> dict[str, tuple[str, ...]]:
    """{pending shard job: shard nodes it must not start on} (msched.policy.packing.shard_exclusions): the
    running shard jobs alone on a GPU (`_by_gpu`, each node's shards per GPU) are the partners it may be
    given; a job may land on the types its constraint names (all shard types when it names none) that its
    request reaches (`ShardJob.reach`); the pending ones start in the order of `priorities` (the pairing's; else the ones they hold)."""
    priorities = priorities or {}
    shard_nodes = {n.name: canon(n.gpu_type) for n in nodes
                   if SHARD_FEATURE in n.features and n.gpu_type and canon(n.gpu_type) in types}
    per_gpu = {n.name: (n.shards_per_gpu or SHARDS_PER_GPU) for n in nodes if n.name in shard_nodes}
    by_id = {j.job_id: j for j in known}
    held: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        if job.job_id in by_id and job.is_running and job.nodes and job.nodes.split(",")[0] in shard_nodes:
            held.setdefault(job.nodes.split(",")[0], []).append(job)
    lone = {}
    for name, here in held.items():
        alone = [g[0] for g in _by_gpu(here, per_gpu[name]) if len(g) == 1 and max(1, g[0].shards) < per_gpu[name]]
        if alone:
            lone[name] = [by_id[j.job_id] for j in alone]
    pending = sorted((j for j in known if not j.running), key=lambda j: -priorities.get(j.job_id, j.priority))
    slurm_job = {j.job_id: j for j in jobs if j.job_id in by_id}
    allowed = {}
    for j in pending:
        job = slurm_job[j.job_id]
        _user, named = split(job.features or "", lambda n: canon(n) if canon(n) in types else None)
        allowed[j.job_id] = (frozenset(named) if named else frozenset(types)) \
            & (frozenset(types) if j.reach is None else frozenset(j.reach))   # never a node it cannot reach
    return shard_exclusions(pending, lone, shard_nodes, ok, allowed)
