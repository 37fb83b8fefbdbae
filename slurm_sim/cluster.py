"""Cluster specs for the simulator: nodes (GPU type, GPU count, features), partitions and the scheduler.

Two forms (DESIGN, a stable interface):
- a string `a100:8x4,rtx2080ti:4x8` = GPU type : GPUs per node x nodes, comma separated (one partition,
  Slurm's default scheduler settings);
- a TOML file, for mixed node sizes, extra features, partitions and the scheduler's settings:

      [scheduler]                      # slurm.conf SchedulerType / SchedulerParameters (all optional)
      type = "backfill"                # or "builtin" (strict priority order); Slurm's default: backfill
      bf_interval_s = 30               # seconds between backfill passes (bf_interval)
      bf_window_s = 86400              # how far ahead backfill reserves (bf_window, 1440 min)
      bf_max_job_test = 500            # jobs one backfill pass looks at (bf_max_job_test)

      [partition]                      # the one partition, when [[partitions]] is absent
      default_time_s = 604800          # DefaultTime: limit of jobs without one (backfill plans with it)
      max_time_s = 1209600             # MaxTime: a longer requested limit is refused at submit

      [[partitions]]                   # several partitions instead (a node may be in more than one)
      name = "a100"
      nodes = ["a100"]                 # GPU types or node names (`a100-2`); default: every node
      default_time_s = 3600            # DefaultTime (default: MaxTime if set, else 7 days)
      max_time_s = 86400               # MaxTime (default: unlimited)
      default = true                   # jobs that name no partition go here (default: the first)

      [[nodes]]
      type = "a100"                    # canonical lowercase GPU type; also a node feature
      gpus = 8                         # GPUs per node
      count = 4                        # how many such nodes (default 1)
      features = ["ib"]                # extra features (optional)

Every node carries its GPU type as a feature, as on the real cluster (SLURM-NOTES: retyping a pending
job is done through features). Names are `<type>-<n>` numbered per type, in spec order.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

DEFAULT_TIME_S = 7 * 86400.0
DEFAULT_PARTITION = "sim"
SCHEDULERS = ("backfill", "builtin")      # slurm.conf SchedulerType=sched/<name>
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
    partitions: tuple[str, ...] = (DEFAULT_PARTITION,)


@dataclass(frozen=True)
class PartitionSpec:
    """One slurm.conf PartitionName line: its DefaultTime and MaxTime (seconds; inf = UNLIMITED)."""

    name: str
    default_time_s: float = DEFAULT_TIME_S
    max_time_s: float = math.inf


@dataclass(frozen=True)
class SchedulerSpec:
    """SchedulerType and the SchedulerParameters the simulator models, with Slurm 22.05's defaults."""

    type: str = "backfill"
    bf_interval_s: float = 30.0
    bf_window_s: float = 86400.0
    bf_max_job_test: int = 500

    @property
    def backfill(self) -> bool:
        return self.type == "backfill"


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[NodeSpec, ...]
    default_time_s: float = DEFAULT_TIME_S      # the default partition's DefaultTime
    source: str = ""
    partitions: tuple[PartitionSpec, ...] = (PartitionSpec(DEFAULT_PARTITION),)
    scheduler: SchedulerSpec = SchedulerSpec()

    @cached_property
    def partition(self) -> dict[str, PartitionSpec]:
        """Partitions by name; the first is the default one (jobs that name none go there)."""
        return {p.name: p for p in self.partitions}

    @property
    def default_partition(self) -> str:
        return self.partitions[0].name

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

    def fits(self, gpu_type: str, num_gpus: int, partitions: set[str] | frozenset[str] | None = None) -> bool:
        """Whether a job of `num_gpus` can ever run on this type (one node, or k whole equal nodes), within
        `partitions` when given (a job runs inside one partition: its nodes must all be in it)."""
        if partitions is not None and len(self.partitions) > 1:
            return any(self._fits_in(gpu_type, num_gpus, p) for p in partitions)
        for size, count in self._sizes.get(gpu_type, {}).items():
            if num_gpus <= size:
                return True
            if num_gpus % size == 0 and num_gpus // size <= count:
                return True
        return False

    def _fits_in(self, gpu_type: str, num_gpus: int, partition: str) -> bool:
        sizes = Counter(n.gpus for n in self.nodes if n.gpu_type == gpu_type and partition in n.partitions)
        return any(num_gpus <= size or (num_gpus % size == 0 and num_gpus // size <= count)
                   for size, count in sizes.items())

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
    unknown = sorted(set(data) - {"partition", "partitions", "nodes", "scheduler"})
    if unknown:
        raise ClusterSpecError(f"{path}: unknown key(s) {', '.join(unknown)}; valid: scheduler, partition, "
                               "partitions, nodes")
    if "partition" in data and "partitions" in data:
        raise ClusterSpecError(f"{path}: give either [partition] (one partition) or [[partitions]], not both")
    scheduler = _scheduler(data.get("scheduler", {}), path)
    if "partitions" in data:
        items_p = data["partitions"]
        if not isinstance(items_p, list) or not items_p:
            raise ClusterSpecError(f"{path}: partitions must be [[partitions]] tables")
        parts = [_partition(p, f"{path}: partitions entry {i}", named=True) for i, p in enumerate(items_p, 1)]
    else:
        parts = [_partition(data.get("partition", {}) or {}, f"{path}: partition", named=False)]
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
    spec = _build(groups, parts[0][0].default_time_s, str(path))
    return _with_partitions(spec, parts, scheduler, path)


_SCHED_KEYS = {"type": str, "bf_interval_s": float, "bf_window_s": float, "bf_max_job_test": int}
_PART_KEYS = ("name", "nodes", "default_time_s", "max_time_s", "default")


def _scheduler(table, path: Path) -> SchedulerSpec:
    if not isinstance(table, dict):
        raise ClusterSpecError(f"{path}: scheduler must be a table")
    bad = sorted(set(table) - set(_SCHED_KEYS))
    if bad:
        raise ClusterSpecError(f"{path}: scheduler: unknown key(s) {', '.join(bad)}; valid: {', '.join(_SCHED_KEYS)}")
    kind = str(table.get("type", "backfill")).strip().lower().removeprefix("sched/")
    if kind not in SCHEDULERS:
        raise ClusterSpecError(f"{path}: scheduler.type {kind!r}; choose from {', '.join(SCHEDULERS)}")
    values = {}
    for key, typ in _SCHED_KEYS.items():
        if key == "type" or key not in table:
            continue
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or (typ is int and not isinstance(v, int)) or v <= 0:
            raise ClusterSpecError(f"{path}: scheduler.{key} must be a positive {'integer' if typ is int else 'number'}")
        values[key] = typ(v)
    return SchedulerSpec(type=kind, **values)


def _partition(table, where: str, *, named: bool) -> tuple[PartitionSpec, tuple[str, ...] | None, bool]:
    """(spec, node selectors or None for every node, is-default) from one TOML table."""
    if not isinstance(table, dict):
        raise ClusterSpecError(f"{where} is not a table")
    valid = _PART_KEYS if named else ("default_time_s", "max_time_s")
    bad = sorted(set(table) - set(valid))
    if bad:
        raise ClusterSpecError(f"{where}: unknown key(s) {', '.join(bad)}; valid: {', '.join(valid)}")
    name = str(table.get("name", DEFAULT_PARTITION)).strip()
    if not _TYPE_RE.match(name.lower()) or name != name.lower():
        raise ClusterSpecError(f"{where}: partition name {name!r}: lowercase letters, digits, _ . - only")

    def seconds(key: str, default: float) -> float:
        v = table.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise ClusterSpecError(f"{where}: {key} must be a positive number of seconds")
        return float(v)

    max_time = seconds("max_time_s", math.inf)
    default_time = seconds("default_time_s", max_time if math.isfinite(max_time) else DEFAULT_TIME_S)
    if default_time > max_time:
        raise ClusterSpecError(f"{where}: default_time_s {default_time:g} is above max_time_s {max_time:g}")
    nodes = table.get("nodes")
    if nodes is not None and (not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) for n in nodes)):
        raise ClusterSpecError(f"{where}: nodes must be a non-empty list of GPU types or node names")
    is_default = table.get("default", False)
    if not isinstance(is_default, bool):
        raise ClusterSpecError(f"{where}: default must be true or false")
    return (PartitionSpec(name, default_time, max_time), tuple(n.strip().lower() for n in nodes) if nodes else None,
            is_default)


def _with_partitions(spec: ClusterSpec, parts, scheduler: SchedulerSpec, path: Path) -> ClusterSpec:
    names = [p.name for p, _, _ in parts]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ClusterSpecError(f"{path}: partition(s) {', '.join(dup)} defined twice")
    defaults = [p.name for p, _, d in parts if d]
    if len(defaults) > 1:
        raise ClusterSpecError(f"{path}: more than one default partition ({', '.join(defaults)})")
    ordered = sorted(parts, key=lambda item: not item[2])        # the default partition first
    member: dict[str, list[str]] = {n.name: [] for n in spec.nodes}
    for p, selectors, _ in ordered:
        if selectors is None:
            chosen = [n.name for n in spec.nodes]
        else:
            unknown = [s for s in selectors if not any(s in (n.name, n.gpu_type) for n in spec.nodes)]
            if unknown:
                raise ClusterSpecError(f"{path}: partition {p.name}: no node or GPU type named {', '.join(unknown)}")
            chosen = [n.name for n in spec.nodes if n.name in selectors or n.gpu_type in selectors]
        for name in chosen:
            member[name].append(p.name)
    orphans = [n for n, ps in member.items() if not ps]
    if orphans:
        raise ClusterSpecError(f"{path}: node(s) {', '.join(orphans[:5])} are in no partition")
    nodes = tuple(replace(n, partitions=tuple(member[n.name])) for n in spec.nodes)
    return replace(spec, nodes=nodes, partitions=tuple(p for p, _, _ in ordered),
                   default_time_s=ordered[0][0].default_time_s, scheduler=scheduler)


def with_scheduler(spec: ClusterSpec, scheduler: str | None) -> ClusterSpec:
    """The spec with its SchedulerType replaced (`msched sim --scheduler`); None keeps the spec's own."""
    if scheduler is None:
        return spec
    kind = scheduler.strip().lower().removeprefix("sched/")
    if kind not in SCHEDULERS:
        raise ClusterSpecError(f"scheduler {scheduler!r}; choose from {', '.join(SCHEDULERS)}")
    return replace(spec, scheduler=replace(spec.scheduler, type=kind))


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
    return ClusterSpec(tuple(nodes), default_time, source,
                       partitions=(PartitionSpec(DEFAULT_PARTITION, default_time),))
