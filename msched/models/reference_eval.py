"""Judging a reference set: how well do nearest-reference estimates predict measured speeds?

For every model of a performance table that is not a reference, `evaluate` predicts its iteration time
on each GPU type from its nearest measured reference, scaled by the FLOPs ratio (DESIGN, policy point
4), and compares with the measured times over the types where both exist. What the policy uses is a
model's *relative* speed across types, so the headline figure is the speed-profile error: centre each
model's log times over the types on their mean and take the mean absolute difference between predicted
and true centred log times. `agnostic_error` is the same error when every model is predicted by the
references' mean profile (what a model-blind scheduler knows); a similarity measure earns its keep
when `profile_error` is well below it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from msched.estimate.perf_table import DEFAULT_PRECISION, PerfTable
from msched.models.classify import ClassifyError, ReferenceSet, classify_profile, family_of
from msched.models.profiler import ProfileError


@dataclass(frozen=True)
class ModelResult:
    model: str
    nearest_reference: str
    similarity: float
    flops_ratio: float
    types: tuple[str, ...]
    predicted_best: str
    true_best: str
    regret: float
    profile_error: float
    agnostic_error: float
    time_error: float
    predicted_ms: dict[str, float] = field(default_factory=dict)
    true_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluation:
    models: tuple[ModelResult, ...]
    references: tuple[str, ...]
    skipped: tuple[str, ...] = ()

    def _mean(self, key: str) -> float:
        vals = [getattr(m, key) for m in self.models]
        return statistics.fmean(vals) if vals else float("nan")

    @property
    def best_type_accuracy(self) -> float:
        if not self.models:
            return float("nan")
        return sum(m.predicted_best == m.true_best for m in self.models) / len(self.models)

    @property
    def mean_regret(self) -> float:
        return self._mean("regret")

    @property
    def profile_error(self) -> float:
        return self._mean("profile_error")

    @property
    def agnostic_error(self) -> float:
        return self._mean("agnostic_error")

    @property
    def time_error(self) -> float:
        return self._mean("time_error")

    def totals(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in
                ("best_type_accuracy", "mean_regret", "profile_error", "agnostic_error", "time_error")}

    def to_dict(self) -> dict[str, Any]:
        return {"references": list(self.references), "models": [asdict(m) for m in self.models],
                "skipped": list(self.skipped), **self.totals()}


def _centred(logs: dict[str, float], types: Sequence[str]) -> dict[str, float]:
    mean = statistics.fmean(logs[t] for t in types)
    return {t: logs[t] - mean for t in types}


def _measured(perf: PerfTable, model: str, num_gpus: int, precision: str,
              gpu_types: Sequence[str] | None) -> dict[str, tuple[float, int]]:
    """(ms, per-GPU batch size) per GPU type measured at exactly `num_gpus` (smallest batch size)."""
    out: dict[str, tuple[float, int]] = {}
    for r in perf.rows:
        if r.model == model and r.num_gpus == num_gpus and r.precision == precision \
                and (gpu_types is None or r.gpu_type in gpu_types):
            if r.gpu_type not in out or r.batch_size < out[r.gpu_type][1]:
                out[r.gpu_type] = (r.iter_ms, r.batch_size)
    return out


def evaluate(perf: PerfTable, refset: ReferenceSet, *, num_gpus: int = 1, precision: str = DEFAULT_PRECISION,
             gpu_types: Sequence[str] | None = None, metric: str = "cosine",
             models: Sequence[str] | None = None, profiles: dict[str, Any] | None = None) -> Evaluation:
    """Predict every non-reference model of `perf` from its nearest measured reference; compare."""
    from msched.models.profile_cache import get_profile

    types_filter = tuple(gpu_types) if gpu_types else None
    ref_times = {r: _measured(perf, r, num_gpus, precision, types_filter) for r in refset.names}
    usable = [r for r in refset.names if ref_times[r]]
    if not usable:
        raise ClassifyError(f"no reference has measurements at {num_gpus} GPU(s), precision {precision} "
                            f"in the performance table (references: {', '.join(refset.names)})")
    targets = sorted(set(models) if models is not None else perf.models() - set(refset.names))
    results, skipped = [], []
    for model in targets:
        measured = _measured(perf, model, num_gpus, precision, types_filter)
        truth = {t: ms for t, (ms, _bs) in measured.items()}
        if len(truth) < 2:
            skipped.append(f"{model} (fewer than 2 GPU types measured)")
            continue
        try:
            prof = profiles[model] if profiles and model in profiles else get_profile(model)
        except ProfileError as exc:
            skipped.append(f"{model} ({exc})")
            continue
        cls = classify_profile(prof, refset, metric, spec=model)
        ranked = [n for n, _ in cls.candidates if n in usable]
        predicted: dict[str, float] = {}
        used: str | None = None
        for t in truth:
            ref = next((n for n in ranked if t in ref_times[n]), None)  # nearest with data on this type
            if ref is None:
                continue
            used = used or ref
            ref_ms = perf.iter_ms(ref, t, num_gpus, measured[t][1], precision)  # at the model's batch size
            predicted[t] = ref_ms * cls.flops / refset.flops_of(ref)
        types = tuple(sorted(predicted))
        if len(types) < 2:
            skipped.append(f"{model} (fewer than 2 GPU types with a measured reference)")
            continue
        lp = {t: math.log(predicted[t]) for t in types}
        lt = {t: math.log(truth[t]) for t in types}
        cp, ct = _centred(lp, types), _centred(lt, types)
        agn = _agnostic_profile([{t: ms for t, (ms, _b) in ref_times[r].items()} for r in usable], types)
        pred_best = min(types, key=lambda t: predicted[t])
        true_best = min(types, key=lambda t: truth[t])
        results.append(ModelResult(
            model=model, nearest_reference=used or ranked[0],
            similarity=dict(cls.candidates).get(used or ranked[0], 0.0),
            flops_ratio=cls.flops / refset.flops_of(used or ranked[0]), types=types,
            predicted_best=pred_best, true_best=true_best, regret=truth[pred_best] / truth[true_best] - 1.0,
            profile_error=statistics.fmean(abs(cp[t] - ct[t]) for t in types),
            agnostic_error=statistics.fmean(abs(agn[t] - ct[t]) for t in types),
            time_error=statistics.fmean(abs(lp[t] - lt[t]) for t in types),
            predicted_ms={t: round(predicted[t], 4) for t in types}, true_ms={t: truth[t] for t in types},
        ))
    return Evaluation(tuple(results), tuple(refset.names), tuple(skipped))


def _agnostic_profile(ref_times: list[dict[str, float]], types: Sequence[str]) -> dict[str, float]:
    """The references' mean centred log-time profile over `types` (model-blind knowledge)."""
    full = [rt for rt in ref_times if all(t in rt for t in types)]
    if full:
        profiles = [_centred({t: math.log(rt[t]) for t in types}, types) for rt in full]
        return {t: statistics.fmean(p[t] for p in profiles) for t in types}
    per_type = {t: statistics.fmean(math.log(rt[t]) for rt in ref_times if t in rt) for t in types}
    return _centred(per_type, types)


# --------------------------------------------------------------------------- reference-set studies
def families_in(perf: PerfTable, names: Sequence[str] | None = None) -> dict[str, list[str]]:
    """Torchvision families present in the performance table (or among `names`)."""
    out: dict[str, list[str]] = {}
    for m in sorted(names if names is not None else perf.models()):
        fam = family_of(m)
        if fam:
            out.setdefault(fam, []).append(m)
    return out


def random_sets(perf: PerfTable, n: int, seed: int, *, num_gpus: int = 1, precision: str = DEFAULT_PRECISION,
                gpu_types: Sequence[str] | None = None, metric: str = "cosine",
                profiles: dict[str, Any] | None = None) -> list[Evaluation]:
    """Evaluate `n` random reference sets, one measured model per family, drawn with `seed`."""
    rng = random.Random(seed)
    fams = families_in(perf)
    out = []
    for _ in range(n):
        names = [rng.choice(members) for _fam, members in sorted(fams.items())]
        refset = ReferenceSet.from_profiles(names, profiles=profiles, source="random")
        out.append(evaluate(perf, refset, num_gpus=num_gpus, precision=precision, gpu_types=gpu_types,
                            metric=metric, profiles=profiles))
    return out


def hold_out_families(perf: PerfTable, refset: ReferenceSet, *, num_gpus: int = 1,
                      precision: str = DEFAULT_PRECISION, gpu_types: Sequence[str] | None = None,
                      metric: str = "cosine", profiles: dict[str, Any] | None = None) -> dict[str, Evaluation]:
    """For each family of the table: drop its references, predict its models from the other families."""
    out = {}
    for fam, members in sorted(families_in(perf).items()):
        kept = [n for n in refset.names if family_of(n) != fam]
        measured = [r.name for r in refset.references if r.measured]
        sub = ReferenceSet.from_profiles(kept, profiles=profiles, measured=measured,
                                         groups={r.name: r.group for r in refset.references}, source=f"-{fam}")
        out[fam] = evaluate(perf, sub, num_gpus=num_gpus, precision=precision, gpu_types=gpu_types,
                            metric=metric, models=members, profiles=profiles)
    return out


def pooled(evaluations: Sequence[Evaluation]) -> Evaluation:
    models = tuple(m for e in evaluations for m in e.models)
    refs = tuple(dict.fromkeys(r for e in evaluations for r in e.references))
    return Evaluation(models, refs, tuple(s for e in evaluations for s in e.skipped))


def summarise(values: Sequence[float]) -> dict[str, float]:
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return {"mean": float("nan"), "median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"mean": statistics.fmean(vals), "median": statistics.median(vals), "min": vals[0], "max": vals[-1]}


# --------------------------------------------------------------------------- a GPU type never measured
@dataclass(frozen=True)
class LeaveOutTypeResult:
    """A type's rows predicted from its spec row alone, by a cost model fitted without them."""

    gpu_type: str
    spec_row: str
    generation_sibling: bool         # another type of its generation stayed in the fit
    time_error: float                # mean |log predicted / true| over its rows
    by_precision: dict[str, float]
    by_num_gpus: dict[int, float]
    best_type_accuracy: float        # the left-out type predicted, the others measured (5% slack)
    configs: int
    models: dict[str, float] = field(default_factory=dict)   # mean |log error| per model

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def leave_out_type(perf: PerfTable, gpu_type: str, *, profiles: dict[str, Any] | None = None,
                   specs: Any = None, best_slack: float = 0.05) -> LeaveOutTypeResult:
    """Remove `gpu_type`'s rows from `perf`, refit the cost model on the rest (scipy), and predict the
    removed rows from the type's spec row alone (no reference has measurements there any more)."""
    from msched.estimate.cost_fit import fit, rows_from_perf
    from msched.estimate.cost_model import CostModel
    from msched.estimate.gpu_specs import load_specs
    from msched.models.shipped import load_table

    specs = specs or load_specs()
    spec = specs.get(gpu_type)
    if spec is None:
        raise ClassifyError(f"{gpu_type}: no GPU spec row; known: {', '.join(specs.names())}")
    profiles = profiles if profiles is not None else load_table()["models"]
    rows = [r for r in rows_from_perf(perf.rows) if r.model in profiles]
    held = [r for r in rows if r.gpu_type == gpu_type]
    kept = [r for r in rows if r.gpu_type != gpu_type]
    if not held:
        raise ClassifyError(f"{gpu_type}: no rows of a profiled model in the performance table")
    if not kept:
        raise ClassifyError(f"{gpu_type}: no other type's rows to fit on")
    cost = CostModel(fit(kept, profiles, specs))
    errors: dict[Any, float] = {}
    for r in held:
        pred = cost.iteration_ms(profiles[r.model], spec, r.precision, r.batch_size, r.num_gpus)
        errors[r] = abs(math.log(pred / r.iter_ms))

    def mean_by(key) -> dict:
        groups: dict[Any, list[float]] = {}
        for r, e in errors.items():
            groups.setdefault(key(r), []).append(e)
        return {k: statistics.fmean(v) for k, v in sorted(groups.items())}

    configs: dict[tuple, dict[str, tuple[float, float]]] = {}
    predicted = {r: cost.iteration_ms(profiles[r.model], spec, r.precision, r.batch_size, r.num_gpus) for r in held}
    for r in rows:
        key = (r.model, r.num_gpus, r.precision, r.batch_size)
        guess = predicted[r] if r.gpu_type == gpu_type else r.iter_ms
        configs.setdefault(key, {})[r.gpu_type] = (guess, r.iter_ms)
    right = total = 0
    for entries in configs.values():
        if gpu_type not in entries or len(entries) < 2:
            continue
        pick = min(entries, key=lambda t: entries[t][0])
        right += entries[pick][1] <= min(v[1] for v in entries.values()) * (1 + best_slack)
        total += 1
    sibling = any(specs.get(r.gpu_type) is not None and specs.get(r.gpu_type).generation == spec.generation
                  for r in kept)
    return LeaveOutTypeResult(
        gpu_type=gpu_type, spec_row=spec.gpu_type, generation_sibling=sibling,
        time_error=statistics.fmean(errors.values()), by_precision=mean_by(lambda r: r.precision),
        by_num_gpus=mean_by(lambda r: r.num_gpus), best_type_accuracy=right / total if total else float("nan"),
        configs=total, models=mean_by(lambda r: r.model),
    )
