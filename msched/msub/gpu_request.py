"""A job's GPU request and its feature constraint, as msub reads and extends them.

Why features and not gres: Slurm 22.05 merges a retyped gres into the old one (SLURM-NOTES), so msched
leaves the user's GPU options exactly as written and steers the GPU type through `--constraint`, the
node features that name each node's GPU type. A GPU type the user wrote (typed gres / --gpus, or a
constraint naming a GPU type) is the user's choice: msched records it as pinned and adds nothing.

Pure Python (msub's hot path).
"""

from __future__ import annotations

from msched.msub.sbatch_args import SbatchRequest
from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Callable, Iterable, Sequence

GPU_OPTIONS = ("gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket")


@record
class GpuRequest:
    """The GPUs a job asks for, read from whichever option holds them."""

    total: int                      # GPUs over the whole job (best reading of the request)
    per_node: int                   # GPUs on each node
    types: tuple[str, ...] = ()     # GPU types written in the request (canonical), () = untyped
    options: tuple[str, ...] = ()   # the options that carried GPUs

    @property
    def typed(self) -> bool:
        return bool(self.types)


_COUNT_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _parse_count(text: str) -> int | None:
    r"""`N`, `Nk`, `Nm` or `Ng` (any case) -> the count; None otherwise. String methods, not `re`:
    compiling a pattern costs msub ~0.2 ms (str.isdecimal is exactly `re`'s `\d`, Unicode digits included)."""
    t = text.strip()
    unit = t[-1:].lower() if t[-1:] in ("k", "K", "m", "M", "g", "G") else ""
    digits = t[:len(t) - len(unit)]
    return int(digits) * _COUNT_UNITS[unit] if digits.isdecimal() else None


def parse_gres(value: str) -> list[tuple[str | None, int]]:
    """GPU entries of a `--gres` list: [(type or None, count per node)]; non-GPU gres are skipped."""
    out: list[tuple[str | None, int]] = []
    for item in value.split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix):]
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        gpu_type: str | None = None
        count = 1
        if len(parts) == 2:
            n = _parse_count(parts[1])
            if n is None:
                gpu_type = parts[1]
            else:
                count = n
        elif len(parts) >= 3:
            gpu_type = parts[1]
            count = _parse_count(parts[2]) or 1
        out.append((gpu_type or None, count))
    return out


def parse_gpus(value: str) -> list[tuple[str | None, int]]:
    """`--gpus` / `--gpus-per-*` lists: `[type:]count[,...]` -> [(type or None, count)]."""
    out: list[tuple[str | None, int]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("gpu:"):
            item = item[4:]
        gpu_type, sep, count = item.rpartition(":")
        n = _parse_count(count)
        if n is None:           # `--gpus=a100` (type alone) is a count of 1
            out.append((item, 1))
        else:
            out.append((gpu_type if sep and gpu_type else None, n))
    return out


def gpu_request(req: SbatchRequest, canonical: Callable[[str], str] = str.lower) -> GpuRequest | None:
    """The job's GPU request, or None when it asks for no GPU."""
    nodes = max(1, req.nodes)
    types: list[str] = []
    used: list[str] = []
    total = per_node = 0
    for name in GPU_OPTIONS:
        value = req.get(name)
        if not value:
            continue
        entries = parse_gres(value) if name == "gres" else parse_gpus(value)
        if not entries:
            continue
        used.append(name)
        count = sum(n for _, n in entries)
        types.extend(canonical(t) for t, _ in entries if t)
        if name in ("gres", "gpus-per-node"):
            per_node, total = count, count * nodes
        elif name == "gpus":
            total, per_node = count, max(1, -(-count // nodes))
        elif name == "gpus-per-task":
            tasks = req.ntasks or (req.ntasks_per_node or 1) * nodes
            total, per_node = count * tasks, max(1, -(-count * tasks // nodes))
        else:                                       # gpus-per-socket: at least one socket per node
            per_node, total = count, count * nodes
    if not used or total <= 0:
        return None
    return GpuRequest(total=total, per_node=per_node, types=tuple(dict.fromkeys(types)), options=tuple(used))


def pinned_types(
    req: SbatchRequest, gpus: GpuRequest | None, known_types: Iterable[str],
    canonical: Callable[[str], str] = str.lower,
) -> tuple[str, ...]:
    """GPU types the user chose: typed GPU options, or a constraint naming a known GPU type.

    Reads the constraint with the reorderer's own reader (msched.slurm.feature_expr), so msub and the
    reorderer agree on what the user pinned.
    """
    from msched.slurm.feature_expr import names_gpu_type

    known = {canonical(t) for t in known_types}
    pinned = list(gpus.types) if gpus else []

    def gpu_type_of(name: str) -> str | None:
        c = canonical(name)
        return c if c in known else None

    for t in names_gpu_type(req.constraint or "", gpu_type_of):
        if t not in pinned:
            pinned.append(t)
    return tuple(pinned)


def add_types(user: str | None, types: Sequence[str], *, multi_node: bool = False) -> str | None:
    """The constraint to submit: the user's AND msched's OR of types (DESIGN, guard 6).

    Written in the reorderer's forms (msched.slurm.feature_expr.combine) so later rounds can read the
    user's part back; a multi-node job without a user constraint gets Slurm's matching OR `[a|b]` (all
    nodes of one type). None = the user's expression is too complex to extend: add nothing.
    Verified on Slurm 22.05.8: `a|b`, `(a|b)&x`, `x&(a|b)`, `x&[a|b]` are accepted and start the job on a
    node satisfying both.
    """
    from msched.slurm.feature_expr import combine

    if not types:
        return None
    user = (user or "").strip()
    if not user and multi_node and len(types) > 1:
        return "[" + "|".join(types) + "]"
    return combine(user, list(types))
