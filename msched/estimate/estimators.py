"""The estimator interface: a job -> its time on each GPU type, with where each figure came from.

    estimator.estimates(job, tag) -> {gpu_type: Estimate(seconds, source)}
    estimator(job, tag)           -> {gpu_type: seconds}      (the same figures, for the planner)

`job` is anything with `num_gpus`, `time_limit_s` and optionally `gres_gpu_type` (a typed request): a
`msched.slurm.base.SlurmJob` in a round, msub's record of the request at submit time (this module stays
on msub's light path: no dataclasses, no Slurm client). The rule itself (which reference, the work, the
time limit) is `msched.estimate.runtime.estimate_job`; the two kinds differ only in the iteration-time
source they hand it:

- `TagEstimator(times)`: what msched knows: an iteration-time source (`TableTimes(perf)` by default,
  built from a `PerfTable`; a predictor behind the same two calls, see `msched.estimate.runtime`).
- `TruthEstimator(truth, knowledge=None)`: the oracle: the job's own model rows in the truth table
  (FLOPs factor 1). Without iterations, the work is fixed as msched fixes it (from the knowledge
  estimator when given one), so the oracle and msched agree on how much work a job is and differ only in
  how fast each type does it. With iterations the truth is iterations x the true time (a job whose
  iterations exceed its limit is killed there, whatever msched believed).

Both cache the iteration times per (model, GPU count, batch size), which is what makes planning 10k jobs
a round cheap; `msched.slurm_sim` adds a per-job cache on top.
"""

from __future__ import annotations

from msched.estimate.perf_table import PerfTable
from msched.estimate.runtime import (
    DEFAULT_UNKNOWN_RUNTIME_S,
    Estimate,
    TableTimes,
    estimate_job,
    job_runtimes,
    job_work,
    request_subset,
    runtimes,
)
from msched.tag import JobTag

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Iterable


class _CachedTimes:
    """An iteration-time source remembered per (model, GPU count, batch size, types)."""

    def __init__(self, times, types: Iterable[str] | None = None):  # noqa: ANN001 - an iteration-time source
        self.times = times
        self.types = tuple(sorted(types)) if types is not None else None
        self._memo: dict[tuple, dict[str, tuple[float, str]]] = {}

    def knows(self, model: str) -> bool:
        return self.times.knows(model)

    def __call__(self, model: str, num_gpus: int, batch_size: int | None,
                 types: Iterable[str] | None = None, precision: str | None = None) -> dict[str, tuple[float, str]]:
        want = self.types if types is None else tuple(types)
        key = (model, max(1, num_gpus), batch_size, want, precision)
        hit = self._memo.get(key)
        if hit is None:
            extra = {"precision": precision} if precision else {}
            hit = self._memo[key] = self.times(model, max(1, num_gpus), batch_size, want, **extra)
        return hit


def _pinned(job: object, tag: JobTag | None) -> str:
    return getattr(job, "gres_gpu_type", None) or (tag.pinned if tag else "")


class TagEstimator:
    """msched's knowledge: the tag's estimating model in an iteration-time source."""

    kind = "tag"

    def __init__(self, times: PerfTable | object, types: Iterable[str] | None = None, *,
                 unknown_runtime_s: float | None = DEFAULT_UNKNOWN_RUNTIME_S):
        source = TableTimes(times) if isinstance(times, PerfTable) else times
        self.table = times if isinstance(times, PerfTable) else getattr(times, "perf", None)
        self.times = _CachedTimes(source, types)
        self.unknown_runtime_s = unknown_runtime_s

    def estimates(self, job: object, tag: JobTag) -> dict[str, Estimate]:
        return estimate_job(tag, num_gpus=job.num_gpus, time_limit_s=job.time_limit_s, times=self.times,
                            pinned=_pinned(job, tag), unknown_runtime_s=self.unknown_runtime_s)

    def __call__(self, job: object, tag: JobTag) -> dict[str, float]:
        """The seconds of `estimates`, without their texts (`job_runtimes`)."""
        return job_runtimes(tag, num_gpus=job.num_gpus, time_limit_s=job.time_limit_s, times=self.times,
                            pinned=_pinned(job, tag), unknown_runtime_s=self.unknown_runtime_s)[0]

    def work(self, job: object, tag: JobTag) -> float | None:
        """The job's work in iterations, as msched fixes it (see `msched.estimate.runtime.job_work`)."""
        from msched.estimate.runtime import reference_for

        ref, flops = reference_for(tag, self.times.knows)
        if not ref:
            return float(tag.iters) if tag.iters else None
        per_iter = {t: s * flops for t, (s, _) in self.times(ref, job.num_gpus, tag.bs, None, tag.prec or None).items()}
        return job_work(request_subset(per_iter, _pinned(job, tag)), tag.iters, job.time_limit_s,
                        self.unknown_runtime_s)[0]


class TruthEstimator:
    """The oracle: the job's own model in the truth table; the work fixed as msched fixes it."""

    kind = "truth"

    def __init__(self, truth: PerfTable, knowledge: PerfTable | None = None, types: Iterable[str] | None = None):
        self.table = truth
        self.times = _CachedTimes(TableTimes(truth), types)
        self.knowledge = TagEstimator(knowledge, types) if knowledge is not None else None

    def estimates(self, job: object, tag: JobTag) -> dict[str, Estimate]:
        figures = self.times(tag.model, job.num_gpus, tag.bs)
        per_iter = {t: s for t, (s, _) in figures.items()}
        if tag.iters:
            work: float | None = float(tag.iters)
        elif self.knowledge is not None:
            work = self.knowledge.work(job, tag)
        else:
            work = job_work(request_subset(per_iter, _pinned(job, tag)), None, job.time_limit_s)[0]
        return {t: Estimate(v, f"truth {tag.model}") for t, v in runtimes(per_iter, work, job.time_limit_s).items()}

    def __call__(self, job: object, tag: JobTag) -> dict[str, float]:
        return {t: e.seconds for t, e in self.estimates(job, tag).items()}
