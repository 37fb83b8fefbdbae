"""Peak training memory of a job on one GPU, and whether it fits a GPU type.

peak = parameters x (weight + gradient + optimizer state bytes)
     + batch x the activations autograd keeps for the backward pass
     + the input batch,
against the type's memory less what the CUDA context, cuDNN workspaces and the caching allocator's
slack take (`RESERVED_GB` + `USABLE_FRACTION`).

Kept activations: every layer output of the profile (`bytes_by_kind`, per sample, float32), except the
element-wise activations that torchvision (and most training code) runs in place (ReLU, ReLU6, SiLU,
Hardswish...: their output overwrites the norm's output they follow, so it costs no new memory); GELU and
other non-in-place activations count. Half precision (autocast or `.half()`) halves the activations and
adds a half copy of the weights beside the FP32 ones.

Pure Python: the planner and msub may call `fits` for every type.
"""

from __future__ import annotations

import os
from _collections_abc import Mapping  # collections.abc's own class, without the collections package

from msched.estimate.gpu_specs import GpuSpec
from msched.util.record import record

GB = 1e9
RESERVED_GB = 0.6          # CUDA context + cuDNN workspace headroom on the device
USABLE_FRACTION = 0.95     # the caching allocator's fragmentation
OPTIMIZER_STATES = {"none": 0, "sgd": 1, "momentum": 1, "adam": 2, "adamw": 2}
NOT_IN_PLACE = ("act_gelu", "act_glu", "act_softmax", "act_tanh", "act_sigmoid", "act_elu", "act_prelu")


@record
class MemoryEstimate:
    peak_gb: float
    weights_gb: float
    activations_gb: float
    usable_gb: float = 0.0
    fits: bool = True


def _get(profile: object, key: str) -> object:
    return profile.get(key) if isinstance(profile, Mapping) else getattr(profile, key, None)


def kept_activation_bytes(profile: object) -> float:
    """Bytes per sample (float32) autograd keeps for backward; profiles without per-kind bytes fall back
    to all layer outputs."""
    by_kind = _get(profile, "bytes_by_kind") or {}
    if not by_kind:
        return float(_get(profile, "activation_bytes") or 0)
    return float(sum(v for k, v in by_kind.items() if not k.startswith("act_") or k in NOT_IN_PLACE))


def peak_memory_gb(profile: object, batch_size: int, precision: str = "float", optimizer: str = "sgd") -> MemoryEstimate:
    """Predicted peak device memory (GB) of one training step at `batch_size` per GPU."""
    params = float(_get(profile, "params") or 0)
    states = OPTIMIZER_STATES.get(optimizer.lower(), 1)
    if precision == "double":
        per_param, act_scale = 8.0 * (2 + states), 2.0
    elif precision in ("half", "bfloat16"):
        per_param, act_scale = 4.0 * (2 + states) + 2.0, 0.5
    else:
        per_param, act_scale = 4.0 * (2 + states), 1.0
    weights = params * per_param
    shape = _get(profile, "input_shape") or ()
    size = int(_get(profile, "input_size") or 224)
    input_elems = 1
    for d in (shape or (3, size, size)):
        input_elems *= int(d)
    acts = batch_size * (kept_activation_bytes(profile) + input_elems * 4.0) * act_scale
    return MemoryEstimate(peak_gb=(weights + acts) / GB, weights_gb=weights / GB, activations_gb=acts / GB)


def usable_gb(spec: GpuSpec) -> float:
    return max(0.0, spec.memory_gb * USABLE_FRACTION - RESERVED_GB)


def job_peak_gb(spec: str, batch_size: int | None, precision: str = "float") -> float | None:
    """A job's predicted peak training memory per GPU (GB, 3 decimals: what its tag's `mem` carries) at
    its batch size, or None when the batch size is not given or the model has no profile here (a
    torchvision name: the shipped table; a model file: the profile its classification cached). msub and
    the simulator's submit decision both ask here. Never raises."""
    if not batch_size:
        return None
    try:
        from msched.models.shipped import profile_data

        prof = profile_data(spec) if ".py:" not in spec else None
        if prof is None and ".py:" in spec and os.geteuid() != 0:
            from msched.models.profile_cache import get_profile

            prof = get_profile(spec)
        if prof is None:
            return None
        return round(peak_memory_gb(prof, batch_size, precision or "float").peak_gb, 3)
    except Exception:  # noqa: BLE001 - a memory figure is advice; its absence never blocks a job
        return None


def usable_by_type(types, specs=None) -> dict[str, float]:  # noqa: ANN001 - a SpecTable
    """Usable memory (GB) of each of `types` that has a spec row (by default the site's table: the shipped
    rows plus the config's `gpu_specs`, so a type the site added is held back for memory too): what
    msched.policy.feasibility.memory_fits compares a job's peak with."""
    if specs is None:
        from msched.estimate.gpu_specs import site_specs

        specs = site_specs()
    out = {}
    for t in types:
        spec = specs.get(t)
        if spec is not None:
            out[t] = usable_gb(spec)
    return out


def fits(profile: object, spec: GpuSpec, batch_size: int, precision: str = "float",
         optimizer: str = "sgd") -> MemoryEstimate:
    """The estimate with `usable_gb` and `fits` filled in for `spec`: a type the job does not fit must
    never be chosen (the planner's and msub's feasibility)."""
    est = peak_memory_gb(profile, batch_size, precision, optimizer)
    usable = usable_gb(spec)
    return est._replace(usable_gb=usable, fits=est.peak_gb <= usable)
