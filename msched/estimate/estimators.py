"""Runtime estimators: what a job will take on each GPU type, from its Slurm job and its msched tag.

Two kinds, one call signature `(job: SlurmJob, tag: JobTag) -> dict[gpu_type, seconds]`, so the round
core does not care which one it was given:

- `TagEstimator(perf)`: what msched knows (DESIGN policy point 4): the tag's nearest reference and its
  rows in the performance table, scaled by the tag's FLOPs ratio, at the job's GPU count and per-GPU batch
  size (`tag.bs`, else the reference's measured batch size).
- `TruthEstimator(truth, knowledge=None)`: the oracle: the job's own model rows in the truth table (FLOPs
  ratio 1).

Work (iterations) comes from `tag.iters`; without it the job is assumed to need its whole time limit on
the slowest type its request allows, *as msched estimates it*. The truth estimator fixes the work the same
way (from the knowledge table when given one), so the oracle and msched agree on how much work a job is and
differ only in how fast each type does it.

Types whose estimate exceeds the job's time limit are dropped (Slurm would kill the job there); types
without data are unknown and left out. When msched's estimate exceeds the limit on *every* type the
estimate contradicts the job's own limit (a FLOPs ratio far off for a small model, say): the tag
estimator then trusts the limit and fixes the work as for a job without iterations. Both estimators cache the per-iteration seconds per
(model, GPU count, batch size, allowed types), which is what makes planning 10k jobs a round cheap.
"""

from __future__ import annotations

from collections.abc import Iterable

from msched.estimate.perf_table import PerfTable
from msched.estimate.runtime import iteration_seconds, runtimes, work_iterations
from msched.slurm.base import SlurmJob
from msched.tag import JobTag

Estimate = dict[str, float]


class _CachedEstimator:
    """Shared machinery: per-iteration seconds cached by (model, gpus, bs, flops, types)."""

    kind = "abstract"

    def __init__(self, table: PerfTable, types: Iterable[str] | None = None):
        self.table = table
        self.types = tuple(sorted(types)) if types is not None else None
        self._per_iter: dict[tuple, dict[str, float]] = {}

    def per_iteration(self, model: str, num_gpus: int, batch_size: int | None, flops: float = 1.0,
                      table: PerfTable | None = None) -> dict[str, float]:
        """Seconds per iteration per GPU type (types without data left out)."""
        table = table or self.table
        key = (id(table), model, max(1, num_gpus), batch_size, flops)
        hit = self._per_iter.get(key)
        if hit is None:
            hit = iteration_seconds(table, model, max(1, num_gpus), batch_size, flops, types=self.types)
            self._per_iter[key] = hit
        return hit


def request_types(job: SlurmJob, tag: JobTag | None, per_iter: dict[str, float]) -> dict[str, float]:
    """The subset of `per_iter` the user's request allows (a pinned type), used to fix the work."""
    pinned = job.gres_gpu_type or (tag.pinned if tag else "")
    if pinned:
        allowed = {t.strip().lower() for t in pinned.split("|") if t.strip()}
        sub = {t: v for t, v in per_iter.items() if t in allowed}
        if sub:
            return sub
    return per_iter


class TagEstimator(_CachedEstimator):
    """msched's knowledge: the tag's reference (or the model itself when it is in the table)."""

    kind = "tag"

    def reference_of(self, tag: JobTag) -> tuple[str, float]:
        """(model whose rows to use, FLOPs factor). A reference model uses its own rows as they are."""
        if tag.model and self.table.has_model(tag.model):
            return tag.model, 1.0
        ratio = tag.perf_flops_ratio
        return tag.pref or tag.ref, (ratio if ratio and ratio > 0 else 1.0)

    def work(self, job: SlurmJob, tag: JobTag) -> float | None:
        """Iterations: the tag's, else the time limit on the slowest allowed type as msched estimates it."""
        ref, flops = self.reference_of(tag)
        if not ref:
            return float(tag.iters) if tag.iters else None
        per_iter = self.per_iteration(ref, job.num_gpus, tag.bs, flops)
        return work_iterations(request_types(job, tag, per_iter), tag.iters, job.time_limit_s)

    def __call__(self, job: SlurmJob, tag: JobTag) -> Estimate:
        ref, flops = self.reference_of(tag)
        if not ref:
            return {}
        per_iter = self.per_iteration(ref, job.num_gpus, tag.bs, flops)
        allowed = request_types(job, tag, per_iter)
        work = work_iterations(allowed, tag.iters, job.time_limit_s)
        if work is not None and job.time_limit_s and allowed and \
                work * min(allowed.values()) > job.time_limit_s * (1 + 1e-9):
            # over the limit on every type: the estimate contradicts the job's own limit; trust the limit
            # (the rule for a job without iterations: the whole limit on the slowest allowed type)
            work = work_iterations(allowed, None, job.time_limit_s)
        return runtimes(per_iter, work, job.time_limit_s)


class TruthEstimator(_CachedEstimator):
    """The oracle: the job's own model in the truth table; the work fixed as msched fixes it."""

    kind = "truth"

    def __init__(self, truth: PerfTable, knowledge: PerfTable | None = None, types: Iterable[str] | None = None):
        super().__init__(truth, types)
        self.knowledge = TagEstimator(knowledge, types) if knowledge is not None else None

    def __call__(self, job: SlurmJob, tag: JobTag) -> Estimate:
        per_iter = self.per_iteration(tag.model, job.num_gpus, tag.bs)
        if tag.iters:
            work: float | None = float(tag.iters)
        elif self.knowledge is not None:
            work = self.knowledge.work(job, tag)
        else:
            work = work_iterations(request_types(job, tag, per_iter), None, job.time_limit_s)
        return runtimes(per_iter, work, job.time_limit_s)
