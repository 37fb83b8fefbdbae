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
from msched.estimate.perf_table import PerfTable
from msched.util.record import record

MEASURED, CORRECTED, COST_MODEL = "measured", "reference-corrected", "cost-model"
SOURCES = (MEASURED, CORRECTED, COST_MODEL)
# how much of the reference's log residual to carry over (1 = all of it); bench/bench_estimate.py measures it
CORRECTION_WEIGHT = 1.0


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
            measured = perf.iter_ms(ref, gpu_type, n, batch_size, precision)
            predicted = cost.iteration_ms(ref_profile, spec, precision, batch_size, n, optimizer)
            if measured and predicted > 0:
                residual = math.log(measured / predicted)
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
