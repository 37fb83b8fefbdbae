"""Model profiler: build a classification model on PyTorch's meta device and describe its structure.

A profile is what the similarity measure compares (DESIGN, policy point 2): counts per layer type
(Conv2d split into pointwise, depthwise/grouped and spatial; Linear; norms; pooling; activations by
kind; dropout; attention), depth, parameters, forward FLOPs per sample at the input size, activation
bytes, and how the forward FLOPs split across those layer kinds. Building on the meta device costs no
weights and no RAM; constructors that compute with tensors (RegNet's width schedule) are built with
ordinary CPU tensors for their arithmetic while every parameter and buffer is moved to meta as it is
registered, so even the largest models cost no memory.

SPEC is a torchvision classification model name (`resnet50`) or `path/to/file.py:factory`, a callable
returning an `nn.Module`. A user's file is imported only in a subprocess (`python -m msched.models.profiler`)
with a timeout, so a hanging or crashing import cannot hang the caller; see `profile_spec`.

This module imports torch only inside the functions that build models: importing it is cheap, and the
shipped/cached path (`msched.models.profile_cache`) never needs torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from msched.errors import ProfileError
from msched.util.text import one_line

# 3: `recurrent_steps` (a profile cached before it would read as a model without recurrent layers); the
# version is part of every profile cache key (msched.models.profile_cache), so older entries are not read
PROFILE_VERSION = 3
DEFAULT_INPUT_SIZE = 224
DEFAULT_TIMEOUT_S = 60.0
# limits of the child that imports a user's file (resource.setrlimit, set by the child before the import):
# its address space (torch alone maps ~3.5 GB of it, ~0.9 GB resident) and its CPU seconds (all threads)
PROFILE_MEMORY_LIMIT_BYTES = 8 << 30
PROFILE_CPU_LIMIT_S = 2 * DEFAULT_TIMEOUT_S
BYTES_PER_ELEMENT = 4  # activations counted as float32, the precision jobs are planned at
LIBRARIES = ("torch", "torchvision", "msched")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed SPEC: either a torchvision name or a file and factory."""

    text: str
    name: str = ""          # torchvision model name
    path: str = ""          # absolute path of the user's file
    factory: str = ""

    @property
    def is_file(self) -> bool:
        return bool(self.path)


@dataclass(frozen=True)
class Profile:
    """One model's structure at one input size. Counts and FLOP shares are plain dicts (JSON-ready)."""

    spec: str
    input_size: int
    params: int
    flops: float                      # forward FLOPs per sample (a multiply-add = 2 FLOPs)
    activation_bytes: int             # bytes of all layer outputs per sample, float32
    depth: int                        # weighted layers (conv, linear, attention) executed in a forward pass
    counts: dict[str, int] = field(default_factory=dict)       # layer kind -> number of modules
    flops_by_kind: dict[str, float] = field(default_factory=dict)  # layer kind -> forward FLOPs per sample
    ops: dict[str, int] = field(default_factory=dict)          # graph structure seen while running: adds, cats...
    # per layer kind, for the cost model (msched.estimate.cost_model): forward calls (a module reused
    # in one pass counts each time), output bytes per sample (float32) and parameters
    calls_by_kind: dict[str, int] = field(default_factory=dict)
    bytes_by_kind: dict[str, int] = field(default_factory=dict)
    params_by_kind: dict[str, int] = field(default_factory=dict)
    input_shape: tuple[int, ...] = ()  # one sample's input when not a square image (a file's own input)
    # time steps run by recurrent layers in one forward pass (layers x sequence length x directions, a cell
    # once per call): cuDNN runs each step as its own small kernels, whatever the batch, so an LSTM's time
    # has a per-step part its FLOPs do not show (msched.estimate.cost_model's `c_step`)
    recurrent_steps: int = 0
    # host-GPU round trips in one iteration that nothing overlaps (`#MSCHED --sync-steps=N` in a model
    # file: a reinforcement-learning rollout samples each step's action on the host from the GPU's output
    # and steps its environment before the next forward pass); 0: the host's launches run ahead of the GPU
    # (msched.estimate.cost_model: above 0, the iteration is the GPU's time plus the host's, not their maximum)
    sync_steps: int = 0
    build: str = "meta"               # "meta" or "meta-params" (the fallback)
    seconds: float = 0.0              # time taken to build and count
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def conv2d(self) -> int:
        return sum(self.counts.get(k, 0) for k in ("conv_pointwise", "conv_grouped", "conv_spatial"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        known = set(cls.__dataclass_fields__)
        data = {k: v for k, v in data.items() if k in known}
        if "input_shape" in data:
            data["input_shape"] = tuple(int(d) for d in data["input_shape"] or ())
        return cls(**data)


# --------------------------------------------------------------------------- specs
def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a profile depends on, without importing them."""
    from importlib import metadata

    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = ""
    return out


def parse_spec(spec: str, known_names: list[str] | None = None) -> ModelSpec:
    """Split SPEC into a torchvision name or (file, factory); raise ProfileError when malformed."""
    text = (spec or "").strip()
    if not text:
        raise ProfileError("empty model spec; give a torchvision model name or path/to/file.py:factory")
    head, sep, tail = text.rpartition(":")
    if sep and head.endswith(".py"):
        if not tail.isidentifier():
            raise ProfileError(f"{text}: factory {tail!r} is not a Python name (expected path/to/file.py:factory)")
        return ModelSpec(text=text, path=str(Path(head).expanduser().resolve()), factory=tail)
    if text.endswith(".py") or "/" in text:
        raise ProfileError(f"{text}: a model file needs its factory, as path/to/file.py:factory")
    if known_names is not None and text not in known_names:
        raise unknown_name_error(text, known_names)
    return ModelSpec(text=text, name=text)


def unknown_name_error(name: str, known: list[str]) -> ProfileError:
    import difflib

    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"known names: {', '.join(sorted(known))}"
    return ProfileError(f"unknown model {name!r}: not a torchvision classification model nor "
                        f"path/to/file.py:factory; {hint}")


def torchvision_names() -> list[str]:
    from torchvision import models

    return sorted(models.list_models(module=models))


def default_input_size(name: str) -> int:
    """A torchvision model's own input size: the smallest size its published weights take (their metadata,
    no weights loaded); 224 where nothing is published."""
    from torchvision import models

    sizes = []
    try:
        for weights in models.get_model_weights(name):
            crop = getattr(weights.transforms, "keywords", {}).get("crop_size")
            if isinstance(crop, list | tuple):
                crop = crop[0]
            if crop:
                sizes.append(int(crop))
    except (ValueError, AttributeError):
        pass
    crop = min(sizes) if sizes else None
    return int(crop) if crop else DEFAULT_INPUT_SIZE


# --------------------------------------------------------------------------- building
@contextlib.contextmanager
def _parameters_on_meta():
    """Run a constructor on CPU while every parameter and buffer it registers lands on meta.

    The fallback for constructors that compute with tensors (and so fail under `torch.device("meta")`):
    their arithmetic runs on small CPU tensors, the weights never take memory, and weight
    initialisation then runs on meta tensors, which costs nothing.
    """
    import torch

    module_cls = torch.nn.Module
    orig_param, orig_buffer = module_cls.register_parameter, module_cls.register_buffer

    def register_parameter(self, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        return orig_param(self, name, param)

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is not None and tensor.device.type != "meta":
            tensor = tensor.to("meta")
        return orig_buffer(self, name, tensor, persistent=persistent)

    module_cls.register_parameter, module_cls.register_buffer = register_parameter, register_buffer
    try:
        yield
    finally:
        module_cls.register_parameter, module_cls.register_buffer = orig_param, orig_buffer


def _construct(factory):
    """Call `factory` on meta; on a tensor-computing constructor, use the meta-parameters fallback."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.device("meta"):
                return factory(), "meta"
        except (NotImplementedError, RuntimeError) as exc:
            if "meta" not in str(exc):
                raise
        with _parameters_on_meta():
            return factory(), "meta-params"


def build_torchvision(name: str):
    """(model, build mode) for a torchvision classification model, without weights."""
    from torchvision import models

    names = torchvision_names()
    if name not in names:
        raise unknown_name_error(name, names)
    return _construct(lambda: models.get_model(name, weights=None))


def load_factory(path: str, factory: str):
    """Import the user's file and return its factory callable; ProfileError on any failure."""
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"{path}: no such file")
    import hashlib
    import importlib.util

    mod_name = "msched_user_model_" + hashlib.sha1(str(p).encode()).hexdigest()[:12]
    sys.path.insert(0, str(p.parent))
    try:
        spec = importlib.util.spec_from_file_location(mod_name, p)
        if spec is None or spec.loader is None:
            raise ProfileError(f"{path}: not an importable Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
    except ProfileError:
        raise
    except BaseException as exc:  # the user's code may raise anything, SystemExit included
        raise ProfileError(f"{path} does not import: {type(exc).__name__}: {one_line(exc)}") from exc
    fn = getattr(module, factory, None)
    if fn is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ProfileError(f"{path} has no {factory!r}; callables there: {', '.join(public) or 'none'}")
    if not callable(fn):
        raise ProfileError(f"{path}:{factory} is not callable")
    return fn


def _directive(path: str, name: str) -> str | None:
    """The value of `#MSCHED --NAME=VALUE` in a model file, or None when the file has no such line."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        words = line.strip().split()
        if len(words) < 2 or words[0] != "#MSCHED":
            continue
        for w in words[1:]:
            key, _, value = w.partition("=")
            if key == name:
                return value
    return None


def input_shape_directive(path: str) -> tuple[int, ...] | None:
    """`#MSCHED --input-shape=3,32,32` (or `3x32x32`) in a model file: one sample's input shape, for a
    model that does not take a 3-channel square image. None when the file has no such line."""
    value = _directive(path, "--input-shape")
    if value is None:
        return None
    try:
        dims = tuple(int(d) for d in value.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ProfileError(f"{path}: #MSCHED --input-shape={value}: expected integers such as 3,32,32") from None
    if not dims or min(dims) < 1:
        raise ProfileError(f"{path}: #MSCHED --input-shape={value}: dimensions must be positive")
    return dims


def sync_steps_directive(path: str) -> int:
    """`#MSCHED --sync-steps=20` in a model file: host-GPU round trips per iteration that nothing overlaps
    (Profile.sync_steps); 0 when the file has no such line."""
    value = _directive(path, "--sync-steps")
    if value is None:
        return 0
    try:
        steps = int(value)
    except ValueError:
        raise ProfileError(f"{path}: #MSCHED --sync-steps={value}: expected a whole number such as 20") from None
    if steps < 0:
        raise ProfileError(f"{path}: #MSCHED --sync-steps={value}: must not be negative")
    return steps


def build_user(path: str, factory: str):
    """(model, build mode, example input or None). The factory returns an `nn.Module`, or a pair
    (module, example input) whose input's first dimension is the batch (a language model's token ids,
    a recommender's indices); `#MSCHED --input-shape=...` in the file gives a float input's shape."""
    fn = load_factory(path, factory)   # before importing torch: a broken file fails fast
    import torch

    try:
        built, mode = _construct(fn)
    except ProfileError:
        raise
    except Exception as exc:
        raise ProfileError(f"{path}:{factory}() failed: {type(exc).__name__}: {one_line(exc)}") from exc
    example = None
    if isinstance(built, tuple | list) and len(built) == 2 and isinstance(built[0], torch.nn.Module):
        built, example = built
    if not isinstance(built, torch.nn.Module):
        raise ProfileError(f"{path}:{factory}() returned {type(built).__name__}, not a torch.nn.Module "
                           "(nor a pair of a module and an example input)")
    if example is None:
        shape = input_shape_directive(path)
        if shape is not None:
            example = torch.empty(1, *shape, device="meta")
    return built, mode, example


# --------------------------------------------------------------------------- walking
def layer_kind(module) -> str | None:
    """The profile's name for a module's kind, or None for containers and unclassified modules."""
    import torch.nn as nn

    cls = type(module).__name__
    if isinstance(module, nn.Conv2d):
        if module.groups > 1:
            return "conv_grouped"
        if tuple(module.kernel_size) == (1, 1):
            return "conv_pointwise"
        return "conv_spatial"
    if isinstance(module, nn.modules.conv._ConvNd):
        return "conv_other"
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "batchnorm"
    if isinstance(module, nn.LayerNorm | nn.GroupNorm | nn.modules.normalization.RMSNorm
                  | nn.modules.instancenorm._InstanceNorm):
        return "layernorm"
    if isinstance(module, nn.RNNBase | nn.RNNCellBase):
        return "recurrent"
    if isinstance(module, nn.Embedding | nn.EmbeddingBag):
        return "embedding"
    if isinstance(module, nn.modules.pooling._MaxPoolNd | nn.modules.pooling._AdaptiveMaxPoolNd):
        return "pool_max"
    if isinstance(module, nn.modules.pooling._AvgPoolNd | nn.modules.pooling._AdaptiveAvgPoolNd):
        return "pool_avg"
    if isinstance(module, nn.modules.dropout._DropoutNd) or cls == "StochasticDepth":
        return "dropout"
    if isinstance(module, nn.MultiheadAttention) or "Attention" in cls:
        return "attention"
    if cls == "SqueezeExcitation":
        return "squeeze_excitation"
    if module.__module__.startswith("torch.nn.modules.activation"):
        return "act_" + cls.lower()
    return None


def _recurrent_steps(module, inputs) -> int:
    """Time steps one call of a recurrent module runs: layers x sequence length x directions for an
    nn.RNN / LSTM / GRU (the sequence length from its input: a PackedSequence's longest, else the time
    dimension by `batch_first`, an unbatched 2-D input's first), 1 for a cell."""
    import torch.nn as nn
    from torch.nn.utils.rnn import PackedSequence

    if not isinstance(module, nn.RNNBase):
        return 1
    x = inputs[0] if inputs else None
    if isinstance(x, PackedSequence):
        length = int(x.batch_sizes.shape[0])
    elif x is not None and hasattr(x, "dim") and x.dim() >= 2:
        length = int(x.shape[1] if module.batch_first and x.dim() == 3 else x.shape[0])
    else:
        length = 1
    return int(module.num_layers) * length * (2 if module.bidirectional else 1)


def _conv_flops(module, out) -> float:
    """2 x multiply-adds of a convolution producing `out` (one sample)."""
    k = 1
    for d in module.kernel_size:
        k *= d
    per_output = (module.in_channels // module.groups) * k
    return 2.0 * out.numel() * per_output


class _OpCounter:
    """Counts structural ops seen in the forward pass: residual adds/muls and concatenations."""

    def __init__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                a, b = (args[0], args[1]) if len(args) >= 2 else (None, None)
                both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() >= 3 and b.dim() >= 3
                if name in ("add", "add_") and both and a.shape == b.shape:
                    counter.ops["residual_add"] = counter.ops.get("residual_add", 0) + 1
                elif name in ("mul", "mul_") and both and a.shape != b.shape:
                    counter.ops["gating_mul"] = counter.ops.get("gating_mul", 0) + 1
                elif name == "cat":
                    counter.ops["concat"] = counter.ops.get("concat", 0) + 1
                return func(*args, **(kwargs or {}))

        self.ops: dict[str, int] = {}
        self.mode = Mode()


def _passthrough(self, x, *args, **kwargs):
    return x


@contextlib.contextmanager
def _shape_only(model):
    """Let norms and element-wise activations return their input during the counting pass.

    Why: they keep their input's shape and FlopCounterMode counts no FLOPs for them, yet their meta
    kernels run as Python decompositions that take most of a profile's time (3-5x for CNNs). Their
    modules are still counted and their outputs still add to the activation bytes through the hooks.
    """
    import types

    patched = []
    for module in model.modules():
        kind = layer_kind(module)
        if kind in ("batchnorm", "layernorm") or (kind or "").startswith("act_") and kind != "act_glu":
            if "forward" not in vars(module):
                module.forward = types.MethodType(_passthrough, module)
                patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def walk(model, input_size: int, spec: str, build: str = "meta", example_input: Any = None) -> Profile:
    """Run one forward pass on meta tensors and collect the profile.

    The input is a 3 x input_size x input_size image unless `example_input` is given (a tensor or a
    tuple of tensors whose first dimension is the batch): every per-sample figure is divided by it."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = model.eval()
    counts: dict[str, int] = {}
    flops_by_kind: dict[str, float] = {}
    calls_by_kind: dict[str, int] = {}
    bytes_by_kind: dict[str, int] = {}
    params_by_kind: dict[str, int] = {}
    if example_input is None:
        inputs: tuple = (torch.empty(1, 3, input_size, input_size, device="meta"),)
    else:
        inputs = tuple(example_input) if isinstance(example_input, tuple | list) else (example_input,)
        inputs = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
    first = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
    per_sample = int(first.shape[0]) if first is not None and first.dim() > 0 and first.shape[0] > 0 else 1
    input_shape = tuple(int(d) for d in first.shape[1:]) if example_input is not None and first is not None else ()
    state = {"act": 0, "depth": 0, "steps": 0}
    handles = []

    def hook(module, inputs, out):
        kind = layer_kind(module)
        if kind is None:
            return
        if kind == "recurrent":
            state["steps"] += _recurrent_steps(module, inputs)
        if isinstance(out, tuple | list):
            out = out[0]
        if not isinstance(out, torch.Tensor):
            return
        nbytes = out.numel() * BYTES_PER_ELEMENT // per_sample
        state["act"] += nbytes
        calls_by_kind[kind] = calls_by_kind.get(kind, 0) + 1
        bytes_by_kind[kind] = bytes_by_kind.get(kind, 0) + nbytes
        if kind.startswith("conv"):
            flops_by_kind[kind] = flops_by_kind.get(kind, 0.0) + _conv_flops(module, out) / per_sample
            state["depth"] += 1
        elif kind == "linear":
            flops_by_kind[kind] = flops_by_kind.get(kind, 0.0) + 2.0 * out.numel() * module.in_features / per_sample
            state["depth"] += 1
        elif kind == "attention":
            state["depth"] += 1

    for module in model.modules():
        kind = layer_kind(module)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
            own = sum(p.numel() for p in module.parameters(recurse=False))
            if own:
                params_by_kind[kind] = params_by_kind.get(kind, 0) + own
            handles.append(module.register_forward_hook(hook))
    params = sum(p.numel() for p in model.parameters())
    try:
        model = model.to("meta")
    except Exception as exc:  # a module holding non-tensor state that cannot move
        raise ProfileError(f"{spec}: cannot move the model to the meta device: {one_line(exc)}") from exc
    ops = _OpCounter()
    flop_mode = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), _shape_only(model), flop_mode, ops.mode:
            out = model(*inputs)
    except ProfileError:
        raise
    except Exception as exc:
        where = f"input {tuple(first.shape)}" if example_input is not None and first is not None \
            else f"{input_size}x{input_size}"
        raise ProfileError(f"{spec}: forward pass at {where} failed: "
                           f"{type(exc).__name__}: {one_line(exc)}") from exc
    finally:
        for h in handles:
            h.remove()
    if isinstance(out, tuple | list) or hasattr(out, "logits"):
        out = getattr(out, "logits", out[0] if isinstance(out, tuple | list) else out)
    total = float(flop_mode.get_total_flops()) / per_sample
    counted = sum(flops_by_kind.values())
    # FLOPs of matmuls not inside Conv/Linear modules: attention's products and fused projections
    flops_by_kind["other"] = max(0.0, total - counted)
    return Profile(
        spec=spec, input_size=input_size, params=int(params), flops=total,
        activation_bytes=int(state["act"]), depth=int(state["depth"]),
        counts=dict(sorted(counts.items())), flops_by_kind=dict(sorted(flops_by_kind.items())),
        ops={k: v for k, v in sorted(ops.ops.items())}, build=build, versions=library_versions(),
        calls_by_kind=dict(sorted(calls_by_kind.items())), bytes_by_kind=dict(sorted(bytes_by_kind.items())),
        params_by_kind=dict(sorted(params_by_kind.items())), input_shape=input_shape,
        recurrent_steps=int(state["steps"]),
    )


# --------------------------------------------------------------------------- entry points
def profile_in_process(spec: str, input_size: int | None = None) -> Profile:
    """Build and walk SPEC in this process (imports torch; runs a user's file here: use with care)."""
    start = time.perf_counter()
    ms = parse_spec(spec)
    example = None
    sync = sync_steps_directive(ms.path) if ms.is_file else 0   # a bad line fails before any model code runs
    if ms.is_file:
        model, build, example = build_user(ms.path, ms.factory)
        size = input_size or DEFAULT_INPUT_SIZE
    else:
        model, build = build_torchvision(ms.name)
        fixed = getattr(model, "image_size", None)  # ViT accepts only the size it was built for
        size = input_size or (fixed if isinstance(fixed, int) else default_input_size(ms.name))
    if size < 1:
        raise ProfileError(f"input size must be positive, got {size}")
    prof = walk(model, size, ms.text, build, example_input=example)
    return Profile(**{**asdict(prof), "sync_steps": sync, "seconds": round(time.perf_counter() - start, 4)})


def profile_subprocess(spec: str, input_size: int | None = None, timeout: float = DEFAULT_TIMEOUT_S, *,
                       memory_limit_bytes: int = PROFILE_MEMORY_LIMIT_BYTES,
                       cpu_limit_s: float = PROFILE_CPU_LIMIT_S) -> Profile:
    """Profile SPEC in a child Python: the user's code never runs in the caller.

    The child gets a wall-clock `timeout` (killed with its whole session), and sets its own memory and
    CPU limits before it imports anything of the user's, so a file that allocates or spins without end
    fails with a one-line error instead of taking the login node with it. `-P` keeps the current
    directory off the child's `sys.path`: a `torch.py` someone left in a shared working directory is
    never imported in place of the real one.
    """
    import signal
    import subprocess

    argv = [sys.executable, "-P", "-m", "msched.models.profiler", spec, "--json",
            "--memory-limit", str(int(memory_limit_bytes)), "--cpu-limit", str(max(1, int(cpu_limit_s)))]
    if input_size:
        argv += ["--input-size", str(int(input_size))]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ProfileError(f"{spec}: profiling did not finish within {timeout:g} s "
                           "(does importing the file or calling the factory hang?)") from None
    try:
        data = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except json.JSONDecodeError:
        data = {}
    if proc.returncode == 0 and "flops" in data:
        return Profile.from_dict(data)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not data:
        raise ProfileError(f"{spec}: profiling used more than its {max(1, int(cpu_limit_s))} s of CPU "
                           "(does importing the file or calling the factory loop?)")
    if isinstance(data, dict) and data.get("error"):
        message = str(data["error"])
        if "MemoryError" in message or "can't allocate memory" in message:
            message += f" (the profiler's memory limit is {memory_limit_bytes / (1 << 30):g} GiB)"
        raise ProfileError(message)
    tail = (err or out or "").strip().splitlines()
    raise ProfileError(f"{spec}: profiler exited with status {proc.returncode}: {tail[-1] if tail else 'no output'}")


def limit_this_process(memory_bytes: int | None, cpu_s: int | None) -> None:
    """Cap this process's address space and CPU seconds (the profiler child, before the user's import).

    CPU: SIGXCPU at the soft limit, SIGKILL one second later. A limit already lower (the user's own
    `ulimit`) is kept."""
    import resource

    for which, value, slack in ((resource.RLIMIT_AS, memory_bytes, 0), (resource.RLIMIT_CPU, cpu_s, 1)):
        if not value:
            continue
        soft, hard = resource.getrlimit(which)
        new_hard = value + slack if hard == resource.RLIM_INFINITY else min(hard, value + slack)
        new_soft = value if soft == resource.RLIM_INFINITY else min(soft, value)
        resource.setrlimit(which, (min(new_soft, new_hard), new_hard))


def main(argv: list[str] | None = None) -> int:
    """`python -m msched.models.profiler SPEC [--input-size N] [--json] [--memory-limit B] [--cpu-limit S]`:
    the child side of profile_subprocess."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m msched.models.profiler")
    ap.add_argument("spec")
    ap.add_argument("--input-size", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--memory-limit", type=int, default=None, help="address-space limit in bytes (setrlimit)")
    ap.add_argument("--cpu-limit", type=int, default=None, help="CPU-time limit in seconds (setrlimit)")
    args = ap.parse_args(argv)
    limit_this_process(args.memory_limit, args.cpu_limit)
    try:
        prof = profile_in_process(args.spec, args.input_size)
    except ProfileError as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"error: {exc}", flush=True)
        return 2
    except Exception as exc:
        msg = f"{args.spec}: {type(exc).__name__}: {one_line(exc)}"
        print(json.dumps({"error": msg}) if args.json else f"error: {msg}", flush=True)
        return 2
    if args.json:
        print(json.dumps(prof.to_dict()), flush=True)
    else:
        print(f"{prof.spec}: {prof.flops / 1e9:.3f} GFLOPs, {prof.params:,} params, {prof.conv2d} Conv2d")
    return 0


if __name__ == "__main__":
    sys.exit(main())
