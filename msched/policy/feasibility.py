"""Which GPU types can run a job at all: the one feasibility rule (DESIGN, policy point 4).

A type is possible for a job only if the type's nodes can hold the job's shape:
- a fixed per-node count (`--gres=gpu:4`, `--gpus-per-node=4`; `gpus_per_node` set) needs `num_nodes`
  nodes of the type with at least that many GPUs each (Slurm never splits a per-node request);
- a count spread over several nodes (`-N 2 --gpus=8`) needs `num_nodes` nodes with ceil(total / nodes);
- a total alone (`--gpus=8`, a trace job) runs on one node, or on whole nodes of the type (the planner's
  and the simulator's model: DESIGN, trace format), so the type's GPUs together must hold it;
- only nodes that satisfy the user's own feature constraint and sit in the job's partitions count
  (`node_sizes` filters them).
sbatch refuses a job no node can hold ("Requested node configuration is not available"), so a GPU-type
constraint naming such a type turns a valid submission into a refused one (msub) or a job that never
starts (a round). Every place that chooses a type asks here: msub's submit decision
(`msched.policy.choice`), every policy (`msched.policy.base.feasible_types`), and the round
(`msched.rounds.core.build_snapshot`).
- memory: a job whose predicted peak training memory per GPU (the tag's `mem`, msched.estimate.memory)
  exceeds a type's usable memory cannot run there at all (it dies with CUDA out-of-memory), so that type
  is not feasible either (`memory_fits`, a condition of `feasible_types`); a type or job whose memory is
  unknown is not held back.

Pure Python on records (msub's light path: no dataclasses, see `msched.util.record`).
"""

from __future__ import annotations

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence


def _shape(job: object) -> tuple[int, int | None, int]:
    """(total GPUs, fixed GPUs per node or None, nodes) of anything with those attributes."""
    g = max(1, int(getattr(job, "num_gpus", 1) or 1))
    per = getattr(job, "gpus_per_node", None)
    n = max(1, int(getattr(job, "num_nodes", 1) or 1))
    return g, (int(per) if per else None), n


def fits(job: object, sizes: Sequence[int]) -> bool:
    """Can nodes of these sizes (GPUs each) hold the job's shape? `job` has `num_gpus`, and optionally
    `gpus_per_node` (a fixed per-node count) and `num_nodes`."""
    if not sizes:
        return False
    g, per, n = _shape(job)
    if per is None and n > 1:
        per = -(-g // n)
    if per is not None:
        return sum(1 for s in sizes if s >= per) >= n
    return max(sizes) >= g or sum(sizes) >= g


def memory_fits(peak_gb: float | None, usable_gb: float | None) -> bool:
    """Does a training step of `peak_gb` per GPU fit a type with `usable_gb`? None (unknown) fits."""
    return not peak_gb or usable_gb is None or peak_gb <= usable_gb


def feasible_types(job: object, sizes_by_type: Mapping[str, Sequence[int]] | None,
                   types: Iterable[str] | None = None, *, peak_gb: float | None = None,
                   usable_gb: Mapping[str, float] | None = None) -> tuple[str, ...]:
    """The types (of `types`, default all of `sizes_by_type`) whose nodes can hold the job and whose
    memory (`usable_gb` per type) holds its training step (`peak_gb` per GPU), in order.
    `sizes_by_type=None`: the nodes are unknown, only memory is checked (then `types` must be given)."""
    names = (sizes_by_type or {}) if types is None else types
    usable = usable_gb or {}
    return tuple(t for t in names if (sizes_by_type is None or fits(job, sizes_by_type.get(t, ())))
                 and memory_fits(peak_gb, usable.get(t)))


def node_sizes(nodes: Iterable[tuple[str, int, Collection[str], Collection[str]]], *, constraint: str = "",
               partitions: Collection[str] = (),
               matches: Callable[[str, Collection[str]], bool] | None = None) -> dict[str, tuple[int, ...]]:
    """GPUs per node of each type, counting only the nodes the user's own request reaches.

    `nodes`: (GPU type, GPUs, features, partitions) per node. `constraint`: the user's feature expression
    (msched's GPU-type terms removed), read with Slurm's grammar (`msched.slurm.feature_expr.matches`,
    passed in so this module stays import-free); `partitions`: the job's partition list (empty = any)."""
    if constraint and matches is None:
        from msched.slurm.feature_expr import matches as matches_expr
        matches = matches_expr
    want = {p for p in partitions if p}
    out: dict[str, list[int]] = {}
    for gpu_type, gpus, features, parts in nodes:
        if not gpu_type or gpus <= 0:
            continue
        if want and parts and not want.intersection(parts):
            continue
        if constraint and not matches(constraint, features):
            continue
        out.setdefault(gpu_type, []).append(int(gpus))
    return {t: tuple(sorted(v)) for t, v in out.items()}
