"""One job's iteration time on one GPU type: measured, reference-corrected, or the cost model alone.

In order of trust:
1. `measured`: the model itself has rows on the type at the precision in the performance table (its fill
   rules scale batch size and GPU count);
2. `reference-corrected`: the cost model's prediction for the job, times the measured / predicted ratio
   of the most similar reference that has rows on the type (the similarity ranking of
   msched.models.classify): whatever the cost model misses about that type and that kind of model (the
   machine's host, its library versions) is carried over from a measured neighbour;
3. `cost-model`: the per-layer cost model against the type's spec row, for a type or model nothing
   similar was measured on.

Every estimate says which one it is. Pure Python: msub may call it (the shipped spec table, the fitted
parameters and profiles are JSON/CSV).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from msched.estimate.cost_model import CostModel, load_cost_model
from msched.estimate.gpu_specs import SpecTable, load_specs
from msched.estimate.memory import fits
from msched.estimate.perf_table import PerfTable
from msched.util.record import record

MEASURED, CORRECTED, COST_MODEL = "measured", "reference-corrected", "cost-model"
SOURCES = (MEASURED, CORRECTED, COST_MODEL)
# how much of the reference's log residual to carry over (1 = all of it). 0.5 was the best of 0, 0.25, 0.5,
# 0.75, 1 in bench/bench_estimate.py's family hold-out (mean |log error| 0.157, 0.146, 0.140, 0.139, 0.145;
# best-type accuracy 0.936 .. 0.903 falling with the weight): chosen on that evaluation, so mildly optimistic
CORRECTION_WEIGHT = 0.5
# how much of the type-to-type shape to take from the reference's measurements rather than from the cost
# model (0 = the corrected cost model alone; 1 = the reference's measured times, scaled by the cost model's
# job/reference ratio averaged over the reference's measured types), how many of the most similar
# references measured on the type correct it (averaged in logs), and how far that shape may override the
# cost model's (SHAPE_CAP below). The three are chosen together by bench/bench_estimate.py --nested over
# NESTED_GRID (weights 0 / 0.25 / 0.5 / 0.75 / 1, 1 or 3 references, caps none / 0.1 / 0.2 / 0.4): the
# held-out figure is the nested one (inner folds choose, the outer family measures; BENCHMARKS.md), and
# the shipped values are what the same selection (best-type accuracy, then regret) picks over all 14
# families: (1, 3, 0.1), best-type accuracy 0.971 of 410 on the family hold-out it was chosen on
# (optimistic), 0.963 nested (inner fits without both families). Before the cap: (0.75, 3).
RANK_WEIGHT = 1.0
SHAPE_REFS = 3
# only the most similar references may correct a prediction: further down the ranking a reference measured
# on the type is usually another kind of workload (Gavel's ResNet-50 with its ImageNet loader for an LSTM),
# whose residual says nothing about the job
MAX_REFERENCE_RANK = 3
# how far (in log) taking the type shape from a reference may move a prediction away from what the cost
# model says about the job's own shape: the reference's measured type-to-type shape is carried over whole
# only while the cost model finds the job's and the reference's shapes alike on that type (within the cap);
# where they differ a lot (a memory-bound job beside a compute-bound reference), the job's own shape wins
# beyond it. None: no cap. See `predict`'s `shape_cap`; chosen with the weights (bench_estimate.py --nested)
SHAPE_CAP: float | None = 0.1
# how much of the reference's log residual the type-shape part carries (1: the reference's measured level,
# scaled; less: the level partly the cost model's own, the type-to-type shape still the reference's).
# Chosen with the three above (bench_estimate.py --nested, NESTED_GRID's fourth element)
SHAPE_RESIDUAL_WEIGHT = 1.0
DEFAULT_BATCH_SIZE = 12   # the shipped measurements' per-GPU batch, for a job that does not say


@record
class Prediction:
    gpu_type: str
    iter_ms: float
    source: str
    reference: str = ""          # the reference whose residual corrected the cost model
    cost_model_ms: float = 0.0   # the cost model's own figure (0 when measured without a spec row)

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def _has_rows(perf: PerfTable, model: str, gpu_type: str, precision: str) -> bool:
    return bool(perf._index.get((model, gpu_type, precision)))


def predict(profile: object, gpu_type: str, num_gpus: int = 1, batch_size: int = 12, precision: str = "float", *,
            model: str = "", perf: PerfTable | None = None, references: Sequence[str] = (),
            profiles: Mapping[str, object] | None = None, specs: SpecTable | None = None,
            cost: CostModel | None = None, optimizer: bool = False,
            correction_weight: float = CORRECTION_WEIGHT, rank_weight: float = RANK_WEIGHT,
            level_cache: dict | None = None, shape_refs: int = SHAPE_REFS,
            shape_cap: float | None = SHAPE_CAP,
            shape_residual_weight: float = SHAPE_RESIDUAL_WEIGHT) -> Prediction | None:
    """Iteration time (ms) of `profile` (a Profile or its dict) on `gpu_type`, or None when the type
    has neither measurements nor a spec row.

    `model`: the model's name in `perf` (its own rows count as measured). `references`: candidate
    references, most similar first (a Classification's candidates); their profiles come from
    `profiles`, else the shipped table.

    Reference-corrected: log t = log cost(job) + w x log(measured(ref) / cost(ref)) at the reference's
    nearest measured row (`correction_weight` w). With `rank_weight` r > 0 that is blended (in logs, r of
    it) with the reference's measured time on the type scaled by the cost model's job/reference ratio
    averaged over all the types the reference was measured on: which type is fastest then follows the
    measured neighbour (what the FLOPs rule gets right) while the level follows the cost model.
    `level_cache`: a dict reused across the types of one job (the average does not depend on the type).
    `shape_refs`: how many of the most similar references measured on the type (of the first
    MAX_REFERENCE_RANK) correct it, each as above, averaged in logs (1: the nearest alone).

    `shape_cap` c: the type-shape part equals log cost(job) + the reference's log residual + d, where d =
    (the job/reference cost ratio averaged over the reference's types) - (that ratio on this type): how far
    the reference's measured shape overrides the cost model's own view of how the job differs from the
    reference on this type. d is clipped to [-c, c] (None: not clipped; 0: the residual alone).
    `shape_residual_weight` a: the type-shape part carries a x the reference's log residual (1: all of it)."""
    specs = specs or load_specs()
    cost = cost or load_cost_model()
    spec = specs.get(gpu_type)
    n = max(1, int(num_gpus))
    if perf is not None and model and _has_rows(perf, model, gpu_type, precision):
        ms = perf.iter_ms(model, gpu_type, n, batch_size, precision)
        if ms is not None:
            own = cost.iteration_ms(profile, spec, precision, batch_size, n, optimizer) if spec and profile else 0.0
            return Prediction(gpu_type, float(ms), MEASURED, model, own)
    if spec is None:
        return None
    mine = cost.iteration_ms(profile, spec, precision, batch_size, n, optimizer)
    if perf is not None:
        logs: list[float] = []
        used: list[str] = []
        for ref in [r for r in references if r != model][:MAX_REFERENCE_RANK]:
            if len(used) >= max(1, shape_refs) or not _has_rows(perf, ref, gpu_type, precision):
                continue
            ref_profile = _profile_of(ref, profiles)
            if ref_profile is None:
                continue
            # the residual at the reference's own measured row nearest to the job's batch and GPU count
            row = perf.nearest_row(ref, gpu_type, n, batch_size, precision)
            predicted = cost.iteration_ms(ref_profile, spec, precision, row.batch_size, row.num_gpus, optimizer)
            if row.iter_ms > 0 and predicted > 0:
                log_t = math.log(mine) + correction_weight * math.log(row.iter_ms / predicted)
                if rank_weight > 0:
                    key = (ref, n, batch_size, precision, optimizer)
                    level = level_cache.get(key) if level_cache is not None else None
                    if level is None:
                        level = _mean_log_ratio(profile, ref_profile, ref, n, batch_size, precision, perf, specs,
                                                cost, optimizer)
                        if level_cache is not None:
                            level_cache[key] = level
                    # log(row.iter_ms) + level = log(mine) + log residual + shape, with shape as in the docstring
                    shape = level - math.log(mine / predicted)
                    if shape_cap is not None:
                        shape = max(-shape_cap, min(shape_cap, shape))
                    log_t = (1 - rank_weight) * log_t + rank_weight * (
                        math.log(mine) + shape_residual_weight * math.log(row.iter_ms / predicted) + shape)
                logs.append(log_t)
                used.append(ref)
        if logs:
            return Prediction(gpu_type, math.exp(sum(logs) / len(logs)), CORRECTED, "+".join(used), mine)
    return Prediction(gpu_type, mine, COST_MODEL, "", mine)


def _mean_log_ratio(profile: object, ref_profile: object, ref: str, n: int, batch_size: int, precision: str,
                    perf: PerfTable, specs: SpecTable, cost: CostModel, optimizer: bool) -> float:
    """Mean over the reference's measured types of log(cost(job) / cost(ref at its nearest row))."""
    logs = []
    for t in perf.types_for(ref, precision):
        spec = specs.get(t)
        row = perf.nearest_row(ref, t, n, batch_size, precision)
        if spec is None or row is None:
            continue
        job_ms = cost.iteration_ms(profile, spec, precision, batch_size, n, optimizer)
        ref_ms = cost.iteration_ms(ref_profile, spec, precision, row.batch_size, row.num_gpus, optimizer)
        if job_ms > 0 and ref_ms > 0:
            logs.append(math.log(job_ms / ref_ms))
    return sum(logs) / len(logs) if logs else 0.0


def _profile_of(name: str, profiles: Mapping[str, object] | None) -> object | None:
    if profiles is not None and name in profiles:
        return profiles[name]
    from msched.models.shipped import profile_data

    return profile_data(name)


def predict_types(profile: object, gpu_types: Sequence[str], num_gpus: int = 1, batch_size: int = 12,
                  precision: str = "float", **kwargs) -> dict[str, Prediction]:
    """`predict` for each type; types with neither measurements nor a spec row are left out."""
    out = {}
    kwargs.setdefault("level_cache", {})
    for t in gpu_types:
        p = predict(profile, t, num_gpus, batch_size, precision, **kwargs)
        if p is not None:
            out[t] = p
    return out


class PredictorTimes:
    """The predictor as an iteration-time source (the seam of msched.estimate.runtime): hand it to
    `TagEstimator` in place of `TableTimes(perf)`.

    `knows(model)`: the model has a profile here (a shipped torchvision name, or a profile handed in), so
    the job is estimated from its own layers rather than a FLOPs-scaled reference. Each figure's source
    says `measured M`, `reference-corrected by R` or `cost-model`. Types: the table's and `types`
    (the site's, e.g. from its spec rows); a type without measurements or a spec row is left out.

    Memory: with `memory_check`, a type whose memory the job's training step does not fit
    (msched.estimate.memory) gets no figure at all, and a type without a figure is never chosen, by
    msub's submit decision or by the planner (both keep only estimated types)."""

    def __init__(self, perf: PerfTable | None = None, precision: str = "float", *, types=None,  # noqa: ANN001
                 specs: SpecTable | None = None, cost: CostModel | None = None, refset=None,  # noqa: ANN001
                 profiles: Mapping[str, object] | None = None, default_batch_size: int = DEFAULT_BATCH_SIZE,
                 optimizer: str = "sgd", memory_check: bool = True):
        self.perf = perf
        self.precision = precision
        self.types = tuple(types) if types is not None else ()
        self.specs = specs or load_specs()
        self.cost = cost or load_cost_model()
        self.refset = refset
        self.profiles = dict(profiles or {})
        self.default_batch_size = default_batch_size
        self.optimizer = optimizer
        self.memory_check = memory_check
        self._ranked: dict[str, list[str]] = {}

    def profile(self, model: str) -> object | None:
        return _profile_of(model, self.profiles)

    def knows(self, model: str) -> bool:
        return bool(model) and self.profile(model) is not None

    def references(self, model: str) -> list[str]:
        """Measured models most similar first (the reference set's ranking)."""
        hit = self._ranked.get(model)
        if hit is None:
            from msched.models.classify import classify_profile, load_references

            refset = self.refset or load_references()
            hit = [n for n, _s in classify_profile(self.profile(model), refset, spec=model).candidates if n != model]
            self._ranked[model] = hit
        return hit

    def all_types(self) -> list[str]:
        table = self.perf.gpu_types() if self.perf is not None else []
        return list(dict.fromkeys([*table, *self.types]))

    def __call__(self, model: str, num_gpus: int, batch_size: int | None,
                 types=None, precision: str | None = None) -> dict[str, tuple[float, str]]:  # noqa: ANN001
        """`precision`: the job's (its tag's `prec`), else the source's own: it picks the measured rows, the
        cost model's peak (tensor cores for half) and the memory check."""
        prec = precision or self.precision
        prof = self.profile(model)
        if prof is None:
            return {}
        bs = batch_size or self.default_batch_size
        refs = self.references(model) if self.perf is not None else []
        out: dict[str, tuple[float, str]] = {}
        level_cache: dict = {}
        for t in (types if types is not None else self.all_types()):
            spec = self.specs.get(t)
            if self.memory_check and spec is not None and not fits(prof, spec, bs, prec, self.optimizer).fits:
                continue
            p = predict(prof, t, num_gpus, bs, prec, model=model, perf=self.perf, references=refs,
                        profiles=self.profiles, specs=self.specs, cost=self.cost, level_cache=level_cache)
            if p is not None:
                out[t] = (p.iter_ms / 1000.0, describe(p))
        return out


def describe(p: Prediction) -> str:
    """A figure's source in words: `measured M`, `reference-corrected by R`, `cost-model`."""
    if p.source == MEASURED:
        return f"measured {p.reference}"
    if p.source == CORRECTED:
        return f"reference-corrected by {p.reference}"
    return COST_MODEL
