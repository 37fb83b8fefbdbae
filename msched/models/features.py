"""The feature vector the similarity measure compares, computed from a profile (pure Python).

Why these features: how a training step's time moves across GPU architectures depends on how much
work it does (FLOPs), how that work is shaped (large dense convolutions and matrix products that
tensor cores speed up, versus depthwise/grouped convolutions, normalisations and element-wise ops that
are bound by memory bandwidth and kernel launches), and how many kernels it launches per step
(normalisations, residual adds, concatenations, gating). Every feature is a logarithm, so a model twice as large is
one step away whatever its size, and standardising over the references (`Standardisation`) then
weighs the features evenly. The model's name is never a feature.
"""

from __future__ import annotations

import math
from _collections_abc import Mapping  # collections.abc's own class, without the collections package

from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Sequence

# Layer kinds as the profiler names them, grouped by how they use a GPU.
_DENSE = ("conv_spatial", "conv_pointwise", "linear")
_NORMS = ("batchnorm", "layernorm")
_ACT_CHEAP = ("act_relu", "act_relu6")

FEATURE_NAMES: tuple[str, ...] = (
    "log_flops",                # work per sample
    "log_params",               # weights read per step
    "log_activation_bytes",     # memory traffic per sample
    "log_flops_per_act_byte",   # arithmetic intensity: compute- or memory-bound
    "log_flops_per_param",      # weight reuse
    "log_flops_per_layer",      # work per kernel launch: does one layer fill a large GPU?
    "log_share_conv_spatial",   # share of FLOPs in k x k dense convolutions
    "log_share_conv_pointwise",  # ... in 1 x 1 convolutions
    "log_share_conv_grouped",   # ... in depthwise / grouped convolutions
    "log_share_linear",         # ... in fully connected layers
    "log_share_other",          # ... elsewhere (attention products)
    "log_norms",                # normalisation layers
    "log_nonrelu_acts",         # costlier activations (SiLU, GELU, hard-swish, sigmoid)
    "log_residual_adds",        # residual structure
    "log_concats",              # concatenation structure (DenseNet, Inception, ShuffleNet)
    "log_gating",               # squeeze-excitation / gating products
    "log_attention",            # attention blocks
)

_SHARE_FLOOR = 0.01   # added to each FLOP share before log(): shares below ~1% count as absent


def _get(profile: object, key: str, default: object = None) -> object:
    if isinstance(profile, Mapping):
        return profile.get(key, default)
    return getattr(profile, key, default)


def feature_dict(profile: object) -> dict[str, float]:
    """Named features of one profile (a `Profile` or its dict form)."""
    flops = max(float(_get(profile, "flops", 0.0)), 1.0)
    params = max(float(_get(profile, "params", 0)), 1.0)
    act = max(float(_get(profile, "activation_bytes", 0)), 1.0)
    counts: Mapping[str, int] = _get(profile, "counts", {}) or {}
    by_kind: Mapping[str, float] = _get(profile, "flops_by_kind", {}) or {}
    ops: Mapping[str, int] = _get(profile, "ops", {}) or {}
    conv_other = by_kind.get("conv_other", 0.0)

    def share(*kinds: str) -> float:
        return math.log(sum(by_kind.get(k, 0.0) for k in kinds) / flops + _SHARE_FLOOR)

    return {
        "log_flops": math.log(flops),
        "log_params": math.log(params),
        "log_activation_bytes": math.log(act),
        "log_flops_per_act_byte": math.log(flops / act),
        "log_flops_per_param": math.log(flops / params),
        "log_flops_per_layer": math.log(flops / max(int(_get(profile, "depth", 1) or 1), 1)),
        "log_share_conv_spatial": share("conv_spatial") if not conv_other else share("conv_spatial", "conv_other"),
        "log_share_conv_pointwise": share("conv_pointwise"),
        "log_share_conv_grouped": share("conv_grouped"),
        "log_share_linear": share("linear"),
        "log_share_other": share("other"),
        "log_norms": math.log1p(sum(counts.get(k, 0) for k in _NORMS)),
        "log_nonrelu_acts": math.log1p(sum(v for k, v in counts.items()
                                           if k.startswith("act_") and k not in _ACT_CHEAP)),
        "log_residual_adds": math.log1p(ops.get("residual_add", 0)),
        "log_concats": math.log1p(ops.get("concat", 0)),
        "log_gating": math.log1p(ops.get("gating_mul", 0) + counts.get("squeeze_excitation", 0)),
        "log_attention": math.log1p(counts.get("attention", 0)),
    }


def feature_vector(profile: object, names: Sequence[str] = FEATURE_NAMES) -> list[float]:
    """The features of one profile, in `names` order."""
    d = feature_dict(profile)
    return [d[n] for n in names]


@record
class Standardisation:
    """Per-feature mean and scale over a reference set: z = (x - mean) / scale.

    Fitted with scikit-learn's StandardScaler (`fit`), stored as plain lists so that applying it
    (`apply`) needs no numpy: msub applies the shipped one on every submission.
    """

    names: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]

    def apply(self, vector: Sequence[float]) -> list[float]:
        return [(x - m) / s for x, m, s in zip(vector, self.mean, self.scale, strict=True)]

    def to_dict(self) -> dict[str, list]:
        return {"names": list(self.names), "mean": list(self.mean), "scale": list(self.scale)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence]) -> Standardisation:
        return cls(tuple(data["names"]), tuple(float(x) for x in data["mean"]),
                   tuple(float(x) for x in data["scale"]))

    @classmethod
    def fit(cls, vectors: Sequence[Sequence[float]], names: Sequence[str] = FEATURE_NAMES) -> Standardisation:
        """Fit on the references' feature vectors (scikit-learn; a constant feature gets scale 1)."""
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit([list(v) for v in vectors])
        return cls(tuple(names), tuple(float(x) for x in scaler.mean_), tuple(float(x) for x in scaler.scale_))
