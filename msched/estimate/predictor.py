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
            correction_weight: float = CORRECTION_WEIGHT) -> Prediction | None:
    """Iteration time (ms) of `profile` (a Profile or its dict) on `gpu_type`, or None when the type
    has neither measurements nor a spec row.

    `model`: the model's name in `perf` (its own rows count as measured). `references`: candidate
    references, most similar first (a Classification's candidates); their profiles come from
    `profiles`, else the shipped table."""
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
        for ref in references:
            if ref == model or not _has_rows(perf, ref, gpu_type, precision):
                continue
            ref_profile = _profile_of(ref, profiles)
            if ref_profile is None:
                continue
            # the residual at the reference's own measured row nearest to the job's batch and GPU count
            row = perf.nearest_row(ref, gpu_type, n, batch_size, precision)
            predicted = cost.iteration_ms(ref_profile, spec, precision, row.batch_size, row.num_gpus, optimizer)
            if row.iter_ms > 0 and predicted > 0:
                residual = math.log(row.iter_ms / predicted)
                return Prediction(gpu_type, mine * math.exp(correction_weight * residual), CORRECTED, ref, mine)
    return Prediction(gpu_type, mine, COST_MODEL, "", mine)


def _profile_of(name: str, profiles: Mapping[str, object] | None) -> object | None:
    if profiles is not None and name in profiles:
        return profiles[name]
    from msched.models.shipped import profile_data

    return profile_data(name)


def predict_types(profile: object, gpu_types: Sequence[str], num_gpus: int = 1, batch_size: int = 12,
                  precision: str = "float", **kwargs) -> dict[str, Prediction]:
    """`predict` for each type; types with neither measurements nor a spec row are left out."""
    out = {}
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
        out = {}
        for t in (types if types is not None else self.all_types()):
            spec = self.specs.get(t)
            if self.memory_check and spec is not None and not fits(prof, spec, bs, prec, self.optimizer).fits:
                continue
            p = predict(prof, t, num_gpus, bs, prec, model=model, perf=self.perf, references=refs,
                        profiles=self.profiles, specs=self.specs, cost=self.cost)
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
