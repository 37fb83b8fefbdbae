"""Runtime estimates per GPU type (DESIGN, policy point 4). Pure Python: msub uses it too.

job's time on type T = work x iteration time of its reference on T (at the job's GPU count and per-GPU
batch size, by the performance table's fill rules) x the job's FLOPs over the reference's.
work = iterations; without them the job is assumed to need its whole time limit on the slowest type
its request allows, which fixes its work. Types without data are left out (unknown).
"""

from __future__ import annotations

from collections.abc import Iterable

from msched.estimate.perf_table import DEFAULT_PRECISION, PerfTable


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


def work_iterations(per_iter_s: dict[str, float], iterations: float | None, time_limit_s: float | None) -> float | None:
    """The job's work in iterations: given, or its time limit on the slowest type it may use."""
    if iterations is not None and iterations > 0:
        return float(iterations)
    if time_limit_s and per_iter_s:
        return time_limit_s / max(per_iter_s.values())
    return None


def estimate_runtime(
    perf: PerfTable, reference: str, *, num_gpus: int, batch_size: int | None = None, flops_ratio: float = 1.0,
    iterations: float | None = None, time_limit_s: float | None = None, types: Iterable[str] | None = None,
    precision: str = DEFAULT_PRECISION, within_time_limit: bool = True,
) -> dict[str, float]:
    """Estimated seconds per GPU type; types whose estimate exceeds the time limit are dropped."""
    per_iter = iteration_seconds(perf, reference, num_gpus, batch_size, flops_ratio, types, precision)
    work = work_iterations(per_iter, iterations, time_limit_s)
    return runtimes(per_iter, work, time_limit_s if within_time_limit else None)


def runtimes(per_iter_s: dict[str, float], work: float | None, time_limit_s: float | None) -> dict[str, float]:
    """Seconds per GPU type for `work` iterations; types whose time exceeds the limit are dropped
    (Slurm would kill the job there); no work known = no estimate."""
    if work is None:
        return {}
    est = {t: work * s for t, s in per_iter_s.items()}
    if time_limit_s:
        est = {t: v for t, v in est.items() if v <= time_limit_s * (1 + 1e-9)}
    return est
