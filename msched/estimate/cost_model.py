"""Per-layer cost model: a training iteration's time on a GPU type from the model's layer profile and the
type's spec row, with efficiencies fitted on measured tables (scripts/fit_cost_model.py).

For each layer kind of the profile (`calls_by_kind`, `flops_by_kind`, `bytes_by_kind`, per sample):

- compute kinds (pointwise / spatial / grouped-depthwise convolution, linear, other matmuls such as
  attention's): a roofline, the smooth maximum of compute time `3 x FLOPs x batch / (peak x e_kind x
  e_gen,precision)` (backward ~ 2 x forward) and memory time `a_kind x output bytes x batch / (bandwidth
  x e_bw,gen)`; the peak is the type's TF32 rate for convolutions where PyTorch allows TF32 by default
  (cuDNN), FP32 for matmuls (PyTorch's default since 1.12), tensor cores for half, FP64 for double;
- memory kinds (norms, activations, pooling, dropout, squeeze-excitation): bytes over bandwidth;
- weights: a compute kind's parameters are part of its memory time (read forward and backward, gradient
  written); other parameters (norms) are bytes over bandwidth;
- a per-layer ramp cost inside the roofline's compute side (`phi` GFLOPs at the kind's peak per call:
  a small layer cannot fill a large GPU, so efficiency grows with a layer's work);
- a per-layer fixed cost: GPU side (a small kernel cannot fill the GPU: `c_gpu / clock`) plus host side
  (Python dispatch and kernel launch: `c_host` per call), the iteration being the smooth maximum of the
  GPU and host times, since launches overlap with the GPU's work (their sum in a loop that waits for the
  GPU every step: a model file's `#MSCHED --sync-steps=N`, an RL rollout sampling each action on the host);
- a per-time-step cost of recurrent layers (`c_step / clock` per step of the profile's `recurrent_steps`,
  GPU side): cuDNN runs an LSTM's steps one after another as small kernels whatever the batch, so a
  language model's step has a floor its FLOPs do not show;
- the optimizer step (`optimizer=True`: SGD with momentum reads weights, gradients, momentum and writes
  two: ~5 x parameter bytes over bandwidth plus its launches; the torchvision benchmark has none), and
  with it the input's host cost (`c_in` ms per MB of input, on the host side: a whole training loop
  builds each batch in host memory and copies it to the GPU, where the torchvision benchmark reuses one
  random tensor already there). It scales with what a sample is (a recommender's dense 20,108-item
  vector: 80 KB; a CIFAR image: 12 KB; 35 tokens: 0.1 KB), not with the GPU: a job whose batches are
  large is host-bound on a fast GPU;
- several GPUs (data parallelism on one node): weights broadcast and gradients reduced over the node's
  interconnect, `2 x (n-1) x parameter bytes / interconnect bandwidth` (times the measured machine's
  link factor: its real interconnect, an NVLink bridge the spec row does not show), plus a per-module
  replication cost and extra host time per replica (`nn.DataParallel`, what the measured multi-GPU rows
  used; times the machine's host factor).

- the measurement run (a machine setup and its software stack: the torchvision table's main and older
  files, Gavel's cluster, a site's own rows): a GPU-time factor per run (`run_gpu`, its cuDNN and driver)
  and, for a type never measured, its run's host factor (`run_host`) instead of every machine's mean.

The same arithmetic serves the fit (numpy arrays, in msched.estimate.cost_fit) and msub's hot path (floats,
pure Python): `combine` uses only + - * / and **. Generations the fit never saw take the geometric mean of
the fitted generations (`default` in the parameter file), which is what makes a type known only by its
spec row predictable.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping

from msched.config import DATA_DIR
from msched.estimate.gpu_specs import GpuSpec

SHIPPED_PARAMS = os.path.join(DATA_DIR, "cost_model.json")
COMPUTE_KINDS = ("conv_pointwise", "conv_spatial", "conv_grouped", "conv_other", "linear", "other")
MEMORY_GROUPS = ("norm", "act", "pool")
BYTES_PER_ELEMENT = {"float": 4, "half": 2, "bfloat16": 2, "double": 8}
TF32_CONV = True     # torch.backends.cudnn.allow_tf32 defaults to True
TF32_MATMUL = False  # torch.backends.cuda.matmul.allow_tf32 defaults to False since PyTorch 1.12
SMOOTH_Q = 4.0       # smooth maximum (a^q + b^q)^(1/q)


def precision_class(spec: GpuSpec, precision: str, kind: str) -> str:
    """Which efficiency a kind's compute gets: tensor cores (half), TF32, FP32 CUDA cores, half without
    tensor cores (`fp16`) or FP64."""
    if precision == "double":
        return "fp64"
    if precision in ("half", "bfloat16"):
        # without tensor cores cuDNN converts FP16 storage to FP32 math: its own (measured: slower) efficiency
        return "tensor" if spec.has_tensor_cores and spec.fp16_tflops > spec.fp32_tflops else "fp16"
    tf32 = TF32_MATMUL if kind in ("linear", "other") else TF32_CONV
    return "tf32" if tf32 and spec.tf32_tflops > spec.fp32_tflops else "fp32"


def _peak(spec: GpuSpec, pclass: str, precision: str) -> float:
    if pclass == "fp64":
        return spec.peak_tflops("double")
    if pclass in ("tensor", "fp16"):
        return spec.peak_tflops("half")
    if pclass == "tf32":
        return spec.peak_tflops("float", tf32=True)
    return spec.fp32_tflops


def _memory_group(kind: str) -> str | None:
    if kind in COMPUTE_KINDS:
        return None
    if kind in ("batchnorm", "layernorm"):
        return "norm"
    if kind.startswith("act_"):
        return "act"
    if kind.startswith("pool_"):
        return "pool"
    return "act"   # dropout, squeeze-excitation's scaling, other element-wise modules


def _get(profile: object, key: str) -> object:
    return profile.get(key) if isinstance(profile, Mapping) else getattr(profile, key, None)


def terms(profile: object, spec: GpuSpec, precision: str, batch_size: int, num_gpus: int = 1,
          optimizer: bool = False) -> tuple[dict[str, float], dict[str, str]]:
    """The parameter-free parts of the prediction (ms at peak / at full bandwidth), and each compute
    kind's precision class. `profile` is a Profile or its dict (the shipped JSON)."""
    flops = dict(_get(profile, "flops_by_kind") or {})
    out_bytes = dict(_get(profile, "bytes_by_kind") or {})
    calls = dict(_get(profile, "calls_by_kind") or {})
    ops = dict(_get(profile, "ops") or {})
    params = float(_get(profile, "params") or 0)
    kind_params = dict(_get(profile, "params_by_kind") or {})
    if not calls:   # a profile from before per-kind calls: its module counts stand in
        calls = dict(_get(profile, "counts") or {})
    scale = BYTES_PER_ELEMENT.get(precision, 4) / 4.0
    b = float(batch_size)
    bw = spec.memory_bw_gbs * 1e9 / 1e3          # bytes per ms
    t: dict[str, float] = {}
    pclass: dict[str, str] = {}
    for k in COMPUTE_KINDS:
        f = float(flops.get(k, 0.0))
        by = float(out_bytes.get(k, 0.0))
        pc = precision_class(spec, precision, k)
        peak = _peak(spec, pc, precision) * 1e12 / 1e3   # FLOPs per ms
        t["C_" + k] = 3.0 * f * b / peak if peak > 0 else 0.0
        # a layer's ramp-up / wave-quantisation cost, as GFLOPs at the layer kind's peak per call
        t["K_" + k] = float(calls.get(k, 0)) * 1e9 / peak if peak > 0 and f > 0 else 0.0
        # outputs written forward and read twice backward; weights read forward and backward, gradient written
        t["M_" + k] = 3.0 * (by * b + float(kind_params.get(k, 0)) * 4.0) * scale / bw
        # double precision's FLOPs over the spec sheet's bandwidth (ms at 1 FLOP per byte): the FP64 ceiling's
        # term, read only by a parameter file with `i_fp64` (`combine`)
        t["D_" + k] = 3.0 * f * b / bw if pc == "fp64" else 0.0
        pclass[k] = pc
    for g in MEMORY_GROUPS:
        t["M_" + g] = 0.0
    for kind, by in out_bytes.items():
        g = _memory_group(kind)
        if g:
            t["M_" + g] += 3.0 * float(by) * b * scale / bw
    n_calls = float(sum(calls.values()) + sum(ops.values()))
    pbytes = params * 4.0 * scale
    t["W"] = 3.0 * (params - sum(float(kind_params.get(k, 0)) for k in COMPUTE_KINDS)) * 4.0 * scale / bw
    t["L"] = n_calls
    t["L_gpu"] = n_calls / max(spec.boost_clock_mhz / 1000.0, 0.1)
    t["T"] = float(_get(profile, "recurrent_steps") or 0) / max(spec.boost_clock_mhz / 1000.0, 0.1)
    n = max(1, int(num_gpus))
    link = max(spec.interconnect_gbs, 1.0) * 1e9 / 1e3
    t["P"] = 2.0 * (n - 1) * pbytes / link
    t["R"] = float(n - 1) * float(sum(calls.values()))
    t["N"] = float(n - 1)
    t["O"] = 5.0 * pbytes / bw if optimizer else 0.0
    # a whole training loop (optimizer=True: Gavel's measurements) also builds each batch's input in host
    # memory and copies it to the GPU (MB per iteration; `c_in` ms per MB, on the host side)
    t["I"] = b * input_elements(profile) * 4.0 / 1e6 if optimizer else 0.0
    t["O_calls"] = float(sum(1 for _k, v in params_by_kind_items(profile) if v)) if optimizer else 0.0
    # a loop whose host waits for the GPU's result every step (Profile.sync_steps: a rollout's action
    # sampling) gets no overlap of the two: 1 makes the iteration their sum (`combine`)
    t["S"] = 1.0 if int(_get(profile, "sync_steps") or 0) > 0 else 0.0
    return t, pclass


def input_elements(profile: object) -> float:
    """Elements of one sample's input: the profile's own input shape (a model file's example input), else a
    square RGB image of the profile's input size."""
    shape = _get(profile, "input_shape") or ()
    if shape:
        return float(math.prod(int(d) for d in shape))
    size = int(_get(profile, "input_size") or 224)
    return 3.0 * size * size


def params_by_kind_items(profile: object) -> list[tuple[str, float]]:
    return list((_get(profile, "params_by_kind") or {}).items())


def _smax(a, b, q: float = SMOOTH_Q):
    return (a ** q + b ** q) ** (1.0 / q)


def combine(t: Mapping, p: Mapping, eff: Mapping, ebw, hostf=1.0, linkf=1.0, xp_small: float = 1e-9, gpuf=1.0,
            callf=1.0):
    """ms per iteration from `terms` and parameters. `p` holds the shared parameters, `eff[kind]` the
    kind's generation x precision efficiency, `ebw` the generation's bandwidth efficiency, `hostf` and
    `linkf` the measured machine's host-speed and interconnect factors (1 for a type known only by its spec),
    `gpuf` its measurement run's GPU-time factor (the run's software stack; 1 for the reference run),
    `callf` the generation's factor on the per-layer GPU-side cost (1 where none was fitted). The GPU and
    host times overlap in a smooth maximum whose exponent is the parameter file's `q_overlap` where fitted
    (SMOOTH_Q otherwise). Works on floats (prediction) and numpy arrays (fitting) alike."""
    gpu = 0.0
    # predict15, off unless a parameter file has `i_fp64` (cost_fit.FP64_CEILING): double-precision kernels
    # also capped at `i_fp64` FLOPs per byte of the spec sheet's bandwidth, a third side of the roofline
    i64 = p.get("i_fp64")
    for k in COMPUTE_KINDS:
        c = (t["C_" + k] + p["phi"] * t["K_" + k]) / (p["e_" + k] * eff[k]) + xp_small
        m = p["a_" + k] * t["M_" + k] / ebw + xp_small
        if i64 is None:
            gpu = gpu + _smax(c, m)
        else:
            d = t["D_" + k] / i64 + xp_small
            gpu = gpu + (c ** SMOOTH_Q + m ** SMOOTH_Q + d ** SMOOTH_Q) ** (1.0 / SMOOTH_Q)
    for g in MEMORY_GROUPS:
        gpu = gpu + p["a_" + g] * t["M_" + g] / ebw
    gpu = (gpu + p["a_w"] * t["W"] / ebw + p["c_gpu"] * t["L_gpu"] * callf + p.get("c_step", 0.0) * t["T"]) * gpuf
    host = hostf * (p["c_host"] * t["L"] * (1.0 + p["h_replica"] * t["N"]) + p.get("c_in", 0.0) * t["I"])
    # the host's launches run ahead of the GPU, so the two overlap (a smooth maximum), except in a loop that
    # waits for the GPU every step (t["S"] = 1: Profile.sync_steps), where they add (predict11: A3C)
    one = (1.0 - t["S"]) * _smax(gpu, host, p.get("q_overlap", SMOOTH_Q)) + t["S"] * (gpu + host)
    # the machine's multi-GPU factor is its interconnect's: it scales the bytes all-reduced alone; replicating
    # the modules and the per-GPU fixed cost are the host's work (nn.DataParallel's Python thread), scaled by
    # its host factor (predict9: with one factor over all three, only VGG's rows, where the bytes dominate,
    # told the A100 machine's fast interconnect, and VGG held out was predicted 1.45x too slow there)
    multi = linkf * p["dp_bytes"] * t["P"] + hostf * (p["dp_module"] * t["R"] + p["dp_fixed"] * t["N"])
    opt = t["O"] / ebw + p["c_host"] * t["O_calls"]
    return one + multi + opt


class CostModel:
    """Fitted parameters (the small JSON file) and the pure-Python prediction."""

    def __init__(self, data: Mapping):
        self.data = dict(data)
        self.shared: dict[str, float] = dict(data["shared"])
        self.gen_eff: dict[str, dict[str, float]] = {g: dict(v) for g, v in data["gen_eff"].items()}
        self.gen_bw: dict[str, float] = dict(data["gen_bw"])
        self.default_eff: dict[str, float] = dict(data.get("default_eff") or _geomean_rows(self.gen_eff))
        self.default_bw: float = float(data.get("default_bw") or _geomean(list(self.gen_bw.values())))
        # each generation's factor on the per-layer GPU-side cost (predict11; absent in older files: 1)
        self.gen_call: dict[str, float] = dict(data.get("gen_call") or {})
        self.default_call: float = float(data.get("default_call") or _geomean(list(self.gen_call.values())))
        # the measured machines' own host speed (by GPU type) and multi-GPU topology (by "type:count"),
        # 1 for a machine never measured
        self.type_host: dict[str, float] = dict(data.get("type_host") or {})
        self.type_link: dict[str, float] = dict(data.get("type_link") or {})
        # a measured machine's host factor in one measurement file ("type:count:precision"), relative to its
        # type's (predict10: files measured at different sittings); 1 for a file never measured
        self.file_host: dict[str, float] = dict(data.get("file_host") or {})
        # a machine never measured: its measurement run's factor (the same software stack), else the
        # file's `default_host` (a site's refit: the site's own machines), else every machine's geometric mean
        self.run_host: dict[str, float] = dict(data.get("run_host") or {})
        self.default_host = float(data.get("default_host") or _geomean(list(self.type_host.values())))
        # each run's GPU-time factor and the run each measured type belongs to; a type never measured runs
        # at the file's `default_run` (a site's refit: the site's) or at the reference run's speed (1)
        self.run_gpu: dict[str, float] = dict(data.get("run_gpu") or {})
        self.type_run: dict[str, str] = dict(data.get("type_run") or {})
        self.default_run: str = str(data.get("default_run") or "")
        self.default_link: dict[int, float] = {}
        for key in self.type_link:
            n = int(key.rpartition(":")[2])
            self.default_link[n] = _geomean([v for k, v in self.type_link.items() if k.endswith(f":{n}")])

    @classmethod
    def load(cls, path: str = SHIPPED_PARAMS) -> CostModel:
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh))

    def efficiency(self, generation: str, pclass: str) -> float:
        own = self.gen_eff.get(generation, {})
        if pclass in own:
            return own[pclass]
        return self.default_eff.get(pclass, 1.0)

    def bandwidth_efficiency(self, generation: str) -> float:
        return self.gen_bw.get(generation, self.default_bw)

    def knows_generation(self, generation: str) -> bool:
        return generation in self.gen_bw

    def iteration_ms(self, profile: object, spec: GpuSpec, precision: str = "float", batch_size: int = 12,
                     num_gpus: int = 1, optimizer: bool = False, run: str = "") -> float:
        """`run`: the measurement run (msched.estimate.cost_fit.FitRow.run) the type's machine belongs to,
        for its host factor when the type itself was never measured."""
        t, pclass = terms(profile, spec, precision, batch_size, num_gpus, optimizer)
        eff = {k: self.efficiency(spec.generation, pclass[k]) for k in COMPUTE_KINDS}
        n = max(1, int(num_gpus))
        host = self.type_host.get(spec.gpu_type, self.run_host.get(run, self.default_host)) \
            * self.file_host.get(f"{spec.gpu_type}:{n}:{precision}", 1.0)
        gpuf = self.run_gpu.get(self.type_run.get(spec.gpu_type) or run or self.default_run, 1.0)
        link = self.type_link.get(f"{spec.gpu_type}:{n}", self.default_link.get(n, 1.0))
        return float(combine(t, self.shared, eff, self.bandwidth_efficiency(spec.generation), host, link,
                             gpuf=gpuf, callf=self.gen_call.get(spec.generation, self.default_call)))


def _geomean(values: list[float]) -> float:
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 1.0


def _geomean_rows(gen_eff: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    classes = {c for row in gen_eff.values() for c in row}
    return {c: _geomean([row[c] for row in gen_eff.values() if c in row]) for c in classes}


_LOADED: dict[str, CostModel] = {}


def load_cost_model(path: str = SHIPPED_PARAMS) -> CostModel:
    """The shipped (or a site's refitted) parameters, read once per process."""
    model = _LOADED.get(path)
    if model is None:
        model = _LOADED[path] = CostModel.load(path)
    return model
