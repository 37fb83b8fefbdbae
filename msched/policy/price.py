"""The submit price of the scarce fast GPU types (issue 17, online mean JCT): what a job must save on a
type to be allowed it at submission.

Online, most jobs start the moment they are submitted, on a type msub's submit choice allowed
(`msched.policy.choice.decide_submit`), before any round sees them; so who gets the few fast GPUs is
decided by who arrives while one is free. For the mean JCT they should go to the jobs that save the
most time on them. The round publishes, per GPU type, a threshold saving (`submit_prices`): the
`quantile` of the savings of the recent managed jobs (submitted within `window_s`, running or pending)
on that type. msub then allows a type with a price only to a job whose own saving there clears it
(`priced_types`), and otherwise chooses among the remaining types as before.

A job's saving on a type is its estimated runtime there below its median estimate over the types it can
use (`saving`): the time it gains there over a typical GPU of the cluster. Types where the quantile is
not positive (the slow and the common ones) get no price and stay open to every job.

Off by default (config `submit_price = ""`): on bench_planner's tuning seeds no quantile of either
measure beat the choice without prices, and the bursts of long jobs that decide who holds the fast GPUs
are not foretold by the last hour's savings (BENCHMARKS.md, "Online mean JCT: the submit-time type
choice"). Kept as an option for sites whose arrivals are steadier.

Pure functions of plain mappings; msub imports this module only when a published file holds prices.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping

from msched.config import PRICE_MEASURES

DEFAULT_WINDOW_S = 3600.0       # the recent jobs whose savings set the price
MIN_SAMPLES = 10                # fewer recent jobs than this: no price (too little to judge by)
MAX_PRICED_TYPES = 64           # what msub accepts of the published prices (a bounded read)
MAX_PRICE_S = 1e8               # a published price above this (3 years) is taken as corrupt


MEASURES = PRICE_MEASURES


def saving(est: Mapping[str, float], gpu_type: str, measure: str = "saving") -> float:
    """What the job gains on `gpu_type` over its median runtime across the types of `est`: `saving`, the
    seconds below it (negative on a slower-than-typical type); `ratio`, the median over the runtime there
    less one (its gain per second it holds a GPU of the type; negative on a slower one)."""
    mid = statistics.median(est.values())
    if measure == "ratio":
        return mid / est[gpu_type] - 1.0
    return mid - est[gpu_type]


def submit_prices(samples: Iterable[Mapping[str, float]], quantile: float,
                  min_samples: int = MIN_SAMPLES, measure: str = "saving") -> dict[str, float]:
    """Per GPU type, the `quantile` (0-1) of the recent jobs' savings there (`samples`: each job's
    estimated runtime per type it can use; `measure`: see `saving`); only positive prices, none from
    fewer than `min_samples` jobs."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"price quantile must be in [0, 1] (got {quantile})")
    per_type: dict[str, list[float]] = {}
    count = 0
    for est in samples:
        est = {t: float(v) for t, v in est.items() if v is not None and math.isfinite(v) and v > 0}
        if len(est) < 2:
            continue
        count += 1
        for t in est:
            per_type.setdefault(t, []).append(saving(est, t, measure))
    if count < min_samples:
        return {}
    out = {}
    for t, vals in per_type.items():
        vals.sort()
        k = min(len(vals) - 1, max(0, math.ceil(quantile * len(vals)) - 1))
        if vals[k] > 0:
            out[t] = vals[k]
    return out


def priced_types(est: Mapping[str, float], price: Mapping[str, float] | None,
                 measure: str = "saving") -> dict[str, float]:
    """The job's estimates on the types it may be allowed under `price`: every type without a positive
    price, and each priced type where its saving (`saving`) reaches the price. When that leaves none
    (or the job has one type), `est` as it is."""
    if not price or len(est) < 2:
        return dict(est)
    kept = {t: v for t, v in est.items() if price.get(t, 0.0) <= 0 or saving(est, t, measure) >= price[t]}
    return kept or dict(est)


def clean_prices(raw: object, known: Iterable[str] | None = None) -> dict[str, float]:
    """Published prices as msub may use them: a mapping of at most MAX_PRICED_TYPES type names (of
    `known`, when given) to finite seconds in (0, MAX_PRICE_S]; anything else (a corrupt or hostile
    file) gives {} (the choice without prices)."""
    if not isinstance(raw, Mapping) or len(raw) > MAX_PRICED_TYPES:
        return {}
    known = set(known) if known is not None else None
    out = {}
    for k, v in raw.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int | float):
            return {}
        v = float(v)
        if not (math.isfinite(v) and 0 < v <= MAX_PRICE_S) or len(k) > 64:
            return {}
        if known is None or k in known:
            out[k] = v
    return out


def round_prices(jobs: Iterable, estimator, now: float, gpu_types: Iterable[str], quantile: float,  # noqa: ANN001
                 window_s: float = DEFAULT_WINDOW_S, canon=None, measure: str = "saving") -> dict[str, float]:  # noqa: ANN001
    """What a round publishes (`submit_prices`) from the jobs it read (`msched.slurm.base.SlurmJob`): the
    managed jobs submitted within `window_s` of `now`, running or pending, not pinned to a type by their
    owner, each with its estimates (`estimator(job, tag)`) on the cluster's `gpu_types` (names through
    `canon`). A job whose estimate fails is left out."""
    types = set(gpu_types)
    samples = []
    for job in jobs:
        if not (job.is_running or job.is_pending) or job.num_gpus <= 0 or job.submit_time < now - window_s:
            continue
        tag = job.tag
        if tag is None or tag.pinned or job.gres_gpu_type:
            continue
        try:
            est = estimator(job, tag)
        except Exception:  # noqa: BLE001 - a bad tag must not stop the round
            continue
        est = {canon(t) if canon else t: v for t, v in est.items()}
        samples.append({t: v for t, v in est.items() if t in types})
    return submit_prices(samples, quantile, measure=measure)
