"""Runtime prediction: the GPU spec table, the per-layer cost model and its fit, the predictor's three
sources, the memory check and `msched estimate` (issue: predict any model on any GPU type)."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys

import pytest

from msched.estimate.cost_fit import FitRow, fit
from msched.estimate.cost_model import CostModel, load_cost_model
from msched.estimate.estimators import TagEstimator
from msched.estimate.gpu_specs import GpuSpecError, load_specs, read_specs
from msched.estimate.memory import fits, peak_memory_gb
from msched.estimate.perf_table import PerfTable
from msched.estimate.predictor import CORRECTED, COST_MODEL, MEASURED, PredictorTimes, predict
from msched.models.shipped import load_table, profile_data
from msched.tag import JobTag

MEASURED_TABLE = os.path.join(os.path.dirname(__file__), "..", "msched", "data", "measured_perf.csv")
ISSUE_TYPES = ("k80", "p100_pcie", "p100_sxm2", "v100_pcie", "v100_sxm2_16gb", "t4", "a10", "a100_pcie_40gb",
               "a100_sxm4_40gb", "a100_pcie_80gb", "a100_sxm4_80gb", "l4", "l40s", "h100_sxm", "h100_pcie",
               "h200_sxm", "rtx2080ti", "rtx3090", "rtx4090", "titanxp", "titanv", "titanrtx", "gtx1080ti",
               "quadro_rtx8000", "rtx_a6000", "rtx6000_ada")


@pytest.fixture(scope="module")
def perf() -> PerfTable:
    return PerfTable.load(MEASURED_TABLE)


@pytest.fixture(scope="module")
def profiles() -> dict:
    return load_table()["models"]


# --------------------------------------------------------------------------- spec table
def test_spec_table_has_every_issue_type_with_a_public_source():
    specs = load_specs()
    for t in ISSUE_TYPES:
        s = specs.require(t)
        assert s.source.startswith("https://"), t
        assert s.fp32_tflops > 0 and s.memory_gb > 0 and s.memory_bw_gbs > 0 and s.sm_count > 0, t
        assert s.generation and s.interconnect and s.interconnect_gbs > 0, t
    # SXM and PCIe variants are separate rows that differ where the datasheets differ
    assert specs.require("h100_sxm").memory_bw_gbs > specs.require("h100_pcie").memory_bw_gbs
    assert specs.require("a100_sxm4_40gb").interconnect.startswith("nvlink")
    assert specs.require("a100_pcie_40gb").interconnect.startswith("pcie")
    # the measured tables' names resolve to their rows
    assert specs.canonical("a100") == "a100_pcie_40gb"
    assert specs.canonical("V100") == "v100_sxm2_16gb"
    assert specs.get("no-such-gpu") is None
    with pytest.raises(GpuSpecError, match="known:"):
        specs.require("no-such-gpu")


# FP32 lanes per SM of each chip family (NVIDIA's architecture whitepapers), by compute capability
FP32_LANES_PER_SM = {3.7: 192, 6.0: 64, 6.1: 128, 7.0: 64, 7.5: 64, 8.0: 64, 8.6: 128, 8.9: 128, 9.0: 128}
# FP64:FP32 rates: the HPC chips (GK210, GP100, GV100, GA100, GH100) 1/3 or 1/2; the others 1/32 or 1/64
HPC_CHIPS = {3.7, 6.0, 7.0, 8.0, 9.0}


def test_spec_rows_agree_with_their_chips_lanes_and_clock():
    """Every shipped row's peak is its SMs x clock x the chip family's lanes (2 FLOPs per FMA), within 2%:
    a typo in a throughput, SM count or clock shows here (predict12 checked the measured types' rows this way:
    V100 SXM2 16 GB 15.7 TFLOPS = 80 SMs x 1530 MHz x 128, TITAN V 14.9 = 80 x 1455 x 128)."""
    specs = load_specs()
    for name in specs.names():
        s = specs.require(name)
        per_sm_clock = s.sm_count * s.boost_clock_mhz * 1e6 / 1e12
        lanes = FP32_LANES_PER_SM[s.compute_capability]
        assert s.fp32_tflops == pytest.approx(2 * lanes * per_sm_clock, rel=0.02), name
        ratio = s.fp32_tflops / s.fp64_tflops
        allowed = (2, 3) if s.compute_capability in HPC_CHIPS else (32, 64)
        assert any(ratio == pytest.approx(r, rel=0.03) for r in allowed), (name, ratio)


def test_site_spec_rows_and_slurm_aliases(tmp_path):
    extra = tmp_path / "site.csv"
    extra.write_text("gpu_type,aliases,name,generation,fp32_tflops,fp16_tflops,memory_gb,memory_bw_gbs,sm_count\n"
                     "b200,blackwell-b200,B200,blackwell,80,2250,192,8000,148\n"
                     "a10,,A10 (site's own figures),ampere,30,120,24,600,72\n")
    specs = load_specs(str(extra), {"nvidia_b200": "b200"})
    assert specs.require("nvidia_b200").memory_gb == 192
    assert specs.require("a10").fp32_tflops == 30          # the site's row replaces the shipped one
    assert specs.require("h100_sxm").memory_gb == 80       # shipped rows stay


def test_bad_spec_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu_type,fp32_tflops,memory_gb,memory_bw_gbs\nx,fast,12,300\n")
    with pytest.raises(GpuSpecError, match=r"bad.csv:2: fp32_tflops = 'fast' is not a number"):
        read_specs(str(bad))
    with pytest.raises(GpuSpecError, match="missing column"):
        (tmp_path / "cols.csv").write_text("name\nx\n")
        read_specs(str(tmp_path / "cols.csv"))


# --------------------------------------------------------------------------- cost model
def test_shipped_parameters_reproduce_the_measured_table(perf, profiles):
    """In-sample check of the shipped fit on the 32 measured torchvision models (all types, GPU counts,
    precisions): a regression guard, the hold-out figures are bench_estimate's."""
    cost, specs = load_cost_model(), load_specs()
    errs = [abs(math.log(cost.iteration_ms(profiles[r.model], specs.get(r.gpu_type), r.precision, r.batch_size,
                                           r.num_gpus) / r.iter_ms)) for r in perf.rows]
    assert statistics.fmean(errs) < 0.15


def test_cost_model_follows_the_hardware(profiles):
    cost, specs = load_cost_model(), load_specs()
    r50 = profiles["resnet50"]

    def ms(t, prec="float", bs=32, n=1):
        return cost.iteration_ms(r50, specs.require(t), prec, bs, n)
    assert ms("h100_sxm") < ms("a100_sxm4_40gb") < ms("v100_sxm2_16gb") < ms("k80")
    assert ms("a100_sxm4_40gb", bs=64) > ms("a100_sxm4_40gb", bs=32)
    # tensor cores: half beats float on Volta+, not on Pascal's GP102 (FP16 math at 1/64 rate)
    assert ms("v100_sxm2_16gb", "half") < 0.9 * ms("v100_sxm2_16gb")
    assert ms("gtx1080ti", "half") > 0.9 * ms("gtx1080ti")
    assert ms("a100_sxm4_40gb", n=4) > ms("a100_sxm4_40gb", n=1)


def test_link_factor_scales_the_all_reduce_and_the_host_factor_the_replication(profiles):
    """A measured machine's link factor is its interconnect's: it scales the bytes all-reduced across its GPUs
    and nothing else; replicating the modules and the per-GPU fixed cost (nn.DataParallel's host-side work)
    follow its host factor. VGG-16 (138 M parameters, few modules) is all-reduce-bound, SqueezeNet (1.2 M) is
    replication-bound: a faster interconnect helps the first a lot and the second hardly at all."""
    from msched.estimate.cost_model import terms

    base, specs = load_cost_model(), load_specs()
    spec = specs.require("a100_pcie_40gb")

    def extra(model, *, host=1.0, link=1.0):   # ms the 4th GPU's share of data parallelism adds over 1 GPU
        data = dict(base.data, type_host={spec.gpu_type: host}, type_link={f"{spec.gpu_type}:4": link})
        cm = CostModel(data)
        return (cm.iteration_ms(profiles[model], spec, "float", 12, 4)
                - cm.iteration_ms(profiles[model], spec, "float", 12, 1))

    t_vgg, _ = terms(profiles["vgg16"], spec, "float", 12, 4)
    all_reduce = base.shared["dp_bytes"] * t_vgg["P"]
    assert all_reduce > 0
    # the link factor moves exactly the all-reduce part (the rest of the multi-GPU term is untouched)
    assert extra("vgg16", link=1.0) - extra("vgg16", link=0.1) == pytest.approx(0.9 * all_reduce, rel=1e-6)
    t_sq, _ = terms(profiles["squeezenet1_0"], spec, "float", 12, 4)
    sq_reduce = base.shared["dp_bytes"] * t_sq["P"]
    assert extra("squeezenet1_0", link=1.0) - extra("squeezenet1_0", link=0.1) == pytest.approx(0.9 * sq_reduce,
                                                                                              rel=1e-6)
    assert sq_reduce < 0.02 * all_reduce
    # a slower host makes the replication slower whatever the interconnect
    replication = base.shared["dp_module"] * t_sq["R"] + base.shared["dp_fixed"] * t_sq["N"]
    assert replication > 0
    assert extra("squeezenet1_0", host=2.0, link=0.0) > extra("squeezenet1_0", host=1.0, link=0.0) + 0.9 * replication


def test_file_host_factor_is_fitted_per_measurement_file(profiles):
    """A machine's host speed in one measurement file (type, GPU count, precision) differs from its other
    files' (predict10: the RTX 2080 Ti float file's host-bound rows +0.10 in log, its half file's -0.09): rows
    made with one file 1.4x slower on the host give that file, and no other, a host factor ~1.4x its
    sibling file's, and an unseen host-bound model is then predicted right in both files."""
    base, specs = load_cost_model(), load_specs()
    truth = CostModel(dict(base.data, file_host={"rtx2080ti:1:float": 1.4}))
    rtx = specs.require("rtx2080ti")
    # the factor is the file's alone: the same type's half file is untouched, the float file's host part scaled
    neutral = CostModel(dict(base.data, file_host={}))
    assert truth.iteration_ms(profiles["shufflenet_v2_x1_0"], rtx, "half") == pytest.approx(
        neutral.iteration_ms(profiles["shufflenet_v2_x1_0"], rtx, "half"))
    assert truth.iteration_ms(profiles["shufflenet_v2_x1_0"], rtx, "float") > 1.2 * neutral.iteration_ms(
        profiles["shufflenet_v2_x1_0"], rtx, "float")
    models = ["resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_0", "mnasnet1_0",
              "mnasnet0_5"]
    rows = [FitRow(m, t, 1, 12, p, truth.iteration_ms(profiles[m], specs.get(t), p, 12, 1))
            for m in models for t in ("rtx2080ti", "a100") for p in ("float", "half")]
    params = fit(rows, profiles, specs)
    ratio = params["file_host"]["rtx2080ti:1:float"] / params["file_host"]["rtx2080ti:1:half"]
    assert ratio == pytest.approx(1.4, rel=0.15)
    assert params["file_host"]["a100_pcie_40gb:1:float"] == pytest.approx(
        params["file_host"]["a100_pcie_40gb:1:half"], rel=0.1)
    fitted = CostModel(params)
    flat = CostModel(fit(rows, profiles, specs, file_host_weight=0.0))   # one host factor per type
    assert flat.file_host == {}

    def err(model, p):
        return abs(math.log(model.iteration_ms(profiles["shufflenet_v2_x1_0"], rtx, p)
                            / truth.iteration_ms(profiles["shufflenet_v2_x1_0"], rtx, p)))
    # measured: float 0.14 against 0.30, half 0.00 against 0.03
    assert err(fitted, "float") < 0.6 * err(flat, "float")
    assert err(fitted, "half") <= err(flat, "half") + 0.01


def test_generation_call_factor_is_fitted_and_scales_the_per_layer_gpu_cost(profiles):
    """predict11: a generation's per-layer GPU-side cost can differ from another's (a small kernel's floor),
    so a launch-bound model's best type is not only its host's. Rows made with Ampere's per-layer GPU cost
    1.8x Turing's: the fit with `gen_call` finds a factor ~1.8x on Ampere, and an unseen launch-bound model
    (ShuffleNet) is predicted closer on Ampere than by the fit without it; without the flag nothing changes."""
    base, specs = load_cost_model(), load_specs()
    a100, rtx = specs.require("a100"), specs.require("rtx2080ti")
    neutral = CostModel(dict(base.data, gen_call={}, default_call=1.0))
    truth = CostModel(dict(base.data, gen_call={"ampere": 1.8, "turing": 1.0}, default_call=1.0))
    shuffle = profiles["shufflenet_v2_x1_0"]
    # the factor scales the GPU side's per-layer cost alone: Turing unchanged, Ampere's launch-bound time up
    assert truth.iteration_ms(shuffle, rtx) == pytest.approx(neutral.iteration_ms(shuffle, rtx))
    assert truth.iteration_ms(shuffle, a100) > 1.02 * neutral.iteration_ms(shuffle, a100)
    models = ["resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_0", "mnasnet1_0",
              "mnasnet0_5"]
    rows = [FitRow(m, t, 1, 12, p, truth.iteration_ms(profiles[m], specs.get(t), p, 12, 1))
            for m in models for t in ("rtx2080ti", "a100") for p in ("float", "half")]
    with_call = fit(rows, profiles, specs, gen_call=True)
    assert with_call["gen_call"]["ampere"] / with_call["gen_call"]["turing"] == pytest.approx(1.8, rel=0.25)
    without = fit(rows, profiles, specs, gen_call=False)
    assert "gen_call" not in without and CostModel(without).gen_call == {}

    def err(params, p):
        return abs(math.log(CostModel(params).iteration_ms(shuffle, a100, p) / truth.iteration_ms(shuffle, a100, p)))
    assert err(with_call, "float") < err(without, "float")
    assert err(with_call, "float") < 0.05


def test_fitted_overlap_exponent_is_used_by_the_prediction(profiles):
    """`q_overlap` (fitted with FIT_OVERLAP) sets how much of the GPU time a host-bound iteration still
    waits for: a lower exponent adds more of it (at 1 the two would add), and the shipped files without
    it keep SMOOTH_Q."""
    base, specs = load_cost_model(), load_specs()
    rtx = specs.require("rtx2080ti")
    shuffle = profiles["shufflenet_v2_x1_0"]
    plain = base.iteration_ms(shuffle, rtx)
    q4 = CostModel(dict(base.data, shared=dict(base.shared, q_overlap=4.0))).iteration_ms(shuffle, rtx)
    q2 = CostModel(dict(base.data, shared=dict(base.shared, q_overlap=2.0))).iteration_ms(shuffle, rtx)
    assert ("q_overlap" in base.shared) or q4 == pytest.approx(plain)
    assert q2 > 1.03 * q4


def test_a_synchronous_loop_adds_host_and_gpu_time():
    """A profile with `sync_steps` (the host waits for the GPU every step: an RL rollout) is predicted at the
    GPU's time plus the host's, not their smooth maximum. A profile of 100 element-wise calls and nothing
    else, with a per-call GPU cost of 1 ms x GHz and a host cost of 0.5 ms per call: 100 / clock + 50 ms."""
    shared = {f"e_{k}": 1.0 for k in ("conv_pointwise", "conv_spatial", "conv_grouped", "conv_other", "linear",
                                      "other")}
    shared |= {f"a_{k}": 1.0 for k in ("conv_pointwise", "conv_spatial", "conv_grouped", "conv_other", "linear",
                                       "other", "norm", "act", "pool", "w")}
    shared |= {"c_gpu": 1.0, "c_host": 0.5, "phi": 0.0, "h_replica": 0.0, "dp_bytes": 0.0, "dp_module": 0.0,
               "dp_fixed": 0.0, "c_step": 0.0, "c_in": 0.0}
    cm = CostModel({"shared": shared, "gen_eff": {}, "gen_bw": {}, "default_eff": {}, "default_bw": 1.0})
    calls = {"params": 0, "calls_by_kind": {"act_relu": 100}, "bytes_by_kind": {}, "flops_by_kind": {}}
    spec = load_specs().require("v100_sxm2_16gb")
    gpu, host = 100 / (spec.boost_clock_mhz / 1000.0), 50.0
    assert cm.iteration_ms(dict(calls, sync_steps=20), spec, "float", 1) == pytest.approx(gpu + host, rel=1e-6)
    overlapped = cm.iteration_ms(calls, spec, "float", 1)
    assert overlapped == pytest.approx((gpu ** 4 + host ** 4) ** 0.25, rel=1e-6)
    assert max(gpu, host) < overlapped < gpu + host


def _unit_shared() -> dict:
    """Shared parameters at 1 (efficiencies, traffic multipliers), every fixed and multi-GPU cost at 0."""
    kinds = ("conv_pointwise", "conv_spatial", "conv_grouped", "conv_other", "linear", "other")
    shared = {f"e_{k}": 1.0 for k in kinds} | {f"a_{k}": 1.0 for k in (*kinds, "norm", "act", "pool", "w")}
    return shared | {"c_gpu": 0.0, "c_host": 0.0, "phi": 0.0, "h_replica": 0.0, "dp_bytes": 0.0, "dp_module": 0.0,
                     "dp_fixed": 0.0, "c_step": 0.0, "c_in": 0.0}


def test_fp64_ceiling_is_a_third_side_of_the_roofline():
    """predict15 (cost_fit.FP64_CEILING, off in the shipped file): with `i_fp64` a double row's compute is the
    smooth maximum of FP64-peak time and FLOPs over `i_fp64` x the spec sheet's bandwidth. One linear kind of
    1 GFLOP per sample, no bytes, batch 10 on TITAN V (7.45 TFLOPS FP64, 652.8 GB/s), i_fp64 = 2: 30 GFLOP at
    7.45 TFLOPS = 4.027 ms, over 1,305.6 GFLOP/s = 22.98 ms. Float rows and files without `i_fp64` unchanged."""
    profile = {"params": 0, "flops_by_kind": {"linear": 1e9}, "bytes_by_kind": {}, "calls_by_kind": {}}
    titanv = load_specs().require("titanv")
    data = {"shared": _unit_shared(), "gen_eff": {"volta": {"fp64": 1.0, "fp32": 1.0}}, "gen_bw": {"volta": 1.0}}
    plain = CostModel(data)
    capped = CostModel(dict(data, shared=dict(data["shared"], i_fp64=2.0)))
    peak_ms, ceiling_ms = 30e9 / 7.45e9, 30e9 / (2.0 * 652.8e6)
    assert plain.iteration_ms(profile, titanv, "double", 10) == pytest.approx(peak_ms, rel=1e-6)
    assert capped.iteration_ms(profile, titanv, "double", 10) == pytest.approx(
        (peak_ms ** 4 + ceiling_ms ** 4) ** 0.25, rel=1e-6)
    assert capped.iteration_ms(profile, titanv, "float", 10) == pytest.approx(plain.iteration_ms(profile, titanv, "float", 10),
                                                                              rel=1e-6)


def test_fp64_ceiling_is_fitted_only_when_asked(profiles):
    """Double rows made with a ceiling of 1.5 FLOPs per byte on the two half-rate parts (A100, TITAN V) and the
    shipped parameters otherwise: the fit with `fp64_ceiling` finds it within 25%; the plain fit has no
    `i_fp64` (the shipped model's arithmetic)."""
    base, specs = load_cost_model(), load_specs()
    truth = CostModel(dict(base.data, shared=dict(base.shared, i_fp64=1.5)))
    models = ["resnet18", "resnet50", "densenet121", "vgg16", "squeezenet1_0", "mobilenet_v2"]
    rows = [FitRow(m, t, 1, 12, p, truth.iteration_ms(profiles[m], specs.get(t), p, 12, 1))
            for m in models for t in ("a100", "titanv", "titanxp") for p in ("float", "double")]
    with_ceiling = fit(rows, profiles, specs, fp64_ceiling=True)
    assert with_ceiling["shared"]["i_fp64"] == pytest.approx(1.5, rel=0.25)
    assert "i_fp64" not in fit(rows, profiles, specs, fp64_ceiling=False)["shared"]


def test_fit_recovers_known_parameters(profiles):
    """Rows made by a known parameter set (the shipped one) on a subset: the fit from a neutral start
    reproduces them closely on models it did not see."""
    truth, specs = load_cost_model(), load_specs()
    models = ["resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_0", "mnasnet1_0",
              "shufflenet_v2_x1_0"]
    types = ["titanxp", "rtx2080ti", "a100"]
    rows = [FitRow(m, t, 1, 12, "float", truth.iteration_ms(profiles[m], specs.get(t), "float", 12, 1))
            for m in models for t in types]
    fitted = CostModel(fit(rows, profiles, specs))
    unseen = ["resnet101", "densenet169", "vgg11"]
    errs = [abs(math.log(fitted.iteration_ms(profiles[m], specs.get(t), "float", 12, 1)
                         / truth.iteration_ms(profiles[m], specs.get(t), "float", 12, 1))) for m in unseen for t in types]
    assert statistics.fmean(errs) < 0.1


def _lstm_profile(steps: int) -> dict:
    """A language model's profile (embedding, LSTM, decoder over a 10k vocabulary) with `steps` recurrent
    time steps per forward pass."""
    return {"params": 5_000_000, "flops": 2.0e8, "flops_by_kind": {"linear": 1.6e8, "other": 4.0e7},
            "calls_by_kind": {"embedding": 1, "recurrent": 1, "linear": 1, "dropout": 2},
            "bytes_by_kind": {"embedding": 28_000, "recurrent": 28_000, "linear": 1_400_000, "dropout": 56_000},
            "params_by_kind": {"embedding": 2_000_000, "recurrent": 1_000_000, "linear": 2_000_000},
            "recurrent_steps": steps}


def test_recurrent_steps_cost_and_the_fit_finds_it(profiles):
    """The per-step cost: `c_step / clock` per recurrent time step on the GPU side, nothing for a model
    without recurrent layers; rows made with a known c_step (recurrent models of 35 to 140 steps beside
    the CNNs) give it back."""
    shipped, specs = load_cost_model(), load_specs()
    truth = CostModel({**shipped.data, "shared": {**shipped.shared, "c_step": 0.2}})
    a100 = specs.get("a100")
    assert truth.iteration_ms(_lstm_profile(140), a100, "float", 12, 1) > truth.iteration_ms(_lstm_profile(70), a100,
                                                                                             "float", 12, 1)
    assert truth.iteration_ms(profiles["resnet50"], a100, "float", 12, 1) == pytest.approx(
        CostModel({**truth.data, "shared": {**truth.shared, "c_step": 5.0}}).iteration_ms(profiles["resnet50"], a100,
                                                                                         "float", 12, 1))
    lms = {f"lm{s}": _lstm_profile(s) for s in (35, 70, 140)}
    both = {**profiles, **lms}
    models = ["resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_0", *lms]
    rows = [FitRow(m, t, 1, b, "float", truth.iteration_ms(both[m], specs.get(t), "float", b, 1))
            for m in models for t in ("titanxp", "rtx2080ti", "a100") for b in (12, 48)]
    assert fit(rows, both, specs)["shared"]["c_step"] == pytest.approx(0.2, rel=0.25)


def _autoencoder_profile(items: int) -> dict:
    """A recommender's profile (an autoencoder over `items`, 200 hidden units): one sample's input is a
    dense vector of `items` floats."""
    return {"params": 2 * items * 200, "flops": 4.0 * items * 200,
            "flops_by_kind": {"linear": 4.0 * items * 200},
            "calls_by_kind": {"dropout": 1, "linear": 2, "act_tanh": 1},
            "bytes_by_kind": {"dropout": 4 * items, "linear": 4 * (items + 200), "act_tanh": 800},
            "params_by_kind": {"linear": 2 * items * 200}, "input_shape": (items,)}


def test_input_cost_is_host_side_and_the_fit_finds_it(profiles):
    """The input term: a whole training loop (optimizer=True) builds and copies each batch on the host at
    `c_in` ms per MB. A recommender with 20,108-item inputs at batch 4,096 (330 MB a step) is host-bound:
    its time barely moves from V100 to H100 and doubles with the batch; the torchvision benchmark's rows
    (input already on the GPU) have no such cost. Rows made with a known c_in give back its predictions."""
    shipped, specs = load_cost_model(), load_specs()
    # every machine at one host speed and software stack: the GPU alone differs
    truth = CostModel({**shipped.data, "shared": {**shipped.shared, "c_in": 0.5}, "type_host": {}, "run_host": {},
                       "default_host": 1.0, "run_gpu": {}, "type_run": {}})
    rec = _autoencoder_profile(20_108)
    v100, h100 = specs.get("v100_sxm2_16gb"), specs.get("h100_sxm")

    def ms(spec, b, opt=True, model=truth):
        return model.iteration_ms(rec, spec, "float", b, 1, optimizer=opt)
    assert ms(v100, 4096) / ms(h100, 4096) < 1.1
    assert ms(v100, 8192) / ms(v100, 4096) == pytest.approx(2.0, rel=0.1)
    no_input = CostModel({**truth.data, "shared": {**truth.shared, "c_in": 0.0}})
    assert ms(v100, 4096, opt=False) == pytest.approx(ms(v100, 4096, opt=False, model=no_input))
    assert ms(v100, 4096) > 2 * ms(v100, 4096, model=no_input)
    recs = {f"rec{n}": _autoencoder_profile(n) for n in (5_000, 20_000)}
    both = {**profiles, **recs}
    rows = [FitRow(m, t, 1, b, "float", truth.iteration_ms(both[m], specs.get(t), "float", b, 1, optimizer=True),
                   optimizer=True)
            for m in ("resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", *recs)
            for t in ("titanxp", "rtx2080ti", "a100") for b in (16, 64, 1024)]
    fitted = CostModel(fit(rows, both, specs))
    # only c_in x each machine's host factor is identified (the host factors take the scale): the fitted
    # model's figure for a recommender it never saw, at a batch it never saw, is what c_in = 0.5 gives
    big = _autoencoder_profile(60_000)
    a100 = specs.get("a100")
    assert fitted.iteration_ms(big, a100, "float", 4096, 1, optimizer=True) == pytest.approx(
        truth.iteration_ms(big, a100, "float", 4096, 1, optimizer=True), rel=0.1)


def test_run_prior_leaves_a_run_factor_the_data_identify(profiles):
    """The pull of run factors toward 1 (cost_fit.RUN_PRIOR_WEIGHT) only settles what the rows leave open:
    where a run shares a generation with another (gtx1080ti beside titanxp, both Pascal), a run 1.3x slower
    on the GPU is still found 1.3x slower, as the titanv fix needs."""
    shipped, specs = load_cost_model(), load_specs()
    truth = CostModel({**shipped.data, "run_gpu": {}, "type_run": {}})
    models = ["resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_0"]
    rows = [FitRow(m, t, 1, 12, "float", truth.iteration_ms(profiles[m], specs.get(t), "float", 12, 1)
                   * (1.3 if t == "gtx1080ti" else 1.0), run="slow" if t == "gtx1080ti" else "main")
            for m in models for t in ("titanxp", "rtx2080ti", "a100", "gtx1080ti")]
    params = fit(rows, profiles, specs)
    assert params["run_gpu"]["slow"] / params["run_gpu"]["main"] == pytest.approx(1.3, rel=0.1)


def test_noisy_measurement_files_are_found_from_their_percentiles(tmp_path):
    """A measurement file whose timed iterations spread widely (p90/p10) is flagged; a quiet one is not."""
    from msched.estimate.training_data import NOISY_SPREAD, noisy_measurements

    folder = tmp_path / "gpu-train-benchmarks"
    folder.mkdir()
    lines = ["gpu_type,num_gpus,precision,model,global_batch_size,runs,iter_ms_median,iter_ms_p10,iter_ms_p90,raw_file"]
    wide = math.exp(NOISY_SPREAD) * 1.5
    for model in ("resnet50", "vgg16", "mobilenet_v2"):
        lines.append(f"titanxp,4,float,{model},48,50,200,100,{100 * wide},raw/titanxp_4gpu_float_train_ms.csv")
        lines.append(f"titanxp,3,float,{model},36,50,100,98,105,raw/titanxp_3gpu_float_train_ms.csv")
    (folder / "train_iter_ms.csv").write_text("\n".join(lines) + "\n")
    assert noisy_measurements(tmp_path) == {("titanxp", 4, "float")}
    assert noisy_measurements(tmp_path / "absent") == set()


def test_gpu_count_growth_pairs_each_model_across_the_two_files(tmp_path):
    """The n-1 and n GPU medians of one type, per precision and model (models in both files only)."""
    from msched.estimate.training_data import gpu_count_growth

    folder = tmp_path / "gpu-train-benchmarks"
    folder.mkdir()
    lines = ["gpu_type,num_gpus,precision,model,global_batch_size,runs,iter_ms_median,iter_ms_p10,iter_ms_p90,raw_file",
             "titanxp,3,float,resnet50,36,50,100,98,105,x", "titanxp,4,float,resnet50,48,50,230,100,300,x",
             "titanxp,3,half,resnet50,36,50,60,58,62,x", "titanxp,4,half,resnet50,48,50,66,64,70,x",
             "titanxp,4,float,vgg16,48,50,400,300,500,x",       # no 3-GPU row: left out
             "titanrtx,3,float,resnet50,36,50,90,88,92,x", "titanrtx,4,float,resnet50,48,50,99,97,101,x"]
    (folder / "train_iter_ms.csv").write_text("\n".join(lines) + "\n")
    assert gpu_count_growth(tmp_path, "titanxp", 4) == {"float": {"resnet50": (100.0, 230.0)},
                                                         "half": {"resnet50": (60.0, 66.0)}}
    assert gpu_count_growth(tmp_path / "absent", "titanxp", 4) == {}


# --------------------------------------------------------------------------- predictor
def test_predictor_says_where_each_figure_comes_from(perf, profiles):
    prof = profiles["resnet101"]
    # the model's own rows
    p = predict(prof, "a100", 1, 12, "float", model="resnet101", perf=perf)
    row = next(r for r in perf.rows if (r.model, r.gpu_type, r.num_gpus, r.precision) == ("resnet101", "a100", 1, "float"))
    assert p.source == MEASURED and p.iter_ms == pytest.approx(row.iter_ms)
    # not in the table: the nearest reference measured on the type corrects the cost model; a reference
    # predicted under another name is corrected back to exactly its own measurement
    refs_only = PerfTable(r for r in perf.rows if r.model == "resnet50")
    r50 = next(r for r in perf.rows if (r.model, r.gpu_type, r.num_gpus, r.precision) == ("resnet50", "titanrtx", 1, "float"))
    p = predict(profiles["resnet50"], "titanrtx", 1, 12, "float", model="my_resnet", perf=refs_only,
                references=["resnet50"], profiles=profiles, correction_weight=1.0)
    assert p.source == CORRECTED and p.reference == "resnet50"
    assert p.iter_ms == pytest.approx(r50.iter_ms)
    # half the log residual, no type shape from the reference: the geometric mean of the cost model and
    # the measurement
    p = predict(profiles["resnet50"], "titanrtx", 1, 12, "float", model="my_resnet", perf=refs_only,
                references=["resnet50"], profiles=profiles, rank_weight=0.0)
    assert p.iter_ms == pytest.approx(math.sqrt(p.cost_model_ms * r50.iter_ms))
    # type-shape weight 0.75: 3/4 of the type shape from the reference (its measurement scaled by the cost
    # model's job/reference ratio over its types: 1 for the same network): 1/4 of cost^0.5 x measured^0.5
    # and 3/4 of the measurement, i.e. cost^0.125 x measured^0.875
    p = predict(profiles["resnet50"], "titanrtx", 1, 12, "float", model="my_resnet", perf=refs_only,
                references=["resnet50"], profiles=profiles, rank_weight=0.75)
    assert p.iter_ms == pytest.approx(p.cost_model_ms ** 0.125 * r50.iter_ms ** 0.875)
    # the shipped weight (1): all of the type shape from the reference: the same network's own measurement
    p = predict(profiles["resnet50"], "titanrtx", 1, 12, "float", model="my_resnet", perf=refs_only,
                references=["resnet50"], profiles=profiles)
    assert p.iter_ms == pytest.approx(r50.iter_ms)
    # the type-shape part carrying 3/4 of the reference's residual (`shape_residual_weight`; the same network:
    # no shape of its own) is the cost model's level moved 3/4 of the way (in logs) to the measurement
    p = predict(profiles["resnet50"], "titanrtx", 1, 12, "float", model="my_resnet", perf=refs_only,
                references=["resnet50"], profiles=profiles, shape_residual_weight=0.75)
    assert p.iter_ms == pytest.approx(p.cost_model_ms ** 0.25 * r50.iter_ms ** 0.75)
    assert p.iter_ms != pytest.approx(r50.iter_ms)
    # several references (`shape_refs`): each corrects the cost model as above, averaged in logs, and the
    # figure names them all, most similar first
    two = PerfTable(r for r in perf.rows if r.model in ("resnet50", "resnet152"))
    one_each = [predict(profiles["resnet101"], "titanrtx", 1, 12, "float", model="my_resnet", perf=two,
                        references=[ref], profiles=profiles, shape_refs=1).iter_ms for ref in ("resnet50", "resnet152")]
    both = predict(profiles["resnet101"], "titanrtx", 1, 12, "float", model="my_resnet", perf=two,
                   references=["resnet152", "resnet50"], profiles=profiles, shape_refs=3)
    assert both.source == CORRECTED and both.reference == "resnet152+resnet50"
    assert both.iter_ms == pytest.approx(math.sqrt(one_each[0] * one_each[1]))
    assert predict(profiles["resnet101"], "titanrtx", 1, 12, "float", model="my_resnet", perf=two,
                   references=["resnet152", "resnet50"], profiles=profiles, shape_refs=1).reference == "resnet152"
    # a type nothing was measured on: the cost model alone; a type without spec or rows: unknown
    p = predict(prof, "h100_sxm", 1, 12, "float", model="resnet101", perf=perf, references=["resnet50"])
    assert p.source == COST_MODEL and p.reference == "" and p.iter_ms > 0
    assert predict(prof, "mystery-gpu", perf=perf) is None


def test_shape_cap_limits_how_far_a_reference_shape_moves_a_prediction(perf, profiles):
    """A small, memory-bound job (squeezenet1_1) beside a large, compute-bound reference (vgg16): the cost
    model's view of how the job differs from the reference on a type departs from its average over the
    reference's types (d below) by more than the cap, so the cap decides how much of the reference's
    measured shape is carried over."""
    cost = load_cost_model()
    specs = load_specs()
    ref_rows = PerfTable(r for r in perf.rows if r.model == "vgg16")
    job, ref, gpu, r_w, c_w = profiles["squeezenet1_1"], profiles["vgg16"], "a100", 0.75, 0.5
    row = ref_rows.nearest_row("vgg16", gpu, 1, 12, "float")
    mine = cost.iteration_ms(job, specs.get(gpu), "float", 12, 1)
    ref_ms = cost.iteration_ms(ref, specs.get(gpu), "float", row.batch_size, row.num_gpus)
    ratios = []
    for t in ref_rows.types_for("vgg16", "float"):
        r_t = ref_rows.nearest_row("vgg16", t, 1, 12, "float")
        ratios.append(math.log(cost.iteration_ms(job, specs.get(t), "float", 12, 1)
                               / cost.iteration_ms(ref, specs.get(t), "float", r_t.batch_size, r_t.num_gpus)))
    d = statistics.fmean(ratios) - math.log(mine / ref_ms)
    residual = math.log(row.iter_ms / ref_ms)
    assert abs(d) > 0.2   # the shapes differ more than the cap on this type

    def run(cap):
        return predict(job, gpu, 1, 12, "float", model="job", perf=ref_rows, references=["vgg16"],
                       profiles=profiles, rank_weight=r_w, correction_weight=c_w, shape_refs=1, shape_cap=cap).iter_ms

    def expected(shape):
        return math.exp(math.log(mine) + (1 - r_w) * c_w * residual + r_w * (residual + shape))

    # no cap: the reference's measurement scaled by the mean job/reference ratio (the uncapped blend)
    assert run(None) == pytest.approx(math.exp((1 - r_w) * (math.log(mine) + c_w * residual)
                                               + r_w * (math.log(row.iter_ms) + statistics.fmean(ratios))))
    assert run(None) == pytest.approx(expected(d))
    # cap 0: the residual alone; cap 0.2: the shape part moves the prediction by at most 0.75 x 0.2 in log
    assert run(0.0) == pytest.approx(expected(0.0))
    assert run(0.2) == pytest.approx(expected(math.copysign(0.2, d)))
    assert abs(math.log(run(0.2) / run(0.0))) == pytest.approx(r_w * 0.2)


def test_predictor_is_an_iteration_time_source_for_the_one_estimator(perf):
    """Behind TagEstimator (the interface msub, the round and the report use): an EfficientNet job,
    which has no measured row, gets a figure on every type, the spec-only ones included, each with its source."""
    times = PredictorTimes(perf, types=["h100_sxm", "l4"])
    est = TagEstimator(times)
    job = type("Job", (), {"num_gpus": 1, "time_limit_s": 86400.0, "gres_gpu_type": None})()
    out = est.estimates(job, JobTag(model="efficientnet_b3", ref="regnet_y_1_6gf", pref="resnext50_32x4d",
                                    pflops=0.43, iters=1000, bs=16))
    assert set(out) == set(perf.gpu_types()) | {"h100_sxm", "l4"}
    assert out["h100_sxm"].source.startswith("cost-model")
    assert out["a100"].source.startswith("reference-corrected by ")
    assert out["h100_sxm"].seconds < out["titanxp"].seconds


# --------------------------------------------------------------------------- memory
def test_memory_rules_out_a_card_the_step_does_not_fit():
    specs = load_specs()
    r50 = profile_data("resnet50")
    big = fits(r50, specs.require("gtx1080ti"), 256)
    assert not big.fits and big.peak_gb > big.usable_gb
    assert fits(r50, specs.require("a100_sxm4_80gb"), 256).fits
    assert fits(r50, specs.require("gtx1080ti"), 32).fits
    # half precision halves the activations, the optimizer's state adds to the weights
    assert peak_memory_gb(r50, 64, "half").activations_gb == pytest.approx(peak_memory_gb(r50, 64).activations_gb / 2)
    assert peak_memory_gb(r50, 64, optimizer="adam").weights_gb > peak_memory_gb(r50, 64).weights_gb


@pytest.mark.slow
def test_resnet50_peak_memory_against_torch_profiler():
    """One real training step of ResNet-50 at batch 32 on the CPU, its allocations recorded by
    torch.profiler's memory profiling: the predicted peak is within 25% of the recorded one."""
    code = r"""
import json, torch, torchvision
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
m = torchvision.models.resnet50()
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
x = torch.randn(32, 3, 224, 224); y = torch.randint(0, 1000, (32,))
base = sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers(), x])
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
cur = peak = 0
for e in sorted(prof.events(), key=lambda e: e.time_range.start):
    cur += e.self_cpu_memory_usage
    peak = max(peak, cur)
print(json.dumps({"peak_bytes": base + peak}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])["peak_bytes"] / 1e9
    predicted = peak_memory_gb(profile_data("resnet50"), 32).peak_gb
    assert abs(predicted / measured - 1) <= 0.25, (predicted, measured)


# --------------------------------------------------------------------------- msched estimate
def _msched(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msched.cli", *args], capture_output=True, text=True, timeout=400)


def test_estimate_command_json():
    proc = _msched("estimate", "resnet50", "--gpu-types", "a100,h100_sxm,gtx1080ti", "--batch-size", "256",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["gpu_type"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {"a100", "h100_sxm", "gtx1080ti"}
    for r in rows.values():
        assert {"gpu_type", "iter_ms", "source", "peak_memory_gb", "fits"} <= set(r)
    assert rows["a100"]["source"] == "measured" and rows["h100_sxm"]["source"] == "cost-model"
    assert rows["gtx1080ti"]["fits"] is False and rows["h100_sxm"]["fits"] is True


def test_estimate_command_errors_list_choices():
    proc = _msched("estimate", "resnet50", "--gpu-types", "a100,warp-drive")
    assert proc.returncode != 0 and "warp-drive" in proc.stderr and "h100_sxm" in proc.stderr
    proc = _msched("estimate", "resnet50", "--precision", "fp8")
    assert proc.returncode != 0 and "double" in proc.stderr
    proc = _msched("references", "evaluate", "--leave-out-type", "h100_sxm")
    assert proc.returncode != 0 and "titanxp" in proc.stderr



def test_a_type_the_step_does_not_fit_is_never_chosen(perf):
    """ResNet-50 at batch 192 per GPU needs ~18 GB: the 11-12 GB cards (gtx1080ti, rtx2080ti, titanxp,
    titanv) get no estimate, so neither msub's submit decision nor the planner can choose them."""
    from msched.policy.base import feasible_types
    from msched.policy.choice import ClusterView, SubmitJob, decide_submit
    from msched.policy.snapshot import PendingJob

    small = {"gtx1080ti", "rtx2080ti", "titanxp", "titanv"}
    est = TagEstimator(PredictorTimes(perf))
    tag = JobTag(model="resnet50", ref="resnet50", iters=1000, bs=192)
    sizes = {t: (4,) for t in perf.gpu_types()}
    now = 1000.0
    view = ClusterView(node_gpus=sizes, free_at=dict.fromkeys(sizes, now), fresh=True)
    decision = decide_submit(tag, SubmitJob(1, time_limit_s=10 * 86400.0), view, est, now=now)
    assert decision.types and not small & set(decision.types)
    assert set(decision.estimates) == set(perf.gpu_types()) - small
    # the planner keeps only estimated types; at batch 32 every type fits and is a candidate
    job = type("Job", (), {"num_gpus": 1, "time_limit_s": 10 * 86400.0, "gres_gpu_type": None})()
    big = est(job, tag)
    fitting = est(job, tag._replace(bs=32))
    assert small <= set(fitting) and not small & set(big)
    pending = PendingJob(job_id="1", submit_time=now, num_gpus=1, est_runtime_s=big)
    assert not small & set(feasible_types(pending, sorted(sizes)))


def test_msub_with_the_predictor_plans_a_type_measured_nowhere(tmp_path):
    """A site with `estimator = "predictor"` and an H100 partition (an alias onto its spec row): msub's
    submit decision, through the one estimator interface, allows an EfficientNet job (no measured row) the
    H100 the cost model rates fastest."""
    conf = tmp_path / "msched.toml"
    conf.write_text(f'state_dir = "{tmp_path}"\nestimator = "predictor"\n[gpu_aliases]\n"H100" = "h100_sxm"\n')
    code = ("import json; from msched.msub.main import build_submission; "
            "sub, w = build_submission(['--model=efficientnet_b3', '--iterations=500', '--gres=gpu:1', '--wrap', 'true']); "
            "print(json.dumps([sub.argv, w]))")
    env = {**os.environ, "MSCHED_CONFIG": str(conf), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("SLURM_CONF", None)       # the site is the config alone: no dev cluster's nodes (it has no H100)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    argv, warnings = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not warnings
    # h100_sxm is allowed (a type measured nowhere, planned from its spec row); a100, whose figure the
    # measured reference shapes, may be within the constraint slack beside it
    constraint = next(a for a in argv if a.startswith("--constraint="))
    assert "h100_sxm" in constraint.partition("=")[2].split("|")


def test_estimator_config_key_is_checked(tmp_path):
    from msched.config import ConfigError, load_config

    conf = tmp_path / "msched.toml"
    conf.write_text('estimator = "crystal-ball"\n')
    with pytest.raises(ConfigError, match="table, predictor"):
        load_config(conf)


@pytest.mark.slow
def test_references_evaluate_leave_out_type():
    """`msched references evaluate --leave-out-type rtx2080ti`: the type's 384 rows refitted away and
    predicted from its spec row (bench_estimate measured 0.138 with Gavel's rows in the fit too)."""
    proc = _msched("references", "evaluate", "--leave-out-type", "rtx2080ti", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["leave_out_type"]["rtx2080ti"]
    assert out["generation_sibling"] is True and out["spec_row"] == "rtx2080ti"
    assert out["time_error"] < 0.25
    assert set(out["by_precision"]) == {"float", "half", "double"} and set(out["by_num_gpus"]) == {"1", "2", "3", "4"}
