"""The policy's view of the cluster: plain frozen dataclasses, no Slurm, no SQL, no CLI.

The round core (`msched.rounds.core`) builds a `ClusterSnapshot` from whatever `SlurmClient` it is given
(real or simulated); a `Policy` turns it into a `Plan`; the round core diffs the plan against what Slurm
holds and applies only the changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

_EST_END = attrgetter("est_end")


@dataclass(frozen=True)
class NodeState:
    name: str
    gpu_type: str
    gpus: int
    gpus_free: int


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    gpu_type: str
    num_gpus: int
    est_end: float              # absolute time (the snapshot's clock); past estimates are clamped to `now`
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShardGpu:
    """One GPU that shard jobs share (gres/shard, the Packing issue). Slurm shows shard jobs with no
    GPUs, so the round adds this view: which jobs hold the GPU, when it frees (its last job's estimated
    end) and how many of its shards are open (a 1-shard job would join it before taking a free GPU)."""

    node: str
    gpu_type: str
    jobs: tuple[str, ...]
    est_end: float
    shards: int = 2
    speeds: tuple[float | None, ...] = ()   # each job's predicted own/solo speed beside the other (a pair)
    held: int = 0                     # shards its jobs hold (0: one each): a 2-shard job fills a 2-shard GPU

    @property
    def open_shards(self) -> int:
        return max(0, self.shards - (self.held or len(self.jobs)))


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    submit_time: float
    num_gpus: int
    priority: int = 0                           # what Slurm holds now
    est_runtime_s: Mapping[str, float] = field(default_factory=dict)  # per feasible GPU type; {} = unknown
    allowed_types: tuple[str, ...] = ()         # types the request allows (pins and user constraints applied)
    pinned_type: str | None = None              # the user chose this type: keep it
    current_types: tuple[str, ...] = ()         # the GPU types msched's constraint names now (() = any)
    time_limit_s: float | None = None
    managed: bool = True                        # submitted through msub (carries a tag)
    num_nodes: int = 1
    group: str = ""
    reference: str = ""
    gpus_per_node: int | None = None            # a fixed per-node count (--gres); None = may spread


@dataclass(frozen=True)
class ClusterSnapshot:
    now: float
    nodes: tuple[NodeState, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    starvation_age_s: float | None = None       # pending longer than this: first, widened (None = no guard)
    shard_gpus: tuple[ShardGpu, ...] = ()       # GPUs shard jobs hold (also in `running`, one entry per GPU)

    @cached_property
    def gpu_types(self) -> list[str]:
        """Sorted; computed once per snapshot (the planner asks for it in every decode)."""
        return sorted({n.gpu_type for n in self.nodes})

    @cached_property
    def running_end(self) -> float:
        """When the last running job is expected to end (never before now): every plan's makespan is at
        least this, and scoring a plan asks for it once per decode."""
        return max(self.now, max(map(_EST_END, self.running), default=self.now))

    @property
    def gpus_total(self) -> dict[str, int]:
        """GPUs per type (a fresh dict each time; counted once per snapshot: settle and the bound ask
        for it every round)."""
        return dict(self._gpus_total)

    @cached_property
    def _gpus_total(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for n in self.nodes:
            c[n.gpu_type] += n.gpus
        return dict(c)

    @property
    def shards_free(self) -> dict[str, int]:
        """Open shards per GPU type: where a 1-shard job starts at once, beside a job already there."""
        c: Counter[str] = Counter()
        for g in self.shard_gpus:
            c[g.gpu_type] += g.open_shards
        return {t: k for t, k in c.items() if k}

    @property
    def gpus_free(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for n in self.nodes:
            c[n.gpu_type] += n.gpus_free
        return dict(c)

    def submitted_together(self, share: float) -> bool:
        """Whether the managed pending jobs are a batch: at least `share` of them, two or more, share one
        submit time (a static batch, not an online queue)."""
        times = Counter(j.submit_time for j in self.pending if j.managed)
        largest = max(times.values(), default=0)
        return largest >= 2 and largest >= share * sum(times.values())


@dataclass(frozen=True)
class JobDecision:
    """What the plan wants for one pending managed job."""

    job_id: str
    priority: int
    gpu_types: tuple[str, ...]      # the GPU-type constraint to hold: one type, several (starving/widened), () = leave
    est_start: float | None = None
    est_end: float | None = None
    est_runtime_s: Mapping[str, float] = field(default_factory=dict)


def decision_at(job_id: str, priority: int, gpu_types: tuple[str, ...], est_start: float | None,
                est_end: float | None, est_runtime_s: Mapping[str, float]) -> JobDecision:
    """`JobDecision(...)` of every field, entered straight into the instance's dict: the frozen dataclass's
    __init__ sets each through `object.__setattr__` (~1.07 us against ~0.38 us; a plan and a settled plan
    make one per managed job, ~8,000 each at 10,000 pending). The same frozen instance, equal, hashed
    and shown alike (tests/test_fast_paths.py)."""
    d = object.__new__(JobDecision)
    x = d.__dict__
    x["job_id"] = job_id
    x["priority"] = priority
    x["gpu_types"] = gpu_types
    x["est_start"] = est_start
    x["est_end"] = est_end
    x["est_runtime_s"] = est_runtime_s
    return d


@dataclass
class Plan:
    policy: str
    decisions: list[JobDecision] = field(default_factory=list)
    est_makespan_end: float | None = None        # estimated time the last planned job ends (absolute)
    free_time: dict[str, float] = field(default_factory=dict)   # projected time each GPU type frees up (absolute)
    # the measure the plan was made for, as settle weighs its moves (msched.rounds.settle 4.): "allowance"
    # (the mean end while the makespan end is within `makespan_slack_s` of this plan's, the makespan first
    # past it: balanced's short-first batch plan, msched.policy.planner); None: the round's objective
    measure: str | None = None
    makespan_slack_s: float = 0.0
    # pending jobs whose new types settle must write whatever the evaluation says they gain or lose (the
    # plan knows something its model of Slurm does not: msched.policy.drain)
    obliged: frozenset[str] = frozenset()
    # per GPU type, the earliest free time the plan publishes for msub whatever a held plan's evaluation says
    # (msched.policy.drain: a type kept for waiting whole-node jobs)
    free_floor: dict[str, float] = field(default_factory=dict)

    def floored(self, free: Mapping[str, float]) -> dict[str, float]:
        """`free` (free times per type) raised to this plan's `free_floor`."""
        out = dict(free)
        for t, v in self.free_floor.items():
            out[t] = max(out.get(t, v), v)
        return out

    def by_job(self) -> dict[str, JobDecision]:
        return {d.job_id: d for d in self.decisions}
