"""Cluster specs for the simulator: which nodes exist, their GPU type, GPU count and features.

Two forms (DESIGN, a stable interface):
- a string `a100:8x4,rtx2080ti:4x8` = GPU type : GPUs per node x nodes, comma separated;
- a TOML file, for mixed node sizes, extra features and the partition's default time limit:

      [partition]
      default_time_s = 604800          # time limit assumed for jobs without one (backfill uses it)

      [[nodes]]
      type = "a100"                    # canonical lowercase GPU type; also a node feature
      gpus = 8                         # GPUs per node
      count = 4                        # how many such nodes (default 1)
      features = ["ib"]                # extra features (optional)

Every node carries its GPU type as a feature, as on the real cluster (SLURM-NOTES: retyping a pending
job is done through features). Names are `<type>-<n>` numbered per type, in spec order.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

DEFAULT_TIME_S = 7 * 86400.0
_TYPE_RE = re.compile(r"^[a-z][a-z0-9_.-]*$")
_ITEM_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.-]*)\s*:\s*(\d+)\s*[xX]\s*(\d+)\s*$")


class ClusterSpecError(ValueError):
    """A cluster spec that cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_type: str
    gpus: int
    features: tuple[str, ...]       # includes the GPU type itself


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]
    default_time_s: float = DEFAULT_TIME_S
    source: str = ""

    # derived views are cached: the simulator and the metrics ask for them once per job
    @cached_property
    def gpu_types(self) -> list[str]:
        return sorted({n.gpu_type for n in self.nodes})

    @cached_property
    def gpus_total(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for n in self.nodes:
            c[n.gpu_type] += n.gpus
        return dict(c)

    @cached_property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @cached_property
    def _sizes(self) -> dict[str, dict[int, int]]:
        """Per type: GPUs per node -> number of such nodes."""
        out: dict[str, Counter[int]] = {}
        for n in self.nodes:
            out.setdefault(n.gpu_type, Counter())[n.gpus] += 1
        return {t: dict(c) for t, c in out.items()}

    def max_gpus(self, gpu_type: str) -> int:
        """The most GPUs one job can get on this type: one node, or whole nodes of the same size."""
        return max((size * count for size, count in self._sizes.get(gpu_type, {}).items()), default=0)

    def fits(self, gpu_type: str, num_gpus: int) -> bool:
        """Whether a job of `num_gpus` can ever run on this type (one node, or k whole equal nodes)."""
        for size, count in self._sizes.get(gpu_type, {}).items():
            if num_gpus <= size:
                return True
            if num_gpus % size == 0 and num_gpus // size <= count:
                return True
        return False

    def describe(self) -> str:
        groups: Counter[tuple[str, int]] = Counter((n.gpu_type, n.gpus) for n in self.nodes)
        return ",".join(f"{t}:{g}x{c}" for (t, g), c in groups.items())


def parse_cluster(spec: str | os.PathLike) -> ClusterSpec:
    """A cluster from `type:GPUSxNODES,...` or from a TOML file path."""
    text = str(spec).strip()
    if not text:
        raise ClusterSpecError("empty cluster spec; expected e.g. a100:8x4,rtx2080ti:4x8 or a TOML file")
    path = Path(text)
    if text.endswith(".toml") or (path.exists() and path.is_file()):
        return _from_toml(path)
    groups: list[tuple[str, int, int, tuple[str, ...]]] = []
    for item in text.split(","):
        m = _ITEM_RE.match(item)
        if not m:
            raise ClusterSpecError(
                f"bad cluster item {item.strip()!r}: expected TYPE:GPUSxNODES, e.g. a100:8x4 "
                "(or the path of a TOML file)")
        groups.append((m.group(1).lower(), int(m.group(2)), int(m.group(3)), ()))
    return _build(groups, DEFAULT_TIME_S, text)


def _from_toml(path: Path) -> ClusterSpec:
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterSpecError(f"cluster file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ClusterSpecError(f"cannot read cluster file {path}: {exc}") from None
    unknown = sorted(set(data) - {"partition", "nodes"})
    if unknown:
        raise ClusterSpecError(f"{path}: unknown key(s) {', '.join(unknown)}; valid: partition, nodes")
    part = data.get("partition", {}) or {}
    try:
        default_time = float(part.get("default_time_s", DEFAULT_TIME_S))
    except (TypeError, ValueError):
        raise ClusterSpecError(f"{path}: partition.default_time_s must be a number of seconds") from None
    if not default_time > 0:
        raise ClusterSpecError(f"{path}: partition.default_time_s must be positive")
    items = data.get("nodes")
    if not isinstance(items, list) or not items:
        raise ClusterSpecError(f"{path}: no [[nodes]] tables; each needs type, gpus and optionally count, features")
    groups = []
    for i, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise ClusterSpecError(f"{path}: nodes entry {i} is not a table")
        bad = sorted(set(item) - {"type", "gpus", "count", "features"})
        if bad:
            raise ClusterSpecError(f"{path}: nodes entry {i}: unknown key(s) {', '.join(bad)}; "
                                   "valid: type, gpus, count, features")
        gtype = str(item.get("type", "")).strip().lower()
        gpus, count = item.get("gpus"), item.get("count", 1)
        feats = item.get("features", [])
        if not isinstance(gpus, int) or not isinstance(count, int) or isinstance(gpus, bool):
            raise ClusterSpecError(f"{path}: nodes entry {i}: gpus and count must be integers")
        if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
            raise ClusterSpecError(f"{path}: nodes entry {i}: features must be a list of strings")
        groups.append((gtype, gpus, count, tuple(f.strip() for f in feats)))
    return _build(groups, default_time, str(path))


def _build(groups: list[tuple[str, int, int, tuple[str, ...]]], default_time: float, source: str) -> ClusterSpec:
    nodes: list[NodeSpec] = []
    per_type: Counter[str] = Counter()
    for gtype, gpus, count, feats in groups:
        if not _TYPE_RE.match(gtype):
            raise ClusterSpecError(f"bad GPU type name {gtype!r}: lowercase letters, digits, _ . - only")
        if gpus < 1 or count < 1:
            raise ClusterSpecError(f"{gtype}: GPUs per node and node count must be at least 1 (got {gpus}x{count})")
        for f in feats:
            if not _TYPE_RE.match(f.lower()):
                raise ClusterSpecError(f"bad feature name {f!r} on {gtype} nodes")
        for _ in range(count):
            per_type[gtype] += 1
            features = (gtype, *[f for f in feats if f != gtype])
            nodes.append(NodeSpec(f"{gtype}-{per_type[gtype]}", gtype, gpus, features))
    return ClusterSpec(tuple(nodes), default_time, source)
