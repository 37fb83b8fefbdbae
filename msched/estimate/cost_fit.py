"""Fitting the cost model's parameters on measured rows (scipy's least_squares on log errors).

Used by scripts/fit_cost_model.py (the shipped parameters), by bench/bench_estimate.py (fits with a family
or a GPU type held out) and by a site refitting after its own measurements. Imports numpy and scipy: never
on msub's path, which only reads the fitted file (msched.estimate.cost_model).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from msched.estimate.cost_model import COMPUTE_KINDS, MEMORY_GROUPS, combine, terms
from msched.estimate.gpu_specs import SpecTable
from msched.util.record import record

SHARED = (*(f"e_{k}" for k in COMPUTE_KINDS), *(f"a_{k}" for k in COMPUTE_KINDS),
          *(f"a_{g}" for g in MEMORY_GROUPS), "a_w", "c_gpu", "c_host", "c_in", "c_step", "h_replica", "phi",
          "dp_bytes", "dp_module", "dp_fixed")
FIXED = {"e_conv_spatial": 1.0}          # the scale the generation efficiencies are relative to
# c_step (ms x GHz per recurrent time step, forward + backward): set before any fit from the kernels a cuDNN
# LSTM step runs (~2 forward, ~3 backward, ~7 us each at ~1.4 GHz); only recurrent rows (Gavel's LM) move it
# c_in (ms per MB of a whole loop's input, host side): set before any fit from a host copy of the batch plus a
# pageable copy over PCIe (~10 GB/s together: 0.1 ms per MB); only rows with large inputs move it
INITIAL = {"i_fp64": 2.0, "q_overlap": 4.0, "phi": 0.05, "c_gpu": 0.005, "c_host": 0.03, "c_in": 0.1, "c_step": 0.05, "h_replica": 0.3,
           "dp_bytes": 1.0, "dp_module": 0.01, "dp_fixed": 1.0}
PRIOR_WEIGHT = 0.03   # a weak pull of log-parameters toward their start: keeps unseen ones put
POOL_WEIGHT = 0.3     # pull of each generation's efficiency toward the other generations' (log) mean:
                      # a generation seen on few rows (Gavel's K80) stays near what the others say
# Two weights that decide what a GPU type never measured inherits from its measurement run (chosen by nested
# leave-one-type-out cross-validation in bench/bench_estimate.py --nested-types; see BENCHMARKS.md):
# - HOST_POOL_WEIGHT: pull of each type's host factor toward its run's (log) mean. The host factor is the
#   machine's software (Python dispatch, PyTorch), shared by a run's types. Held loosely (0.3), Gavel's K80
#   took a host factor 6x its siblings' for what is Kepler's own slowness, and a P100 left out inherited
#   it: Gavel's small jobs (ResNet-18 on CIFAR-10) were predicted ~2x too slow there.
# - RUN_PRIOR_WEIGHT: pull of each run's GPU-time factor toward the reference run's (1). The torchvision
#   table's main run shares a generation with the other runs only through titanxp (Pascal); with titanxp
#   left out nothing ties the runs together, and without this pull the pooling of generation efficiencies
#   alone settled the other runs' speed, putting the older run's faster Pascal into Pascal's efficiency.
# Before: 0.3 and 0 (P100 left out 0.301 on Gavel's GPU-bound rows, titanxp 0.274).
HOST_POOL_WEIGHT = 1.0
RUN_PRIOR_WEIGHT = 1.0
# FILE_HOST_WEIGHT: pull of each measurement file's host factor (a type's rows at one GPU count and precision,
# measured in one sitting) toward its type's. predict10: the nested family hold-out's wrong best types were
# mostly ShuffleNet's (host-bound) between A100 and RTX 2080 Ti; the files' host-bound rows disagree beyond
# one host factor per type (RTX 2080 Ti float +0.10 in log, half -0.09; half files below float on every
# Turing and Ampere machine). Set before any run to HOST_POOL_WEIGHT's value, not tuned; 0 disables it.
FILE_HOST_WEIGHT = 1.0
# predict11: two optional degrees of freedom for host-bound rows (off: the shipped model before predict11),
# chosen by the nested cross-validation in bench/bench_estimate.py (--nested-variants), not by the held-out rows:
# - FIT_OVERLAP: the exponent of the smooth maximum of GPU and host time (`q_overlap`, SMOOTH_Q = 4 when
#   not fitted) fitted: how much a host-bound iteration still waits on the GPU (a loop that synchronises on
#   the loss each step adds part of the GPU time to the host's);
# - GEN_CALL: a per-generation factor on the per-layer GPU-side cost (`gen_call`: a small kernel's floor
#   differs between generations, so the best type of a launch-bound model is not only its host's).
FIT_OVERLAP = False
GEN_CALL = False
# predict15: FP64_CEILING, a double-precision ceiling at `i_fp64` FLOPs per byte of the spec sheet's memory
# bandwidth (one shared parameter; off: the shipped model). Why tried: TITAN V left out has no Volta double
# row, and its FP64 units' spec peak (1/2 of FP32) is not what binds its double kernels (0.15 of it reached,
# BENCHMARKS.md predict12); the 1/32-rate parts are bound by their FP64 units and stay under any such ceiling.
FP64_CEILING = False
# physical ranges (log-space bounds): efficiencies relative to a spatial convolution's, memory-traffic
# multipliers of the bytes the terms count. Without them a parameter that only small layers inform (the
# classifier's linear layer at batch 12) soaks up fixed costs and wrecks the large layers of a family the
# fit never saw (VGG's 100M-parameter linears).
BOUNDS = {"e_": (0.2, 2.0), "a_conv_grouped": (0.25, 50.0), "a_": (0.25, 8.0), "eff:": (0.05, 3.0),
          "bw:": (0.2, 5.0), "file:": (0.33, 3.0), "q_overlap": (1.5, 12.0), "call:": (0.25, 4.0),
          "i_fp64": (0.1, 100.0)}
MIN_MODELS_FOR_DEFAULT = 3   # generations measured on fewer models do not shape the unseen-generation default


@record
class FitRow:
    model: str
    gpu_type: str
    num_gpus: int
    batch_size: int
    precision: str
    iter_ms: float
    optimizer: bool = False
    run: str = ""          # the measurement run (machine and software stack) the row came from; see `fit`


def file_key(gpu_type: str, num_gpus: int, precision: str) -> str:
    """A measurement file's key in the parameter file's `file_host`: type (canonical), GPU count, precision."""
    return f"{gpu_type}:{int(num_gpus)}:{precision}"


def fit(rows: Sequence[FitRow], profiles: Mapping[str, object], specs: SpecTable, *,
        host_pool_weight: float | None = None, run_prior_weight: float | None = None,
        file_host_weight: float | None = None, fit_overlap: bool | None = None, gen_call: bool | None = None,
        fp64_ceiling: bool | None = None) -> dict:
    """Fit on `rows` (profiles by model name, spec rows by type) and return the parameter file's data.
    `host_pool_weight`, `run_prior_weight`, `file_host_weight`: HOST_POOL_WEIGHT, RUN_PRIOR_WEIGHT and
    FILE_HOST_WEIGHT unless given (the benchmark's cross-validation of them); `fit_overlap`, `gen_call`,
    `fp64_ceiling`: FIT_OVERLAP, GEN_CALL and FP64_CEILING unless given."""
    host_pool = HOST_POOL_WEIGHT if host_pool_weight is None else host_pool_weight
    run_prior = RUN_PRIOR_WEIGHT if run_prior_weight is None else run_prior_weight
    file_weight = FILE_HOST_WEIGHT if file_host_weight is None else file_host_weight
    overlap = FIT_OVERLAP if fit_overlap is None else fit_overlap
    with_call = GEN_CALL if gen_call is None else gen_call
    with_fp64 = FP64_CEILING if fp64_ceiling is None else fp64_ceiling
    import numpy as np
    from scipy.optimize import least_squares

    usable = [r for r in rows if r.model in profiles and specs.get(r.gpu_type) is not None and r.iter_ms > 0]
    if not usable:
        raise ValueError("no row with both a profile and a GPU spec to fit on")
    per_row = []
    for r in usable:
        spec = specs.get(r.gpu_type)
        t, pclass = terms(profiles[r.model], spec, r.precision, r.batch_size, r.num_gpus, r.optimizer)
        per_row.append((spec.generation, t, pclass))
    gens = sorted({g for g, _t, _p in per_row})
    eff_keys = sorted({(g, pclass[k]) for g, t, pclass in per_row for k in COMPUTE_KINDS if t["C_" + k] > 0})
    counts = {g: sum(1 for gg, _t, _p in per_row if gg == g) for g in gens}
    bw_fixed = max(gens, key=lambda g: counts[g])
    free_shared = [n for n in SHARED if n not in FIXED] + (["q_overlap"] if overlap else []) \
        + (["i_fp64"] if with_fp64 else [])
    bw_free = [g for g in gens if g != bw_fixed]
    call_free = bw_free if with_call else []
    types = sorted({specs.get(r.gpu_type).gpu_type for r in usable})
    multi_types = sorted({f"{specs.get(r.gpu_type).gpu_type}:{r.num_gpus}" for r in usable if r.num_gpus > 1})
    # each measurement file's host factor relative to its type's, for types measured in more than one file
    row_file = [file_key(specs.get(r.gpu_type).gpu_type, r.num_gpus, r.precision) for r in usable]
    files_of: dict[str, set[str]] = {}
    for r, key in zip(usable, row_file, strict=True):
        files_of.setdefault(specs.get(r.gpu_type).gpu_type, set()).add(key)
    files = sorted(k for ks in files_of.values() if len(ks) > 1 for k in ks) if file_weight > 0 else []
    # each measurement run's GPU-speed factor (its software stack: cuDNN, driver), relative to the run with
    # the most rows; identifiable where runs share a generation (Pascal: titanxp and the older run's gtx1080ti)
    run_rows = {}
    for r in usable:
        run_rows[r.run] = run_rows.get(r.run, 0) + 1
    run_fixed = max(sorted(run_rows), key=lambda k: run_rows[k])
    runs_free = [k for k in sorted(run_rows) if k != run_fixed]
    names = [*free_shared, *(f"eff:{g}:{c}" for g, c in eff_keys), *(f"bw:{g}" for g in bw_free),
             *(f"run:{k}" for k in runs_free), *(f"host:{t}" for t in types), *(f"link:{t}" for t in multi_types),
             *(f"file:{k}" for k in files), *(f"call:{g}" for g in call_free)]
    x0 = np.array([math.log(INITIAL.get(n, 0.5 if n.startswith(("e_", "eff:")) else 1.0)) for n in names])

    tarr = {key: np.array([t[key] for _g, t, _p in per_row]) for key in per_row[0][1]}
    eff_index = {key: i for i, key in enumerate(eff_keys)}
    kind_idx = {k: np.array([eff_index.get((g, pclass[k]), -1) for g, _t, pclass in per_row]) for k in COMPUTE_KINDS}
    gen_idx = np.array([gens.index(g) for g, _t, _p in per_row])
    type_idx = np.array([types.index(specs.get(r.gpu_type).gpu_type) for r in usable])
    link_idx = np.array([multi_types.index(t) if t in multi_types else -1
                         for t in (f"{specs.get(r.gpu_type).gpu_type}:{r.num_gpus}" for r in usable)])
    file_index = {k: i for i, k in enumerate(files)}
    file_idx = np.array([file_index.get(k, -1) for k in row_file])
    n_bw = len(bw_free)
    n_run = len(runs_free)
    run_idx = np.array([runs_free.index(r.run) if r.run in runs_free else -1 for r in usable])
    y = np.log(np.array([r.iter_ms for r in usable]))
    n_shared, n_eff = len(free_shared), len(eff_keys)

    def unpack(x):
        shared = {**FIXED, **{n: math.exp(v) for n, v in zip(free_shared, x[:n_shared], strict=True)}}
        eff_vals = np.exp(x[n_shared:n_shared + n_eff])
        at = n_shared + n_eff
        bw = {bw_fixed: 1.0, **{g: math.exp(v) for g, v in zip(bw_free, x[at:at + n_bw], strict=True)}}
        at += n_bw
        run = np.exp(x[at:at + n_run])
        at += n_run
        host = np.exp(x[at:at + len(types)])
        at += len(types)
        link = np.exp(x[at:at + len(multi_types)])
        at += len(multi_types)
        filef = np.exp(x[at:at + len(files)])
        call = {bw_fixed: 1.0, **{g: math.exp(v) for g, v in zip(call_free, x[at + len(files):], strict=True)}}
        return shared, eff_vals, bw, host, link, run, filef, call

    def predict(x):
        shared, eff_vals, bw, host, link, run, filef, call = unpack(x)
        padded = np.append(eff_vals, 1.0)   # index -1: a kind with no FLOPs in this row
        eff = {k: padded[kind_idx[k]] for k in COMPUTE_KINDS}
        ebw = np.array([bw[g] for g in gens])[gen_idx]
        return combine(tarr, shared, eff, ebw, host[type_idx] * np.append(filef, 1.0)[file_idx],
                       np.append(link, 1.0)[link_idx], gpuf=np.append(run, 1.0)[run_idx],
                       callf=np.array([call.get(g, 1.0) for g in gens])[gen_idx] if call_free else 1.0)

    groups = [np.array([n_shared + i for i, (_g, c) in enumerate(eff_keys) if c == cls])
              for cls in sorted({c for _g, c in eff_keys})]
    groups.append(np.array([n_shared + n_eff + i for i in range(n_bw)]))   # bandwidth, relative to bw_fixed's 0
    groups.append(np.array([len(names) - len(call_free) + i for i in range(len(call_free))]))   # call, likewise
    # the host factor is the machine's software more than the GPU's: each type's is pulled toward its run's
    # (log) mean, so a slow GPU (K80) shows in its generation's efficiency rather than as a slow host that a
    # never-measured type of the same run would inherit
    host_at = n_shared + n_eff + n_bw + n_run
    main_run = _type_run(usable, specs)
    weights = [POOL_WEIGHT] * len(groups)
    for run in sorted(set(main_run.values())):
        groups.append(np.array([host_at + i for i, t in enumerate(types) if main_run.get(t) == run]))
        weights.append(host_pool)
    weights = [w for g, w in zip(groups, weights, strict=True) if len(g) > 1]
    groups = [g for g in groups if len(g) > 1]

    run_at = slice(n_shared + n_eff + n_bw, n_shared + n_eff + n_bw + n_run)
    file_at = slice(len(names) - len(call_free) - len(files), len(names) - len(call_free))

    def residuals(x):
        pooled = [w * (x[g] - x[g].mean()) for g, w in zip(groups, weights, strict=True)]
        return np.concatenate([np.log(predict(x)) - y, PRIOR_WEIGHT * (x - x0), *pooled, run_prior * x[run_at],
                               file_weight * x[file_at]])

    lower, upper = [], []
    for n in names:
        lo, hi = next((b for prefix, b in BOUNDS.items() if n.startswith(prefix)), (1e-6, 1e6))
        lower.append(math.log(lo))
        upper.append(math.log(hi))
    x0 = np.clip(x0, np.array(lower) + 1e-9, np.array(upper) - 1e-9)
    # one BLAS thread: the trust region's SVD of a ~1,800 x 70 Jacobian takes 30 ms on one thread and 0.5-1.2
    # s when OpenBLAS spreads it over threads on a loaded 2-core machine (predict10: 83% of a fit's time;
    # a fit 147 s -> ~30 s). Single-threaded, a fit is also the same to the bit wherever it runs.
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        res = least_squares(residuals, x0, loss="soft_l1", f_scale=0.1, max_nfev=400, method="trf",
                            bounds=(np.array(lower), np.array(upper)))
    shared, eff_vals, bw, host, link, run, filef, call = unpack(res.x)
    gen_eff: dict[str, dict[str, float]] = {}
    for (g, c), v in zip(eff_keys, eff_vals, strict=True):
        gen_eff.setdefault(g, {})[c] = float(v)
    err = np.abs(np.log(predict(res.x)) - y)
    out = {
        "description": "Fitted parameters of msched.estimate.cost_model (scripts/fit_cost_model.py).",
        "shared": {k: float(v) for k, v in shared.items()},
        "gen_eff": gen_eff,
        "gen_bw": {g: float(v) for g, v in bw.items()},
        "type_host": {t: float(v) for t, v in zip(types, host, strict=True)},
        "run_host": _run_host(usable, {t: float(v) for t, v in zip(types, host, strict=True)}, specs),
        "type_link": {t: float(v) for t, v in zip(multi_types, link, strict=True)},
        "file_host": {k: float(v) for k, v in zip(files, filef, strict=True)},
        "run_gpu": {run_fixed: 1.0, **{k: float(v) for k, v in zip(runs_free, run, strict=True)}},
        "type_run": _type_run(usable, specs),
        "fit": {"rows": len(usable), "mean_abs_log_error": float(err.mean()),
                "types": sorted({r.gpu_type for r in usable}), "models": sorted({r.model for r in usable})},
    }
    from msched.estimate.cost_model import _geomean, _geomean_rows

    models_per_gen = {g: len({r.model for r, (gg, _t, _p) in zip(usable, per_row, strict=True) if gg == g})
                      for g in gens}
    broad = [g for g in gens if models_per_gen[g] >= MIN_MODELS_FOR_DEFAULT] or gens
    out["default_eff"] = _geomean_rows({g: gen_eff[g] for g in broad if g in gen_eff})
    out["default_bw"] = _geomean([out["gen_bw"][g] for g in broad])
    if call_free:
        out["gen_call"] = {g: float(v) for g, v in call.items()}
        out["default_call"] = _geomean([call[g] for g in broad])
    out["fit"]["models_per_generation"] = models_per_gen
    return out


def _type_run(rows: Sequence[FitRow], specs: SpecTable) -> dict[str, str]:
    """The run each type was measured in (the one with most of its rows): its own figures carry that run's
    GPU-speed factor."""
    count: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (specs.get(r.gpu_type).gpu_type, r.run)
        count[key] = count.get(key, 0) + 1
    out: dict[str, str] = {}
    for (t, run), n in sorted(count.items()):
        if t not in out or n > count[(t, out[t])]:
            out[t] = run
    return out


def _run_host(rows: Sequence[FitRow], type_host: Mapping[str, float], specs: SpecTable) -> dict[str, float]:
    """Each measurement run's host factor: the geometric mean of the host factors of the types it measured.

    The host factor is the machine's and its software's (Python dispatch, the PyTorch and cuDNN versions),
    not the GPU's: the torchvision table's older single-GPU files (gtx1080ti, titanv: 20 timed iterations)
    were run on another setup than the rest and both fit a host ~4x faster. A type never measured whose
    run is known (a site's new type, on the site's software) takes its run's factor rather than the mean
    over every machine."""
    from msched.estimate.cost_model import _geomean

    by_run: dict[str, set[str]] = {}
    for r in rows:
        if r.run:
            by_run.setdefault(r.run, set()).add(specs.get(r.gpu_type).gpu_type)
    return {run: _geomean([type_host[t] for t in sorted(ts) if t in type_host]) for run, ts in sorted(by_run.items())}


def rows_from_perf(perf_rows: Iterable, optimizer: bool = False, run=None) -> list[FitRow]:  # noqa: ANN001
    """FitRows from PerfTable rows (per-GPU batch size, as DESIGN's table holds it). `run`: the
    measurement run of each row, a string or a function of the row (default: none)."""
    return [FitRow(r.model, r.gpu_type, int(r.num_gpus), int(r.batch_size), r.precision, float(r.iter_ms), optimizer,
                   (run(r) if callable(run) else run) or "")
            for r in perf_rows]
