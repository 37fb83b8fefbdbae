"""GPU spec table: what the cost model knows about a GPU type it has never measured.

Shipped as `msched/data/gpu_specs.csv` (one row per type, PCIe and SXM variants apart, each with the
public datasheet or whitepaper it comes from); a site adds or overrides rows with its own CSV of the same
columns (config key `gpu_specs`). A row's `aliases` (`|`-separated) are other names of the same type, so
`a100` finds `a100_pcie_40gb`; the site's `[gpu_aliases]` map Slurm names to msched's names first.

Throughputs are dense (no sparsity), at the boost clock, in TFLOPS: `fp16_tflops` is the tensor-core rate
with FP32 accumulation (what PyTorch's autocast uses; GeForce Turing/Ampere/Ada cards run it at half their
FP16-accumulate rate), or the native FP16 rate on cards without tensor cores (GP102's is 1/64 of FP32, and
cuDNN then computes in FP32: see `peak_tflops`). `tf32_tflops` is 0 before Ampere. `interconnect_gbs` is
one direction's bandwidth per GPU (PCIe x16, or NVLink's total over its links).

Pure Python (csv): msub may read it.
"""

from __future__ import annotations

import os

from msched.config import DATA_DIR
from msched.util.light import DictReader
from msched.util.record import record

SHIPPED_SPECS = os.path.join(DATA_DIR, "gpu_specs.csv")
COLUMNS = ("gpu_type", "aliases", "name", "generation", "compute_capability", "form_factor", "sm_count",
           "boost_clock_mhz", "fp32_tflops", "tf32_tflops", "fp16_tflops", "fp64_tflops", "memory_gb",
           "memory_bw_gbs", "interconnect", "interconnect_gbs", "source")
_NUMERIC = {"compute_capability", "sm_count", "boost_clock_mhz", "fp32_tflops", "tf32_tflops", "fp16_tflops",
            "fp64_tflops", "memory_gb", "memory_bw_gbs", "interconnect_gbs"}
GENERATIONS = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
PRECISIONS = ("float", "half", "bfloat16", "double")


class GpuSpecError(ValueError):
    """A spec file that cannot be read, or a type without a spec row; one line naming the file/row."""


@record
class GpuSpec:
    gpu_type: str
    aliases: tuple = ()
    name: str = ""
    generation: str = ""
    compute_capability: float = 0.0
    form_factor: str = ""
    sm_count: float = 0.0
    boost_clock_mhz: float = 0.0
    fp32_tflops: float = 0.0
    tf32_tflops: float = 0.0
    fp16_tflops: float = 0.0
    fp64_tflops: float = 0.0
    memory_gb: float = 0.0
    memory_bw_gbs: float = 0.0
    interconnect: str = ""
    interconnect_gbs: float = 0.0
    source: str = ""

    @property
    def has_tensor_cores(self) -> bool:
        return self.compute_capability >= 7.0

    def peak_tflops(self, precision: str, tf32: bool = False) -> float:
        """The matmul/convolution peak a training step at `precision` can reach on this type.

        half/bfloat16: the tensor-core rate, or FP32 where FP16 math is slower (Pascal GP102, Kepler:
        cuDNN keeps FP16 storage but computes in FP32). float: TF32 tensor cores where `tf32` (PyTorch's
        default for cuDNN convolutions since 1.7; not for matmuls since 1.12), else FP32. double: FP64."""
        if precision == "double":
            return self.fp64_tflops or self.fp32_tflops / 32.0
        if precision in ("half", "bfloat16", "amp", "fp16", "bf16"):
            return max(self.fp16_tflops, self.fp32_tflops)
        if tf32 and self.tf32_tflops:
            return max(self.tf32_tflops, self.fp32_tflops)
        return self.fp32_tflops


class SpecTable:
    """Spec rows by canonical type, with every alias resolved."""

    def __init__(self, specs: list[GpuSpec]):
        self.specs: dict[str, GpuSpec] = {}
        self._alias: dict[str, str] = {}
        for s in specs:
            self.specs[s.gpu_type] = s
        for s in self.specs.values():
            for a in s.aliases:
                self._alias.setdefault(a, s.gpu_type)
        for t in self.specs:
            self._alias[t] = t

    def canonical(self, name: str) -> str | None:
        return self._alias.get(name.strip().lower())

    def get(self, name: str) -> GpuSpec | None:
        key = self.canonical(name)
        return self.specs.get(key) if key else None

    def require(self, name: str) -> GpuSpec:
        spec = self.get(name)
        if spec is None:
            raise GpuSpecError(f"no spec row for GPU type {name!r}; known: {', '.join(sorted(self.specs))} "
                               "(a site adds its own rows with the config key gpu_specs)")
        return spec

    def names(self) -> list[str]:
        return sorted(self.specs)


def read_specs(path: str) -> list[GpuSpec]:
    """Rows of a spec CSV; a missing numeric value reads as 0 (unknown)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = DictReader(fh)
            missing = [c for c in ("gpu_type", "fp32_tflops", "memory_gb", "memory_bw_gbs")
                       if c not in (reader.fieldnames or ())]
            if missing:
                raise GpuSpecError(f"{path}: missing column(s) {', '.join(missing)}; columns: {', '.join(COLUMNS)}")
            out = []
            for n, row in enumerate(reader, start=2):
                values: dict[str, object] = {}
                for col in COLUMNS:
                    raw = (row.get(col) or "").strip()
                    if col in _NUMERIC:
                        try:
                            values[col] = float(raw) if raw else 0.0
                        except ValueError:
                            raise GpuSpecError(f"{path}:{n}: {col} = {raw!r} is not a number") from None
                    elif col == "aliases":
                        values[col] = tuple(a.strip().lower() for a in raw.split("|") if a.strip())
                    else:
                        values[col] = raw.lower() if col in ("gpu_type", "generation") else raw
                if not values["gpu_type"]:
                    raise GpuSpecError(f"{path}:{n}: empty gpu_type")
                if values["generation"] and values["generation"] not in GENERATIONS:
                    raise GpuSpecError(f"{path}:{n}: generation {values['generation']!r} is not one of "
                                       f"{', '.join(GENERATIONS)}")
                out.append(GpuSpec(**values))
            return out
    except OSError as exc:
        raise GpuSpecError(f"cannot read GPU spec table {path}: {exc.strerror or exc}") from None


_CACHE: dict[tuple, SpecTable] = {}


def load_specs(extra: str = "", aliases: dict[str, str] | None = None) -> SpecTable:
    """The shipped rows, then a site's `extra` file's rows (same type = replaced), then the site's
    Slurm aliases (`Config.gpu_aliases`) pointing at them. Cached per (extra file, aliases)."""
    key = (extra, os.path.getmtime(extra) if extra and os.path.exists(extra) else 0.0,
           tuple(sorted((aliases or {}).items())))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    rows = read_specs(SHIPPED_SPECS)
    if extra:
        rows += read_specs(extra)
    table = SpecTable(rows)
    for alias, target in (aliases or {}).items():
        canon = table.canonical(target)
        if canon:
            table._alias[alias.lower()] = canon
    _CACHE[key] = table
    return table


def specs_for_config(config=None) -> SpecTable:
    """The spec table a site sees: its config's `gpu_specs` rows and `gpu_aliases`."""
    if config is None:
        from msched.config import load_config

        config = load_config(cached=True)
    return load_specs(config.gpu_specs, dict(config.gpu_aliases))


def site_specs() -> SpecTable:
    """The spec table of this machine's site config (`specs_for_config`), or the shipped rows where the
    config or its spec file cannot be read: what a caller without a config in hand (the round's memory
    check) must use, so that a type the site added is known by its memory too. Never raises: memory is
    advice, and a broken site file must not stop a round (msub and `msched config check` report it)."""
    try:
        return specs_for_config()
    except Exception:  # noqa: BLE001 - ConfigError, GpuSpecError: fall back to the shipped rows
        return load_specs()

