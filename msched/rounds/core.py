"""The round core: Slurm (real or simulated) -> snapshot -> policy.plan -> diff -> only the changes.

One code path for `msched reorder` (cron) and `msched sim` rounds: both hand a `SlurmClient` here.

    result = run_round(client, policy, estimator, now=None, dry_run=False, starvation_age_s=86400.0,
                       gpu_type_of=None, jobs=None, nodes=None)
    if round_due(last.stable_until, now, slurm_changed): ...   # the simulator skips a round only when not

The result carries what the reorderer publishes for msub (`free_time`, clamped) and `stable_until`.

Reading the queue (`build_snapshot`):
- managed = the job carries an msched tag (msub submitted it); everything else is never written but
  counts: unmanaged pending jobs keep their place in the priority order, running ones hold their GPUs;
- pinned = a typed gres (`gpu:a100:2`) or the tag's `pinned` (msub records a user constraint that names
  a GPU type there); pinned jobs may get a new priority but their constraint is never touched;
- in a managed, unpinned job's constraint, pure GPU-type terms are msched's and the rest is the user's
  (`msched.slurm.feature_expr.split`); msched's new types are ANDed with the user's part when written;
- running jobs end at start + estimate on their type, capped by their time limit; without an estimate
  at their time limit, else an hour from now. A job already past its estimate is expected to run a
  quarter of its age longer (at least a minute), not to end "now": planning the next job onto a GPU
  that is visibly still busy puts a waiting job on top of a strictly ordered queue (measured on static
  batches with the real classifier: msched/fifo 0.591 -> 0.573, msched/oracle 1.19 -> 1.16). The
  expectation is revised each time the clock passes it (by a quarter of the age then), not every
  minute: a step function of the clock, so the view stays the same between revisions and the simulator
  can skip those rounds (20,000 jobs on 1,000 GPUs: about half the rounds were due to overdue jobs alone);
- held jobs (priority 0) are left out entirely: writing a priority would release them;
- nodes that are down/drained are left out; GPU types are canonicalised with `gpu_type_of`.

Writing (`diff_plan`, then `apply_updates`): all of a round's changes go to Slurm in one
`client.update_jobs()` call (the command-line backend makes it one squeue and at most two scontrol
processes), features first, then priorities (a job is retyped before it is raised, so it cannot start on
its old type in between). A job that is no longer pending when written (JobNotPending) is skipped and
logged; its other updates are dropped; the rest of the round is written. A job whose value Slurm
refuses outright is skipped the same way, with a warning naming it (the queue is valid: each write is a
whole value on a pending job; the next round plans it again).
Priorities go out as explicit values, or as nice offsets where the site chose `priority_lever = "nice"`;
with `begin_time_lever` on, begin times follow the other writes (msched.policy.reservations decides,
msched.rounds.holds writes them through the hold journal).
`dry_run=True` computes all and writes nothing (`updates` then lists what would be written,
`update_calls` is 0).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import logging
import marshal
import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from msched.estimate.memory import usable_by_type
from msched.policy.feasibility import feasible_types, node_sizes
from msched.policy.snapshot import ClusterSnapshot, NodeState, PendingJob, Plan, RunningJob
from msched.rounds.packing import (  # shard jobs: their GPUs in the snapshot, their pairing (Packing issue)
    packing_round,
    planned_shard_job,
    shard_partitions,
    shard_view,
    with_pairing,
)
from msched.rounds.settle import (
    Incumbent,
    SettleOptions,
    SettleReport,
    deferred,
    head_places,
    incumbent_after,
    replan_head_jobs,
    settle,
    settle_head,
    within_budget,
)
from msched.slurm.base import (
    NICE_LIMIT,
    JobNotPending,
    JobUpdate,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    expand_hostlist,
)
from msched.slurm.feature_expr import ConstraintError, combine, matches, names_gpu_type, split
from msched.tag import JobTag, tag_problem
from msched.util.collector import without_cyclic_gc

log = logging.getLogger("msched.rounds.core")

Estimator = Callable[[SlurmJob, JobTag], dict[str, float]]
UNKNOWN_RUNNING_S = 3600.0
OVERDUE_FRACTION = 0.25       # a job past its estimate is expected to run a quarter of its age longer
OVERDUE_MIN_S = 60.0


@dataclass(frozen=True)
class Update:
    job_id: str
    field: str                 # "features", "partition" or "priority"
    value: int | str
    old: int | str | None = None


@dataclass(frozen=True)
class JobView:
    """What the diff needs of a pending job as Slurm holds it."""

    job_id: str
    priority: int
    features: str
    user_features: str = ""            # the user's part of the constraint (msched's types removed)
    current_types: tuple[str, ...] = ()
    managed: bool = False
    pinned: bool = False
    writable: bool = True              # False: the user's expression cannot be combined (left alone)
    partition: str = ""                # the job's partition list as Slurm holds it
    nice: int = 0                      # the job's nice offset as Slurm holds it (the nice priority lever)


@dataclass(frozen=True)
class TypeLever:
    """How msched steers a pending job's GPU type (config `type_lever`): the feature constraint
    (Slurm's node features name each node's type: SLURM-NOTES), or, where a site gives each GPU type its
    own partition, the job's partition list (`partitions`: GPU type -> partition). In partition mode a
    managed job whose partitions are all type partitions is msched's to move; one the user sent to
    another partition is left alone."""

    kind: str = "feature"
    partitions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config) -> TypeLever:  # noqa: ANN001
        return cls(config.type_lever, tuple(sorted(config.type_partitions.items())))

    @property
    def by_partition(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for t, p in self.partitions:
            out.setdefault(p, []).append(t)
        return {p: tuple(v) for p, v in out.items()}

    def partition_list(self, types: Iterable[str]) -> str:
        mine = dict(self.partitions)
        return ",".join(dict.fromkeys(mine[t] for t in types if t in mine))


FEATURE_LEVER = TypeLever()


@dataclass
class RoundResult:
    time: float
    snapshot: ClusterSnapshot
    plan: Plan
    jobs: list[SlurmJob]
    updates: list[Update] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    plan_seconds: float = 0.0
    update_calls: int = 0
    dry_run: bool = False
    nodes: list[SlurmNode] = field(default_factory=list)
    views: dict[str, JobView] = field(default_factory=dict)
    snapshot_seconds: float = 0.0
    free_time: dict[str, float] = field(default_factory=dict)   # what is published for msub (clamped)
    submit_price: dict[str, float] = field(default_factory=dict)  # published for msub (msched.policy.price)
    stable_until: float = float("inf")   # before then, the same Slurm state gives the same plan
    new_plan: Plan | None = None          # the policy's own plan; `plan` is what the round holds (settle)
    incumbent: Incumbent | None = None    # what msched holds each pending job to after this round
    settle: SettleReport | None = None
    held_back: int = 0                    # jobs whose updates wait for a later round (write budget)
    packing: object = None                # the shard jobs' pairing (msched.policy.packing.PackingPlan)
    begin_times: list = field(default_factory=list)   # begin-time lever writes (msched.policy.reservations)
    exclusions: dict = field(default_factory=dict)    # packing's ExcNodeList writes: job id -> node list


# --------------------------------------------------------------------------------- reading
def _canon(gpu_type_of: Callable[[str], str] | None) -> Callable[[str], str]:
    return gpu_type_of or (lambda name: name.strip().lower())


def build_snapshot(jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode], estimator: Estimator, now: float, *,
                   starvation_age_s: float | None = 86400.0,
                   gpu_type_of: Callable[[str], str] | None = None,
                   changes: list[float] | None = None,
                   lever: TypeLever = FEATURE_LEVER, caches: bool = True,
                   usable_memory: Callable[[set[str]], Mapping[str, float]] = usable_by_type,
                   ) -> tuple[ClusterSnapshot, dict[str, JobView]]:
    """The policy's view of the cluster, and per pending job what the diff needs. `changes`, when given,
    receives the times at which this view would change with the clock alone (see `plan_changes`).

    Within one snapshot, what many jobs share is worked out once (`caches`, on unless a test compares
    against the uncached reading, tests/test_snapshot_caches.py): each constraint's GPU-type reading
    (`_TypeNames`: a queue of 10,000 jobs holds a few dozen distinct constraints) and the feasible types
    of each (constraint, partitions, job shape, memory) (`possible`). `usable_memory`: each known type's
    usable GPU memory (the site's spec table, read anew each call by default; the simulator's replay
    reads it once per replay)."""
    canon = _canon(gpu_type_of)
    node_states, (node_type, known, usable_feats, usable_nodes, static, shard_parts, shards_per_gpu, totals) = \
        _NODES.read(nodes, canon)
    cache: dict[str, tuple[str, ...]] = {}
    sizes_cache: dict[tuple[str, str], dict[str, tuple[int, ...]]] = {}
    feasible_cache: dict[tuple, tuple[str, ...]] | None = {} if caches else None

    usable_gb = usable_memory(known)

    def possible(job: SlurmJob, expr: str, partition: str | None = None,
                 peak_gb: float | None = None) -> tuple[str, ...]:
        """GPU types whose nodes (those the user's features and partitions reach) hold the job's shape
        and whose memory holds its training step (`peak_gb`, the tag's `mem`). The answer depends on
        the job only through its shape (`msched.policy.feasibility.fits`: GPUs, GPUs per node, nodes),
        so it is kept per (constraint, partitions, shape, memory)."""
        partition = job.partition or "" if partition is None else partition
        if feasible_cache is not None:
            shape_key = (expr, partition, job.num_gpus, job.gpus_per_node, job.num_nodes, peak_gb)
            hit = feasible_cache.get(shape_key)
            if hit is not None:
                return hit
        key = (expr, partition)
        sizes = sizes_cache.get(key)
        if sizes is None:
            try:
                sizes = node_sizes(usable_nodes, constraint=expr, partitions=partition.split(","), matches=matches)
            except ConstraintError:
                sizes = {}
            sizes_cache[key] = sizes
        out = feasible_types(job, sizes, peak_gb=peak_gb, usable_gb=usable_gb)
        if feasible_cache is not None:
            feasible_cache[shape_key] = out
        return out

    def known_type(name: str) -> str | None:
        c = canon(name) if name else ""
        return c if c in known else None

    as_type = _TypeNames(known_type, keep=caches)

    def types_matching(expr: str) -> tuple[str, ...]:
        """GPU types with at least one node satisfying the expression (all types for an empty one).

        An expression slurmctld accepted but msched cannot read is taken as one no node satisfies: a
        managed job is then left alone (never rewritten on a guess) and the round goes on for the others.
        """
        hit = cache.get(expr)
        if hit is None:
            try:
                hit = tuple(sorted({t for t, f in usable_feats if not expr or matches(expr, f)}))
            except ConstraintError as exc:
                log.warning("%s; no GPU type taken to satisfy it", exc)
                hit = ()
            cache[expr] = hit
        return hit

    def read_item(job: SlurmJob) -> tuple:
        return _read_job(job, estimator, canon, node_type, as_type, known, types_matching, possible, lever,
                         shard_parts)

    if KEEP_DELTA and caches and getattr(jobs, "changed", None) is not None:
        running, pending, views = _DELTA.read(jobs, now, read_item, changes,
                                              (estimator, gpu_type_of, lever, static, starvation_age_s))
    else:
        running, pending, views = _read_jobs(jobs, now, read_item, changes, starvation_age_s,
                                             _MEMO.start(estimator, gpu_type_of, (lever, static)))
    if not shard_parts and SKIP_SHARDLESS:
        # no partition holds a shard node: no job is a shard job (`is_shard_job`), shard_view's answer
        node_view, running_view, shard_gpus = tuple(node_states), tuple(running), ()
    else:
        node_view, running_view, shard_gpus = shard_view(jobs, node_states, running, estimator, now, canon, shard_parts,
                                                         shards_per_gpu)
    snap = ClusterSnapshot(now=now, nodes=node_view, running=running_view, pending=tuple(pending),
                           starvation_age_s=starvation_age_s, shard_gpus=shard_gpus)
    if KEEP_TOTALS and not shard_parts and SKIP_SHARDLESS:
        # the nodes are the usable GPU nodes as read: their GPUs per type and sorted types, counted once per
        # static reading of the nodes (`_NodeMemo._derive`), entered as the snapshot's own cached values
        snap.__dict__["_gpus_total"], snap.__dict__["gpu_types"] = totals[0], list(totals[1])
    return snap, views


def _read_jobs(jobs: Sequence[SlurmJob], now: float, read_item: Callable[[SlurmJob], tuple],
               changes: list[float] | None, starvation_age_s: float | None, memo: _JobMemo,
               ) -> tuple[list[RunningJob], list[PendingJob], dict[str, JobView]]:
    """`build_snapshot`'s reading of every job (through `memo`, `_JobMemo`): the running jobs' views, the
    pending jobs' and their `JobView`s, in the order of `jobs`."""
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    views: dict[str, JobView] = {}
    read = memo.read
    # a running job whose kept view holds (`_JobMemo.read`'s first case), inline: most jobs of a round
    last, kept_next = (memo._last, memo._next) if memo.keep_items and memo.reuse_running and _JobMemo.inline \
        else ({}, None)
    for job in jobs:
        hit = last.get(id(job))
        if hit is not None and hit[0] is job:
            kept = hit[2]
            if kept is not None and now <= kept[0]:
                kept_next[id(job)] = hit
                if changes is not None and kept[1] is not None:
                    changes.append(kept[1])
                running.append(kept[2])
                continue
        item, rj, changes_at = read(job, now, read_item)
        kind = item[0]
        if kind == _RUNNING:
            if changes is not None and changes_at is not None:
                changes.append(changes_at)
            running.append(rj)
        elif kind == _PENDING:
            _, pj, view = item
            if changes is not None and pj.managed and starvation_age_s is not None:
                starving_at = job.submit_time + starvation_age_s
                if starving_at > now:
                    changes.append(starving_at)
            pending.append(pj)
            views[job.job_id] = view
    memo.finish()
    return running, pending, views


KEEP_TOTALS = True       # a snapshot's GPUs per type and sorted types from the node memo (`_NodeMemo._derive`)
                         # instead of a count over its nodes; off: counted (tests/test_fast_paths.py)
KEEP_DELTA = True        # a job list that carries what changed since the list before it (`changed`, `prev`,
                         # `token`: slurm_sim.client.JobList) is read as that delta against the last
                         # snapshot's readings (`_DeltaMemo`); off: every job looked up (tests/test_fast_paths.py)


class _DeltaMemo:
    """`build_snapshot`'s readings of every job of the last snapshot, kept in the order of its job list and
    updated from the next list's delta (the jobs whose view changed, arrived or left: the simulator's
    `SimClient.jobs`), so a round reads the jobs that changed, and the running jobs whose expected end the
    clock has passed, instead of looking up every job. Each reading is what `_read_jobs` gives the same
    job object at the same clock: a running job's `RunningJob` is kept while its expected end holds (as
    `_JobMemo.read`, from a heap of those ends) and read anew each round when its end moves with the clock;
    a pending job's reading is clock-free. The running jobs are kept as a list in the job list's order
    (each job's rank: a job first seen comes after every kept one, `slurm_sim.client.JobList`), patched
    where a job changed, so a round copies it instead of walking every job. Used only when the list's
    `prev` is the token of the list this memo read last (or that list again: no change), under the same
    estimator, type names, lever, nodes' static reading and starvation age (`context`); else every job of
    the list is read anew (and the delta starts from there)."""

    def __init__(self) -> None:
        self.token: object = object()           # the last list read (a fresh memo matches no list)
        self.context: tuple | None = None
        self.reset()

    def reset(self) -> None:
        self.rank: dict[str, int] = {}          # job id -> its rank in the list (grows with the list's order)
        self.item: dict[str, tuple] = {}        # job id -> (job, its clock-free reading)
        # the running jobs, in the list's order: their ranks (sorted), RunningJobs and change times
        self.run_rank: list[int] = []
        self.run: list[RunningJob] = []
        self.run_change: list[float | None] = []
        # the pending jobs: id -> (PendingJob, JobView, the time it starts to starve or None)
        self.waiting: dict[str, tuple] = {}
        self.ends: list[tuple] = []     # (expected end, rank, seq, id, RunningJob) of the kept views
        self.moving: set[str] = set()           # running jobs whose view moves with the clock: read each round
        self.seq = 0

    def read(self, jobs, now: float, read_item: Callable[[SlurmJob], tuple], changes: list[float] | None,  # noqa: ANN001
             context: tuple) -> tuple[list[RunningJob], list[PendingJob], dict[str, JobView]]:
        """As `_read_jobs` (the same readings, in the same order; `changes` gets the same times, the running
        jobs' first) for a list carrying its delta."""
        if context != self.context or (jobs.prev is not self.token and jobs.token is not self.token):
            self.context = context
            self.reset()
            delta = [(job.job_id, job) for job in jobs]
        else:                           # the list after the one read last, or that one again (nothing changed)
            delta = jobs.changed if jobs.token is not self.token else ()
        self.token = jobs.token
        rank, items, waiting, moving = self.rank, self.item, self.waiting, self.moving
        starvation_age_s = context[4]
        for jid, job in delta:
            waiting.pop(jid, None)
            moving.discard(jid)
            old = items.get(jid)
            if old is not None and old[1][0] == _RUNNING:
                self._unrun(rank[jid])
            if job is None:
                rank.pop(jid, None)
                items.pop(jid, None)
                continue
            if jid not in rank:
                self.seq += 1
                rank[jid] = self.seq
            item = read_item(job)
            items[jid] = (job, item)
            kind = item[0]
            if kind == _RUNNING:
                self._running(jid, job, item, now, False)
            elif kind == _PENDING:
                _, pj, view = item
                starving_at = job.submit_time + starvation_age_s \
                    if pj.managed and starvation_age_s is not None else None
                waiting[jid] = (pj, view, starving_at)
        ends = self.ends
        while ends and ends[0][0] < now:        # a kept view whose expected end the clock passed: read anew
            _, r, _, jid, rj = heapq.heappop(ends)
            k = bisect.bisect_left(self.run_rank, r)
            if k < len(self.run) and self.run_rank[k] == r and self.run[k] is rj:
                job, item = items[jid]
                self._running(jid, job, item, now, True)
        for jid in list(moving):
            job, item = items[jid]
            self._running(jid, job, item, now, True)
        queued = [waiting[jid] for jid in sorted(waiting, key=rank.__getitem__)]     # the few pending, in order
        if changes is not None:
            changes.extend([c for c in self.run_change if c is not None])
            changes.extend([w[2] for w in queued if w[2] is not None and w[2] > now])
        return list(self.run), [w[0] for w in queued], {w[0].job_id: w[1] for w in queued}

    def _unrun(self, r: int) -> None:
        """Take the running job of rank `r` out of the running list."""
        k = bisect.bisect_left(self.run_rank, r)
        if k < len(self.run_rank) and self.run_rank[k] == r:
            del self.run_rank[k], self.run[k], self.run_change[k]

    def _running(self, jid: str, job: SlurmJob, item: tuple, now: float, listed: bool) -> None:
        """A running job's view at `now` (`_JobMemo.read`'s reading of its end), put in the running list
        (`listed`: in place of its view there)."""
        _, hosts, gtype, est = item
        end, changes_at = _end_of(job, est, now)
        rj = RunningJob(job.job_id, gtype, job.num_gpus, end, hosts)
        r = self.rank[jid]
        k = bisect.bisect_left(self.run_rank, r)
        if listed:
            self.run[k], self.run_change[k] = rj, changes_at
        else:
            self.run_rank.insert(k, r)
            self.run.insert(k, rj)
            self.run_change.insert(k, changes_at)
        if end > now and job.start_time is not None and (est is not None or job.time_limit_s):
            self.moving.discard(jid)
            self.seq += 1
            heapq.heappush(self.ends, (end, r, self.seq, jid, rj))
        else:
            self.moving.add(jid)


_DELTA = _DeltaMemo()


class _NodeMemo:
    """What a snapshot reads of the nodes alone, kept from one snapshot to the next: per node object its
    static reading (name, canonical type, GPUs, features, partitions, usable) and its `NodeState`, and
    what the whole static reading gives (each node's type, the known types, the usable nodes' features
    and shapes, the shard partitions, shards per GPU). The simulator hands back the same `SlurmNode` object
    until the node changes (its free GPUs, mostly), and a node's static reading rarely changes, so a round
    reads a handful of nodes instead of all; Slurm's own clients build new objects every round and read
    every node as before. Views are frozen, so an object's reading never changes (the nodes last read are
    held and matched by position and identity). `keep` off: every node read anew (tests/test_fast_paths.py)."""

    keep = True

    def __init__(self) -> None:
        self._canon: Callable | None = None
        self._nodes: list[SlurmNode] = []          # the nodes last read, in order (held: compared by identity)
        self._hits: list[tuple] = []               # per node (static entry, NodeState or None)
        self._states: list[NodeState] = []
        self._static: tuple | None = None
        self._derived: tuple = ()

    def read(self, nodes: Sequence[SlurmNode], canon: Callable[[str], str]) -> tuple[list[NodeState], tuple]:
        """(the usable GPU nodes' states, (node_type, known, usable_feats, usable_nodes, static,
        shard_parts, shards_per_gpu)); `static` is the memo context of the job readings (`_JobMemo.start`).
        Nodes are matched by position and identity: the nodes of the last read that are the same objects
        keep their reading; when every other node's static reading is unchanged too, the rest is kept."""
        last = self._nodes
        if self.keep and canon is self._canon and len(nodes) == len(last):
            hits = self._hits
            moved = [i for i, same in enumerate(map(operator.is_, nodes, last)) if not same]
            if moved:
                hits = list(hits)
                for i in moved:
                    hit = self._hit(nodes[i], canon)
                    if hit[0] != hits[i][0] or (hit[1] is None) != (hits[i][1] is None):
                        break                      # a static change: read all
                    hits[i] = hit
                else:
                    self._nodes, self._hits = list(nodes), hits
                    self._states = [h[1] for h in hits if h[1] is not None]
                    return list(self._states), self._derived
            else:
                return list(self._states), self._derived
        hits = [self._hit(n, canon) for n in nodes]
        static = tuple(h[0] for h in hits)
        if not self.keep or static != self._static:
            self._static, self._derived = static, self._derive(static, nodes)
        self._canon = canon
        self._nodes, self._hits = (list(nodes), hits) if self.keep else ([], [])
        self._states = [h[1] for h in hits if h[1] is not None]
        return list(self._states), self._derived

    def shard_parts(self) -> frozenset[str] | None:
        """The shard partitions of the nodes last read (None: none read yet)."""
        return self._derived[5] if self._derived else None

    @staticmethod
    def _hit(n: SlurmNode, canon: Callable[[str], str]) -> tuple:
        has_gpus = bool(n.gpu_type) and n.gpus > 0
        t = canon(n.gpu_type) if has_gpus else None
        usable = n.usable
        return ((n.name, t, n.gpus, n.features, n.partitions, usable, n.shards_per_gpu),
                NodeState(n.name, t, n.gpus, n.gpus_free) if has_gpus and usable else None)

    @staticmethod
    def _derive(static: tuple, nodes: Sequence[SlurmNode]) -> tuple:
        node_type = {name: t for name, t, *_ in static if t is not None}
        usable = [e for e in static if e[1] is not None and e[5]]
        known = {e[1] for e in usable} | set(node_type.values())
        usable_feats = [(e[1], e[3]) for e in usable]
        usable_nodes = [(e[1], e[2], e[3], e[4]) for e in usable]
        memo_static = tuple((name, node_type.get(name), gpus, feats, parts, ok)
                            for name, _, gpus, feats, parts, ok, _ in static)
        shards_per_gpu = {e[0]: e[6] for e in static if e[6]}
        total: dict[str, int] = {}              # GPUs per type of the usable nodes, as ClusterSnapshot counts them
        for e in usable:
            total[e[1]] = total.get(e[1], 0) + e[2]
        return node_type, known, usable_feats, usable_nodes, memo_static, shard_partitions(nodes), shards_per_gpu, \
            (total, sorted(total))


_NODES = _NodeMemo()
SKIP_SHARDLESS = True    # no shard partition among the nodes: shard_view and packing_round not called (their
                         # answer then: the nodes and running jobs as read, nothing to pair); off: called
                         # (tests/test_fast_paths.py)


_RUNNING, _PENDING, _LEFT_OUT = 0, 1, 2


class _TypeNames:
    """The snapshot's GPU-type names (`as_type`: a feature name -> its canonical GPU type, None for other
    features), with each constraint's reading: `split` (msched's GPU-type terms and the user's part) and
    `named` (every type it names), parsed once per distinct constraint instead of once per job (`keep`;
    off only where a test compares against the uncached reading). Callable as the plain `as_type`."""

    __slots__ = ("_as_type", "_split", "_named")

    def __init__(self, as_type: Callable[[str], str | None], keep: bool = True):
        self._as_type = as_type
        self._split: dict[str, tuple[str, tuple[str, ...]]] | None = {} if keep else None
        self._named: dict[str, tuple[str, ...]] | None = {} if keep else None

    def __call__(self, name: str) -> str | None:
        return self._as_type(name)

    def split(self, expr: str) -> tuple[str, tuple[str, ...]]:
        return self._read(self._split, split, expr)

    def named(self, expr: str) -> tuple[str, ...]:
        return self._read(self._named, names_gpu_type, expr)

    def _read(self, kept: dict | None, read: Callable, expr: str):  # noqa: ANN202
        if kept is None:
            return read(expr, self._as_type)
        hit = kept.get(expr)
        if hit is None:
            hit = kept[expr] = read(expr, self._as_type)
        return hit


def _read_job(job: SlurmJob, estimator: Estimator, canon, node_type: dict[str, str], as_type, known: set[str],  # noqa: ANN001
              types_matching, possible, lever: TypeLever, shard_parts: frozenset[str] = frozenset()) -> tuple:
    """What a round reads of one job that does not depend on the clock: (_RUNNING, hosts, type, estimate
    there), (_PENDING, PendingJob, JobView) or (_LEFT_OUT,) (no GPUs, no known type, held, waiting on a
    dependency, neither pending nor running). A pending shard job is planned as a 1-GPU job
    (msched.rounds.packing.planned_shard_job); running ones are `shard_view`'s."""
    shard = job.num_gpus <= 0
    if shard:
        job = planned_shard_job(job, shard_parts)
        if job is None:
            return (_LEFT_OUT,)
    tag = job.tag
    if tag is None and job.comment:
        problem = tag_problem(job.comment)
        if problem:     # one warning; the job is a plain job for this round (README: Security model)
            log.warning("job %s: tag refused (%s): treated as untagged", job.job_id, problem)
    if job.is_running:
        hosts = tuple(expand_hostlist(job.nodes))
        gtype = canon(job.gpu_type) if job.gpu_type else next((node_type[h] for h in hosts if h in node_type), None)
        if gtype is None:
            return (_LEFT_OUT,)
        return (_RUNNING, hosts, gtype, _estimate_on(job, tag, gtype, estimator))
    if job.is_pending:
        if job.priority <= 0 or job.reason.startswith(("JobHeld", "Dependency")):
            return (_LEFT_OUT,)       # held or waiting on another job: not startable; never write it
        pj, view = _pending(job, tag, estimator, as_type, known, types_matching, possible, lever)
        if shard and tag is not None and tag.added:
            pj, view = _within_packed_types(pj, view, tag.added, canon)
        return (_PENDING, pj, view)
    return (_LEFT_OUT,)


class _JobMemo:
    """The clock-free part of each job's reading (`_read_job`), kept from one snapshot to the next for
    the same job object under the same estimator, type names, lever and nodes (types, sizes, features,
    partitions). The simulator hands back the same `SlurmJob` object until the job changes, so a round
    over an unchanged queue reads only the clock-dependent part (running jobs' expected ends); Slurm's
    own clients build new objects every round and never hit. Entries hold their job, so an id is never
    reused while remembered; only the jobs of the last snapshot are kept."""

    reuse_running = True     # a running job's RunningJob kept while its expected end holds (see `read`)
    inline = True            # build_snapshot takes that case itself, without a call (off: through `read`)
    keep_items = True        # off: every job read anew each snapshot (tests/test_fast_paths.py)

    def __init__(self) -> None:
        self._context: tuple = (None, None, None)
        # id(job) -> (job, item, kept): `item` its clock-free reading, `kept` for a running job whose view
        # holds until its expected end, (end, changes_at, RunningJob), else None; one lookup per job
        self._last: dict[int, tuple] = {}
        self._next: dict[int, tuple] = {}

    def read(self, job: SlurmJob, now: float, read_item: Callable[[SlurmJob], tuple]
             ) -> tuple[tuple, RunningJob | None, float | None]:
        """The job's reading (`_read_job`'s item, from the last snapshot when the same job object was
        read then, else `read_item(job)`) and, for a running job, its view at `now` and when that view
        starts to move with the clock (`_end_of`). The same running job object under the same memo
        context gets the same RunningJob while `now` has not passed its expected end: `_end_of` gives the
        same end for any clock up to it (the overdue revision steps only once the clock passes it), and
        the end never depends on the clock then (`_end_of`'s clock-dependent cases, no estimate and no
        time limit or a time limit already passed, or no start time, are not kept)."""
        key = id(job)
        hit = self._last.get(key) if self.keep_items else None
        if hit is not None and hit[0] is job:
            item, kept = hit[1], hit[2]
        else:
            item, kept = read_item(job), None
        if item[0] != _RUNNING:
            self._next[key] = (job, item, None)
            return item, None, None
        if kept is not None and now <= kept[0] and self.reuse_running:
            self._next[key] = hit
            return item, kept[2], kept[1]
        _, hosts, gtype, est = item
        end, changes_at = _end_of(job, est, now)
        rj = RunningJob(job.job_id, gtype, job.num_gpus, end, hosts)
        holds = end > now and job.start_time is not None and (est is not None or job.time_limit_s)
        self._next[key] = (job, item, (end, changes_at, rj) if holds else None)
        return item, rj, changes_at

    def start(self, estimator: Estimator, gpu_type_of, static: tuple) -> _JobMemo:  # noqa: ANN001
        """Begin a snapshot; what was kept counts only under the same estimator and type names (the
        same objects) and equal `static` (lever and nodes)."""
        est, canon, old = self._context
        if est is not estimator or canon is not gpu_type_of or old != static:
            self._last = {}
        self._context = (estimator, gpu_type_of, static)
        self._next = {}
        return self

    def finish(self) -> None:
        self._last, self._next = self._next, {}


_MEMO = _JobMemo()


def _estimate_on(job: SlurmJob, tag: JobTag | None, gtype: str, estimator: Estimator) -> float | None:
    """The estimator's runtime of a running job on the type it runs on (None: no tag or no estimate)."""
    if tag is None:
        return None
    try:
        return estimator(job, tag).get(gtype)
    except Exception as exc:  # noqa: BLE001 - a bad tag must not stop the round
        log.warning("job %s: no estimate (%s)", job.job_id, exc)
        return None


def _end_of(job: SlurmJob, est: float | None, now: float) -> tuple[float, float | None]:
    """(expected end, the time this expectation starts to move with the clock, or None if never), from
    the job's estimate on the type it runs on (`_estimate_on`; None: its time limit, else an hour)."""
    start = job.start_time if job.start_time is not None else now
    changes_at = None
    if est is None:
        if job.time_limit_s:
            end = start + job.time_limit_s
        else:
            end, changes_at = now + UNKNOWN_RUNNING_S, now
    else:
        end = start + est
        changes_at = end
        while end < now:              # overdue: the estimate was low; it is still running, so not "now":
            end += max(OVERDUE_MIN_S, OVERDUE_FRACTION * (end - start))    # revised each time it is passed
            changes_at = end
        if job.time_limit_s and start + job.time_limit_s <= end:
            end, changes_at = start + job.time_limit_s, None
    return max(now, end), changes_at


def _pending(job: SlurmJob, tag: JobTag | None, estimator: Estimator, as_type, known: set[str], types_matching,
             possible, lever: TypeLever = FEATURE_LEVER):
    gres_type = as_type(job.gres_gpu_type) if job.gres_gpu_type else None
    user_part, msched_types = as_type.split(job.features or "")
    if tag is None:
        named = as_type.named(job.features or "")
        allowed = tuple(dict.fromkeys(((gres_type,) if gres_type else ()) + named))
        if job.features:
            allowed = tuple(t for t in (allowed or types_matching("")) if t in types_matching(job.features))
        pj = PendingJob(job.job_id, job.submit_time, job.num_gpus, job.priority, {}, allowed,
                        pinned_type="|".join(allowed) or None, current_types=(), time_limit_s=job.time_limit_s,
                        managed=False, num_nodes=job.num_nodes, gpus_per_node=job.gpus_per_node)
        return pj, JobView(job.job_id, job.priority, job.features or "", job.features or "", (), False, bool(allowed),
                           nice=job.nice)
    pinned_names = [t for t in (tag.pinned.split("|") if tag.pinned else []) if t]
    pinned_types = tuple(dict.fromkeys(((gres_type,) if gres_type else ())
                                       + tuple(t for t in (as_type(n) for n in pinned_names) if t)))
    pinned = bool(gres_type or pinned_names)
    writable = not pinned and combine(user_part, ("x",)) is not None
    partition_types: tuple[str, ...] | None = None
    if lever.kind == "partition":
        # msched writes no features here: the whole constraint is the user's; the partition list is
        # msched's when every partition in it is a GPU type's own (else the user chose it: left alone)
        user_part, msched_types = job.features or "", ()
        parts = [p for p in (job.partition or "").split(",") if p]
        by_partition = lever.by_partition
        owned = bool(parts) and all(p in by_partition for p in parts)
        if owned:
            partition_types = tuple(t for p in parts for t in by_partition[p])
            msched_types = tuple(t for t in partition_types if t in known)
        writable = not pinned and owned
    if not pinned and not writable:
        # a constraint msched cannot extend: treat whatever types it names as fixed
        pinned_types = as_type.named(job.features or "")
    # the types the rest of the request allows: nodes of the type must satisfy the user's own features
    reach = types_matching(job.features or "") if (pinned or not writable) else types_matching(user_part)
    if pinned or not writable:
        if partition_types is None and lever.kind == "partition" and not pinned:
            pinned_types = tuple(t for t in reach if t in possible(job, ""))   # its own partitions' types
        pinned_types = tuple(t for t in (pinned_types or reach) if t in reach) or pinned_types
    elif user_part:
        if not reach:
            writable = False                    # nothing satisfies the user's part: leave the job alone
            pinned_types = ()

    try:
        est = estimator(job, tag)
    except Exception as exc:  # noqa: BLE001 - a bad tag must not stop the round
        log.warning("job %s: no estimate (%s)", job.job_id, exc)
        est = {}
    fits = possible(job, user_part if not (pinned or not writable) else "",
                    "" if partition_types is not None else None, peak_gb=tag.mem)
    est = bounded_claim({t: v for t, v in est.items() if t in known and t in fits}, job.time_limit_s)
    fixed = pinned or not writable
    if fixed:
        allowed = pinned_types
    elif user_part and len(reach) < len(types_matching("")):
        allowed = reach
    else:
        allowed = ()
    pj = PendingJob(
        job.job_id, job.submit_time, job.num_gpus, job.priority, est,
        allowed_types=allowed,
        pinned_type=("|".join(pinned_types) or "any") if fixed else None,
        current_types=() if fixed else msched_types,
        time_limit_s=job.time_limit_s, managed=True, num_nodes=job.num_nodes,
        group=tag.group, reference=tag.ref, gpus_per_node=job.gpus_per_node,
    )
    view = JobView(job.job_id, job.priority, job.features or "", user_part if not pinned else job.features or "",
                   msched_types if not fixed else (), True, pinned, writable, job.partition or "", job.nice)
    return pj, view


def _within_packed_types(pj: PendingJob, view: JobView, added: str, canon) -> tuple[PendingJob, JobView]:  # noqa: ANN001
    """A pending shard job's types are the ones msub judged it on and packed it for (its tag's `added`):
    on another type it would meet partners no check saw. Without this the planner moved such jobs (seen
    in bench_packing, seed 10: two LM jobs packed for the V100 only were sent to a P100 by the planner
    and shared one there at 0.45x solo). When the request reaches none of them (the owner's own features,
    set since, match only nodes of other types) the job is pinned where its request sends it now: msched
    writes no type on it, so it never moves a shard job off its packed types, nor among the others."""
    from dataclasses import replace

    packed = [canon(t) for t in added.split("|") if t]
    if not packed:
        return pj, view
    allowed = [t for t in (pj.allowed_types or packed) if t in packed]
    if allowed:
        return replace(pj, allowed_types=tuple(allowed)), view
    here = tuple(t for t in pj.allowed_types if t in pj.current_types) or pj.allowed_types
    return (replace(pj, allowed_types=here, pinned_type="|".join(here), current_types=()),
            replace(view, pinned=True, current_types=()))


def bounded_claim(est: dict[str, float], time_limit_s: float | None) -> dict[str, float]:
    """A tag is its owner's claim; Slurm enforces only the time limit. So whatever the estimator made of
    the claim, a job is never planned as longer than its limit: a type where the estimate exceeds it is
    dropped (the job would be killed there), and where it exceeds it on every type the work is cut to
    what fits in the limit on the fastest one (README: Security model)."""
    if not time_limit_s or not est:
        return est
    fastest = min(est.values())
    if fastest > time_limit_s:
        scale = time_limit_s / fastest
        est = {t: v * scale for t, v in est.items()}
    return {t: v for t, v in est.items() if v <= time_limit_s * (1 + 1e-9)}


# --------------------------------------------------------------------------------- diffing
def diff_plan(views: Iterable[JobView] | dict[str, JobView], plan: Plan,
              lever: TypeLever = FEATURE_LEVER, priority_lever: str = "priority") -> list[Update]:
    """The updates that bring Slurm to the plan: the type lever (features, or the partition list on a
    site that steers types by partition) first, then priorities.

    Only managed jobs are ever written; pinned ones and ones whose constraint cannot be extended keep
    their constraint; a constraint that already names the planned types (in any order or form) is not
    rewritten. With `priority_lever="nice"` (config `priority_lever`) the planned priority is written as
    a nice offset (`nice_for`) instead of an explicit priority, which would freeze multifactor's age
    and fair-share for the job."""
    by_id = views if isinstance(views, dict) else {v.job_id: v for v in views}
    feats: list[Update] = []
    prios: list[Update] = []
    for d in plan.decisions:
        v = by_id.get(d.job_id)
        if v is None or not v.managed:
            continue
        if d.gpu_types and not v.pinned and v.writable and set(d.gpu_types) != set(v.current_types):
            if lever.kind == "partition":
                parts = lever.partition_list(d.gpu_types)
                if parts and parts != v.partition:
                    feats.append(Update(d.job_id, "partition", parts, v.partition))
            else:
                expr = combine(v.user_features, list(d.gpu_types))
                if expr is not None and expr != v.features:
                    feats.append(Update(d.job_id, "features", expr, v.features))
        if d.priority != v.priority and d.priority >= 1:
            if priority_lever == "nice":
                nice = nice_for(v.priority, v.nice, int(d.priority))
                if nice != v.nice:
                    prios.append(Update(d.job_id, "nice", nice, v.nice))
            else:
                prios.append(Update(d.job_id, "priority", int(d.priority), v.priority))
    return feats + prios


def nice_for(priority: int, nice: int, target: int) -> int:
    """The nice offset that moves a job Slurm shows at `priority` (with offset `nice`) to `target`:
    Slurm's priority is the plugin's value minus nice, so the plugin's own value is priority + nice and
    the new offset is that minus the target, bounded to Slurm's range (msched.slurm.base.NICE_LIMIT)."""
    return max(-NICE_LIMIT, min(NICE_LIMIT, priority + nice - target))


def apply_updates(client: SlurmClient, updates: Sequence[Update]) -> tuple[list[Update], list[str], int]:
    """Write the updates in one `client.update_jobs()` call; (applied, skipped job ids, update calls).

    update calls count each change written plus one failed attempt per job that failed (what one call
    per change made before batching). A job Slurm did not update is skipped for this round: one that
    is no longer pending (it started or ended), or one whose new value Slurm refused (a warning names
    it; e.g. a feature removed from the nodes since the plan). Failing the round instead would let one
    such job stop every later round, while the other jobs' writes stand and are whole either way."""
    priority: dict[str, int] = {}
    features: dict[str, str] = {}
    partition: dict[str, str] = {}
    nice: dict[str, int] = {}
    for u in updates:
        if u.field == "priority":
            priority[u.job_id] = int(u.value)
        elif u.field == "nice":
            nice[u.job_id] = int(u.value)
        elif u.field == "partition":
            partition[u.job_id] = str(u.value)
        else:
            features[u.job_id] = str(u.value)
    batch = [JobUpdate(job_id, priority=priority.get(job_id), features=features.get(job_id),
                       partition=partition.get(job_id), nice=nice.get(job_id))
             for job_id in dict.fromkeys(u.job_id for u in updates)]
    results = {r.job_id: r for r in client.update_jobs(batch)} if batch else {}
    applied = [u for u in updates if u.field in results[u.job_id].applied]
    skipped: list[str] = []
    for r in results.values():
        if r.error is None:
            continue
        if isinstance(r.error, JobNotPending):
            log.info("job %s is no longer pending: skipped", r.job_id)
        else:
            log.warning("job %s: Slurm refused the update, skipped this round: %s", r.job_id, r.error)
        skipped.append(r.job_id)
    return applied, skipped, len(applied) + len(skipped)


# --------------------------------------------------------------------------------- the round
@without_cyclic_gc
def run_round(client: SlurmClient, policy, estimator: Estimator, *, now: float | None = None,  # noqa: ANN001
              dry_run: bool = False, starvation_age_s: float | None = 86400.0,
              gpu_type_of: Callable[[str], str] | None = None,
              jobs: list[SlurmJob] | None = None, nodes: list[SlurmNode] | None = None,
              incumbent: Incumbent | None = None, settle_options: SettleOptions | None = None,
              lever: TypeLever = FEATURE_LEVER, begin_times=None, journal=None,  # noqa: ANN001
              priority_lever: str = "priority", pack_guard: str = "bound", pack_exclude: bool = False,
              exclusion_journal=None,  # noqa: ANN001
              usable_memory: Callable[[set[str]], Mapping[str, float]] = usable_by_type) -> RoundResult:
    """One round, the entry point of the real reorderer and of the simulator alike: read once, plan,
    keep of the plan what is worth its writes against the incumbent (`msched.rounds.settle`), write
    only what changes, within the write budget. The result carries the free time to publish for msub
    (`free_time`, each type clamped to now) and until when the same Slurm state would give the same
    plan (`stable_until`: see `round_due`). Slurm errors other than JobNotPending propagate (every
    single write leaves a valid queue; the next round re-plans). `incumbent` is the previous round's
    `result.incumbent` (None: none known, the plan is written as it stands). `begin_times` (a
    `msched.policy.reservations.BeginTimeOptions`, off unless enabled) adds the begin-time lever after
    the other writes, each recorded in the hold `journal` first (msched.rounds.holds.apply_begin_times).
    `pack_guard`: the packing guard for the shard jobs' pairing (config `pack_guard`); `pack_exclude` (config
    `pack_exclude`): pending shard jobs are kept off the nodes of bad partners (ExcNodeList, written
    before the priorities through `exclusion_journal`: the hold journal, or a function that opens it,
    called only when there is a pairing; msched.rounds.holds.apply_exclusions). `usable_memory`: as
    `build_snapshot`'s."""
    if jobs is None:
        jobs = client.jobs()
    if nodes is None:
        nodes = client.nodes()
    if now is None:
        now = client.now()
    t0 = time.perf_counter()
    changes: list[float] = []
    snap, views = build_snapshot(jobs, nodes, estimator, now, starvation_age_s=starvation_age_s,
                                 gpu_type_of=gpu_type_of, changes=changes, lever=lever, usable_memory=usable_memory)
    t1 = time.perf_counter()
    opts = settle_options or SettleOptions()
    objective_for = getattr(policy, "objective_for", None)      # balanced plans a batch for the makespan
    objective = objective_for(snap) if objective_for is not None else getattr(policy, "objective", "makespan")
    how = {"objective": objective, "backfill": bool(getattr(policy, "backfill", False)),
           "starvation_age_s": getattr(policy, "starvation_age_s", None),
           "job_margin": opts.job_margin if opts.job_margin is not None else float(getattr(policy, "hysteresis", 0.05)),
           "options": opts, "unknown_runtime_s": float(getattr(policy, "unknown_runtime_s", 3600.0)),
           "managed_first": bool(getattr(policy, "managed_first", False))}
    head = replan_head_jobs(snap, incumbent, opts.replan_head, how["starvation_age_s"])
    headed = settle_head(snap, policy.plan, incumbent, head, **how) if head is not None else None
    if headed is not None:              # only the head planned anew, the incumbent's tail kept (settle 7.)
        plan, new_plan, report = headed
    else:
        new_plan = policy.plan(snap)
        plan, report = settle(snap, new_plan, incumbent, **how)
    t2 = time.perf_counter()
    wanted = diff_plan(views, plan, lever, priority_lever)
    wait, priority_only = deferred(snap, plan, head_places(snap, opts.head_gpus))
    if wait or priority_only:           # far from the head: written as the job nears it (settle.deferred)
        wanted = [u for u in wanted if u.job_id not in wait and
                  (u.job_id not in priority_only or u.field in ("priority", "nice"))]
    shard_updates, packing = packing_round(jobs, nodes, estimator, gpu_type_of, planned=wanted, guard=pack_guard,
                                           exclude=pack_exclude) \
        if priority_lever == "priority" and not (SKIP_SHARDLESS and not _NODES.shard_parts()) \
        else ([], None)        # the Packing issue (explicit priorities); no shard partition: nothing to pair
    wanted = with_pairing(wanted, shard_updates, packing)
    updates, waiting = within_budget(wanted, opts.write_budget, report.relative)
    result = RoundResult(time=now, snapshot=snap, plan=plan, jobs=list(jobs), updates=updates,
                         plan_seconds=t2 - t1, dry_run=dry_run, nodes=list(nodes), views=views,
                         snapshot_seconds=t1 - t0, new_plan=new_plan, settle=report, held_back=waiting,
                         free_time=published_free_time(plan, snap), packing=packing,
                         # updates held back by the write budget make the next round due at once
                         stable_until=(now if waiting else min(changes, default=float("inf")))
                         if snap.pending else float("inf"))
    report.held_back += waiting
    result.submit_price = policy_prices(policy, jobs, estimator, now, snap.gpu_types, gpu_type_of)
    if packing is not None and packing.excluded:     # before the priorities that would start a job there
        from msched.rounds.holds import apply_exclusions
        ex_journal = exclusion_journal() if callable(exclusion_journal) else exclusion_journal
        result.exclusions, skipped = apply_exclusions(client, packing.excluded, jobs, ex_journal, dry_run=dry_run)
        ex_calls = 0 if dry_run else len(result.exclusions) + len(skipped)
    else:
        ex_calls = 0
    if not dry_run and updates:
        if journal is not None and priority_lever == "nice":
            from msched.rounds.holds import record_nice_originals
            record_nice_originals(journal, [u for u in updates if u.field == "nice"])
        result.updates, result.skipped, result.update_calls = apply_updates(client, updates)
    result.update_calls += ex_calls
    if begin_times is not None and begin_times.enabled:
        _begin_time_lever(client, result, jobs, plan, begin_times, journal, policy)
    written = {u.job_id for u in result.updates}
    not_written = {u.job_id for u in wanted} - written if not dry_run else set()
    result.incumbent = incumbent_after(snap, incumbent, plan, report, not_written | set(result.skipped))
    return result


def _begin_time_lever(client: SlurmClient, result: RoundResult, jobs: Sequence[SlurmJob], plan: Plan,
                      options, journal, policy) -> None:  # noqa: ANN001
    """The begin-time lever's part of a round: decide (msched.policy.reservations), then write through the
    hold journal (msched.rounds.holds) unless this is a dry run."""
    import dataclasses

    from msched.policy.reservations import begin_time_changes
    from msched.rounds.holds import apply_begin_times, begin_time_owners

    options = dataclasses.replace(options, backfill=bool(getattr(policy, "backfill", True)))
    ours, foreign = begin_time_owners(jobs, journal, result.time)
    changes = begin_time_changes(result.snapshot, plan, ours=ours, foreign=foreign, options=options,
                                 unknown_runtime_s=float(getattr(policy, "unknown_runtime_s", 3600.0)))
    if result.dry_run or not changes:
        result.begin_times = changes
        return
    result.begin_times, skipped = apply_begin_times(client, changes, journal)
    result.update_calls += len(result.begin_times) + len(skipped)


def policy_prices(policy, jobs: Sequence[SlurmJob], estimator: Estimator, now: float, gpu_types: Sequence[str],  # noqa: ANN001
                  gpu_type_of: Callable[[str], str] | None = None) -> dict[str, float]:
    """The submit prices the round publishes for msub (`msched.policy.price.round_prices`) when the
    policy sets a `price_quantile` (off by default: {})."""
    quantile = getattr(policy, "price_quantile", None)
    if quantile is None:
        return {}
    from msched.policy.price import DEFAULT_WINDOW_S, round_prices

    return round_prices(jobs, estimator, now, gpu_types, quantile,
                        getattr(policy, "price_window_s", None) or DEFAULT_WINDOW_S, canon=gpu_type_of,
                        measure=getattr(policy, "price_measure", "saving"))


def published_free_time(plan: Plan | None, snapshot: ClusterSnapshot) -> dict[str, float]:
    """The plan's projected free time per GPU type, for msub: types the plan does not mention are free
    now, and no type is free before now."""
    now = snapshot.now
    free = dict(getattr(plan, "free_time", {}) or {}) if plan is not None else {}
    for t in snapshot.gpus_total:
        free.setdefault(t, now)
    return {t: max(float(v), now) for t, v in free.items()}


def slurm_state_key(jobs: Iterable[SlurmJob], nodes: Iterable[SlurmNode], setup: str = "") -> str:
    """A digest of all a round reads of Slurm (every field of every job and node but a pending job's
    free-text reason, of which only whether it is held or waiting on a dependency counts), with `setup`
    (what else the plan depends on: configuration, tables, scheduler). The same key and a clock before
    the last round's `stable_until` mean the same plan (`round_due`): the reorderer, a new process each
    round, keeps the key in the store to skip re-planning an unchanged queue."""
    h = hashlib.blake2b(digest_size=16)
    h.update(setup.encode())
    for n in sorted(nodes, key=lambda n: n.name):
        h.update(repr((n.name, n.gpu_type, n.gpus, n.gpus_alloc, n.features, n.state, n.partitions)).encode())
    # the jobs' fields in marshal's format 2 (by value alone: no references to repeated objects, strings
    # interned or not alike), one call for the whole queue: a repr of each job's fields cost ~35 ms of CPU
    # at 10,000 jobs, most of `state key` in an event round (issue 21, sixteenth pass)
    h.update(marshal.dumps([(j.job_id, j.state, j.name, j.user, j.partition, j.priority, j.submit_time, j.start_time,
                             j.end_time, j.time_limit_s, j.num_nodes, j.num_gpus, j.gpus_per_node, j.gres_gpu_type,
                             j.features, j.comment, j.nodes, j.gpu_type,
                             j.reason.startswith(("JobHeld", "Dependency")), j.admin_comment, j.nice, j.begin_time)
                            for j in sorted(jobs, key=_JOB_ID)], 2))
    return h.hexdigest()


_JOB_ID = operator.attrgetter("job_id")


def round_due(stable_until: float, now: float, changed: bool) -> bool:
    """Could a round now plan differently from the last one (whose `stable_until` is given)? When
    Slurm's state changed since it read it, or when the clock alone changes the plan: a managed job
    reaching the starvation age, a running job passing its estimated end, one already past it (its
    expected end moves with the clock)."""
    return changed or now >= stable_until


def round_policy(name: str = "msched", *, objective: str = "balanced", starvation_age_s: float | None = 86400.0,
                 backfill: bool = False, **opts):  # noqa: ANN201 - a Policy
    """The policy a round runs, built the same way for the reorderer (from the site config and Slurm's
    scheduler) and for the simulator (from its setup): one place for the objective and the guards."""
    from msched.policy import get_policy

    return get_policy(name, objective=objective, starvation_age_s=starvation_age_s, backfill=backfill, **opts)


def release(client: SlurmClient, *, jobs: list[SlurmJob] | None = None,
            gpu_type_of: Callable[[str], str] | None = None, nodes: list[SlurmNode] | None = None,
            journal=None) -> list[str]:  # noqa: ANN001 - journal: msched.store.holds.HoldJournal
    """Hand every managed pending job back to Slurm: drop msched's GPU-type terms from its constraint
    (keeping the user's own; nothing is touched on pinned jobs) and let Slurm recompute its priority.

    Slurm has no "forget the priority I set" update: `scontrol update priority=N` sets a fixed value
    and marks it as set by hand. Holding and releasing the job does it: release recomputes the priority
    from the site's priority plugin (checked on 22.05.8: priority=12345, hold, release -> 1, the
    multifactor value of the dev cluster). Crash safety: with a `journal`, every job to be held is
    recorded (one transaction) before the first hold and closed after its release, so a process killed
    at any step leaves open entries that the next round or `--release` replays (msched.rounds.holds); a
    failed or interrupted release (SIGTERM arrives as KeyboardInterrupt) is retried once before the
    exception goes on. A job that started in between is skipped. Jobs held by someone else (priority
    0) are left alone. Returns the ids of the released jobs."""
    if jobs is None:
        jobs = client.jobs()
    if nodes is None:
        try:
            nodes = client.nodes()
        except Exception:  # noqa: BLE001 - without nodes, any name a tag or gres uses counts as a type
            nodes = []
    canon = _canon(gpu_type_of)
    node_types = {canon(n.gpu_type) for n in nodes if n.gpu_type}

    targets: list[tuple[SlurmJob, str | None]] = []
    for job in jobs:
        tag = job.tag
        if tag is None or not job.is_pending or job.priority <= 0:
            continue
        known = node_types | {canon(t) for t in tag.added.split("|") if t}

        def as_type(name: str, known: set[str] = known) -> str | None:
            c = canon(name) if name else ""
            return c if c in known else None

        new_features = None
        if not (job.gres_gpu_type or tag.pinned) and job.features:
            user_part, types = split(job.features, as_type)
            if types and user_part != job.features:
                new_features = user_part
        targets.append((job, new_features))
    entry: dict[str, int] = {}
    if journal is not None and targets:
        ids = journal.record_holds([(j.job_id, "hold", "", "reorder --release: hold+release resets the priority")
                                    for j, _ in targets])
        entry = {j.job_id: i for (j, _), i in zip(targets, ids, strict=True)}
    finished: list[str] = []          # journal entries to close: released, or gone in between
    try:
        done = _hold_and_release(client, targets, finished)
    finally:
        if entry and finished:
            journal.close([entry[j] for j in finished], "released")
    return done


def _hold_and_release(client: SlurmClient, targets: list[tuple[SlurmJob, str | None]],
                      finished: list[str]) -> list[str]:
    """`release`'s writes in three passes: drop the type terms (one batch), hold every job, release
    every job (one scontrol each on the command line). Holding all before releasing any means no
    managed job can start out of turn in between: released one at a time, a job already back on
    Slurm's priority could start ahead of a higher one still waiting for its hold and release (seen on
    the dev cluster). Releases go oldest submission first, the order Slurm's own priorities mostly give
    back. Jobs that started or ended in between are skipped (appended to `finished`); a job Slurm
    refuses does not stop the others, and raises SlurmError at the end, its journal entry still open."""
    retype = [JobUpdate(job.job_id, features=f) for job, f in targets if f is not None]
    trouble: list[str] = []
    for r in client.update_jobs(retype) if retype else []:
        if r.error is not None and not isinstance(r.error, JobNotPending):
            log.warning("job %s: type terms kept (%s); its priority is still handed back", r.job_id, r.error)
    order = [job.job_id for job in sorted((job for job, _ in targets), key=lambda job: job.submit_time)]
    try:
        refused = client.hold_many(order)
    except BaseException:
        client.release_many(order)          # never leave a job held by msched: release all that may be
        raise
    held = [j for j in order if j not in refused]
    for job_id, exc in refused.items():
        if isinstance(exc, JobNotPending):
            log.info("job %s started during release: skipped", job_id)
            finished.append(job_id)
        else:
            trouble.append(f"job {job_id}: hold refused ({exc})")
    try:
        refused = client.release_many(held)
    except BaseException:
        client.release_many(held)           # one retry (SIGTERM arrives as KeyboardInterrupt)
        raise
    failed = [j for j, e in refused.items() if not isinstance(e, JobNotPending)]
    if failed:                                      # one retry
        refused = {j: e for j, e in refused.items() if j not in failed} | client.release_many(failed)
    done = [j for j in held if j not in refused]
    finished.extend(done)
    for job_id, exc in refused.items():
        if isinstance(exc, JobNotPending):
            finished.append(job_id)
        else:
            trouble.append(f"job {job_id}: release refused ({exc})")
    if trouble:
        raise SlurmError(f"{len(trouble)} job(s) not handed back: {'; '.join(trouble[:3])}")
    return done
