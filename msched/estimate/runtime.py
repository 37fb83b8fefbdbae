"""Runtime estimates per GPU type (DESIGN, policy point 4): the one rule, for msub, the round, the
report and the simulator alike. Pure Python (msub's light path).

    job's time on T = work x (seconds per iteration of its estimating model on T) x FLOPs factor

- Which model's iteration times estimate a job (`reference_for`, the only copy of this rule): the job's
  own model when the source knows it (a reference named directly, or any model measured on the site);
  else the nearest reference *with measurements* (`pref`, when the nearest one, `ref`, has none), scaled
  by the job's FLOPs over that reference's.
- Work (`job_work`): the job's iterations; without them its time limit on the slowest type its request
  allows; without a limit either, `unknown_runtime_s` on that type (the relative speeds still decide).
  When iterations put the job over its limit on *every* allowed type, the estimate contradicts the job's
  own limit (a FLOPs ratio far off for a small model, say): the limit is trusted instead.
- A type whose estimate exceeds the job's time limit is dropped (Slurm would kill the job there); a type
  the source has no figure for is unknown and left out.

The seam for predictors: the iteration times come from an *iteration-time source*, any object with

    source.knows(model) -> bool                       # has figures for this model itself
    source(model, num_gpus, batch_size, types) -> {gpu_type: (seconds per iteration, where from)}

`TableTimes(perf)` answers from the performance table's measured rows (and its fill rules). A per-layer
cost-model predictor (the Prediction issue) is another such source (measured rows where they exist, the
prediction elsewhere, each figure saying which), handed to `estimate_job` / the estimators in
`msched.estimate.estimators` in place of `TableTimes`; nothing else changes. Every `Estimate` carries
`source`, a short text saying where its figure came from.
"""

from __future__ import annotations

from msched.estimate.perf_table import DEFAULT_PRECISION, PerfTable
from msched.tag import JobTag
from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Callable, Iterable, Mapping

DEFAULT_UNKNOWN_RUNTIME_S = 3600.0


@record
class Estimate:
    """A job's estimated time on one GPU type and where the figure came from."""

    seconds: float
    source: str = ""


class TableTimes:
    """Iteration times from a performance table: the default iteration-time source."""

    def __init__(self, perf: PerfTable, precision: str = DEFAULT_PRECISION):
        self.perf = perf
        self.precision = precision

    def knows(self, model: str) -> bool:
        return self.perf.has_model(model)

    def __call__(self, model: str, num_gpus: int, batch_size: int | None,
                 types: Iterable[str] | None = None, precision: str | None = None) -> dict[str, tuple[float, str]]:
        """`precision`: the job's (its tag's `prec`); a model without rows at it is estimated from its rows
        at the table's default precision, and the source says so."""
        want = precision or self.precision
        figures = iteration_seconds(self.perf, model, num_gpus, batch_size, types=types, precision=want)
        src = f"measured {model}"
        if not figures and want != self.precision:
            figures = iteration_seconds(self.perf, model, num_gpus, batch_size, types=types, precision=self.precision)
            src = f"measured {model} at {self.precision} (none at {want})"
        return {t: (s, src) for t, s in figures.items()}


def times_for(config, perf: PerfTable, precision: str = DEFAULT_PRECISION):  # noqa: ANN001, ANN201
    """The site's iteration-time source over `perf` (config `estimator`): `TableTimes` (default), or the
    per-layer predictor (msched.estimate.predictor.PredictorTimes: measured rows, else the cost model
    corrected by the nearest measured reference, else the cost model alone; types the job's training
    step does not fit get no figure). msub, the round and the report all build theirs here; the
    predictor's modules load only when the site asks for it (msub's light path stays light)."""
    if getattr(config, "estimator", "table") != "predictor":
        return TableTimes(perf, precision)
    from msched.estimate.gpu_specs import specs_for_config
    from msched.estimate.predictor import PredictorTimes

    # the types the site has: the table's and those its aliases name (a type measured nowhere, e.g. a new
    # H100 partition, is named by an alias onto its spec row); never every spec row, which msub would
    # otherwise write into constraints naming types the cluster lacks
    types = sorted(set(config.gpu_aliases.values()))
    cost = None
    if getattr(config, "cost_model", ""):
        from msched.estimate.cost_model import load_cost_model

        cost = load_cost_model(config.cost_model)     # a site's refit (`msched calibrate refit`)
    return PredictorTimes(perf, precision, types=types, specs=specs_for_config(config), cost=cost)


def iteration_seconds(
    perf: PerfTable, reference: str, num_gpus: int, batch_size: int | None, flops_ratio: float = 1.0,
    types: Iterable[str] | None = None, precision: str = DEFAULT_PRECISION,
) -> dict[str, float]:
    """Seconds per iteration on each GPU type where the reference has data."""
    out: dict[str, float] = {}
    for t in (types if types is not None else perf.types_for(reference, precision)):
        bs = batch_size
        if bs is None:
            rows = [r for r in perf.rows if r.model == reference and r.gpu_type == t and r.precision == precision]
            if not rows:
                continue
            bs = rows[0].batch_size
        ms = perf.iter_ms(reference, t, max(1, num_gpus), bs, precision)
        if ms is not None:
            out[t] = ms * flops_ratio / 1000.0
    return out


def reference_for(tag: JobTag, knows: Callable[[str], bool]) -> tuple[str, float]:
    """(the model whose iteration times estimate this job, the FLOPs factor to scale them by)."""
    if tag.model and knows(tag.model):
        return tag.model, 1.0
    ratio = tag.perf_flops_ratio
    return tag.pref or tag.ref, (float(ratio) if ratio and ratio > 0 else 1.0)


def work_iterations(per_iter_s: Mapping[str, float], iterations: float | None,
                    time_limit_s: float | None) -> float | None:
    """The job's work in iterations: given, or its time limit on the slowest type it may use."""
    if iterations is not None and iterations > 0:
        return float(iterations)
    if time_limit_s and per_iter_s:
        return time_limit_s / max(per_iter_s.values())
    return None


def job_work(allowed: Mapping[str, float], iterations: float | None, time_limit_s: float | None,
             unknown_runtime_s: float | None = DEFAULT_UNKNOWN_RUNTIME_S) -> tuple[float | None, str]:
    """(work in iterations, why) from the seconds per iteration on the types the request allows."""
    if iterations is not None and iterations > 0:
        work = float(iterations)
        if time_limit_s and allowed and work * min(allowed.values()) > time_limit_s * (1 + 1e-9):
            return time_limit_s / max(allowed.values()), "iterations over the time limit everywhere: limit used"
        return work, f"{int(iterations)} iterations"
    if not allowed:
        return None, "no figures"
    if time_limit_s:
        return time_limit_s / max(allowed.values()), "no iterations: time limit on the slowest type"
    if unknown_runtime_s:
        return unknown_runtime_s / max(allowed.values()), \
            f"no iterations or time limit: {unknown_runtime_s:.0f}s on the slowest type"
    return None, "no iterations or time limit"


def runtimes(per_iter_s: Mapping[str, float], work: float | None, time_limit_s: float | None) -> dict[str, float]:
    """Seconds per GPU type for `work` iterations; types whose time exceeds the limit are dropped
    (Slurm would kill the job there); no work known = no estimate."""
    if work is None:
        return {}
    est = {t: work * s for t, s in per_iter_s.items()}
    if time_limit_s:
        est = {t: v for t, v in est.items() if v <= time_limit_s * (1 + 1e-9)}
    return est


def request_subset(per_iter: Mapping[str, float], pinned: str | None) -> Mapping[str, float]:
    """The part of `per_iter` the user's request allows (`pinned`: "a100|v100"), used to fix the work;
    all of it when nothing is pinned or the pinned types have no figures."""
    if pinned:
        allowed = {t.strip().lower() for t in pinned.split("|") if t.strip()}
        sub = {t: v for t, v in per_iter.items() if t in allowed}
        if sub:
            return sub
    return per_iter


def estimate_job(tag: JobTag, *, num_gpus: int, time_limit_s: float | None, times,  # noqa: ANN001
                 pinned: str | None = None, types: Iterable[str] | None = None,
                 unknown_runtime_s: float | None = DEFAULT_UNKNOWN_RUNTIME_S,
                 within_time_limit: bool = True) -> dict[str, Estimate]:
    """The job's estimate on each GPU type, with where each figure came from (the module's rule).

    `times` is an iteration-time source (see the module docstring); `pinned` the types the request
    allows ("a|b"; the tag's `pinned` when None); `within_time_limit=False` keeps types over the limit
    (the report compares a finished job's estimate with what happened)."""
    seconds, figures, flops, why = job_runtimes(tag, num_gpus=num_gpus, time_limit_s=time_limit_s, times=times,
                                                pinned=pinned, types=types, unknown_runtime_s=unknown_runtime_s,
                                                within_time_limit=within_time_limit)
    scaled = "" if flops == 1.0 else f" x{flops:.3g} FLOPs"
    return {t: Estimate(v, f"{figures[t][1]}{scaled}; {why}") for t, v in seconds.items()}


def job_runtimes(tag: JobTag, *, num_gpus: int, time_limit_s: float | None, times,  # noqa: ANN001
                 pinned: str | None = None, types: Iterable[str] | None = None,
                 unknown_runtime_s: float | None = DEFAULT_UNKNOWN_RUNTIME_S, within_time_limit: bool = True,
                 ) -> tuple[dict[str, float], dict[str, tuple[float, str]], float, str]:
    """`estimate_job`'s seconds per GPU type without the texts of where they came from: (the seconds,
    the source's figures, the FLOPs ratio, why the work is what it is). A round wants the seconds only,
    for every pending job: building each type's Estimate and its text was about half the estimator's
    CPU at 10,000 pending (issue 21, sixteenth pass)."""
    ref, flops = reference_for(tag, times.knows)
    if not ref:
        return {}, {}, flops, ""
    want = None if types is None else tuple(types)
    # the tag's precision reaches the source only when it says one (sources written before it keep working)
    figures = times(ref, max(1, num_gpus), tag.bs, want, precision=tag.prec) if tag.prec else \
        times(ref, max(1, num_gpus), tag.bs, want)
    per_iter = {t: s * flops for t, (s, _) in figures.items()}
    allowed = request_subset(per_iter, pinned if pinned is not None else tag.pinned)
    work, why = job_work(allowed, tag.iters, time_limit_s, unknown_runtime_s)
    return runtimes(per_iter, work, time_limit_s if within_time_limit else None), figures, flops, why


def estimate_runtime(
    perf: PerfTable, reference: str, *, num_gpus: int, batch_size: int | None = None, flops_ratio: float = 1.0,
    iterations: float | None = None, time_limit_s: float | None = None, types: Iterable[str] | None = None,
    precision: str = DEFAULT_PRECISION, within_time_limit: bool = True,
) -> dict[str, float]:
    """Estimated seconds per GPU type for a named reference (calibration's before/after comparison);
    types whose estimate exceeds the time limit are dropped. Jobs are estimated by `estimate_job`."""
    per_iter = iteration_seconds(perf, reference, num_gpus, batch_size, flops_ratio, types, precision)
    work = work_iterations(per_iter, iterations, time_limit_s)
    return runtimes(per_iter, work, time_limit_s if within_time_limit else None)
