"""A discrete-event simulator of a Slurm cluster whose nodes carry typed GPUs (docs/backfill.md says
which parts of Slurm's scheduling it models and which it does not).

What it models, and why (the rules msched's planner has to live with on a real cluster):
- Nodes have a GPU type, a GPU count, features (the type is one of them) and partitions (a node may be
  in several). A job names one or more partitions (none: the default one) and runs in one of them.
- Pending jobs are ordered by priority (high first), then submit time, then submission order.
- The main scheduler (both SchedulerTypes) is strict per partition: it walks the queue and, at the first
  job that cannot start now, marks that job's partitions blocked; no later job starts on their nodes in
  this pass, even a job that wants other, idle types there. With one partition it stops at the first
  blocked job. Held jobs, jobs waiting on a dependency and jobs whose constraint no node can ever
  satisfy are passed over (Slurm does not let them block the partition).
- sched/backfill (Slurm's default, and the simulator's): every `bf_interval` seconds (while something is
  blocked) a backfill pass walks the first `bf_max_job_test` pending jobs in priority order, gives each
  blocked job a reservation at its earliest possible start within `bf_window` and starts lower jobs now
  only where they end (by their *time limit*, which is all Slurm knows; jobs without one get their
  partition's DefaultTime) before they would delay a reservation. sched/builtin: the main scheduler only.
- A job runs on one node, or on whole nodes of one size and type (k x GPUs-per-node GPUs).
- A job runs for iterations x the true iteration time of its model on the type it got (the truth
  table's fill rules). A model job is refused at submit when the truth has no data for it on a type it
  could be sent to (its shape, pin and partitions allow it): nothing is silently parked. A job is killed
  at its time limit (state TIMEOUT), as Slurm does; a requested limit above every one of the job's
  partitions' MaxTime is refused at submit (EnforcePartLimits=ALL).
- Dependencies (`afterok`/`afterany` on earlier jobs): the job is not startable until they end; an
  `afterok` whose job did not complete cancels the dependent (kill_invalid_depend).
- Begin times (`scontrol update StartTime=`, msched's begin-time lever): before it a job is passed over
  by both passes, gets no backfill reservation and blocks nothing (Slurm's job_independent() leaves it out
  of the queues, reason BeginTime); at its begin time it joins the queue by itself.
- Requeue (`scontrol requeue`, `Simulator.requeue`): a running job back to pending, to start again from its
  beginning (docs/backfill.md).

Speed: an event heap (job ends, backfill wake-ups); a lazily rebuilt priority heap of pending jobs so
the strict pass costs O(jobs started + 1) per event; per node-class counters of nodes by free GPUs so
"can this job start now" is O(GPUs per node) per class; jobs' `SlurmJob` views are cached and rebuilt
only when the job changes; `version` changes only when the pending/running sets change, so callers
can skip rounds that would see the same snapshot.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
from dataclasses import dataclass, field
from functools import cached_property

from msched.estimate.perf_table import PerfTable
from msched.slurm.base import PENDING, RUNNING, SlurmJob, SlurmNode
from msched.slurm.feature_expr import ConstraintError, compile_constraint, feature_names
from msched.tag import parse_comment
from slurm_sim.cluster import DEFAULT_PARTITION, ClusterSpec, with_scheduler
from slurm_sim.packing import SHARD_FEATURE, SHARDS_PER_GPU

PARTITION = DEFAULT_PARTITION
DEPENDENCY_KINDS = ("afterok", "afterany")
BASE_PRIORITY = 4_294_901_759        # priority/basic: the first job's priority, then one less per job
_SLEEP = re.compile(r"^\s*sleep\s+(\d+(?:\.\d+)?)\s*$")
_END, _WAKE, _BEGIN = 0, 1, 2
# Node counts in constraints (`[a*2&b*1]`) are refused: a job here runs on nodes of one class, so a split
# across features cannot be honoured, and msched never writes counts. The round core reads them (ignoring
# the count) with the same parser, msched.slurm.feature_expr.
_COUNTS = "refuse"
# backfill builds each node's free-GPU profile from the running jobs in one sorted pass rather than by one
# insertion per job (the same step functions: tests/test_fast_paths.py compares replays with it off)
ONE_PASS_PROFILES = True
LAZY_PROFILES = True      # with KEPT_ENDS: a node's profile built when a job of the pass first looks at the node, not
                          # every node's at the pass's start (off: all at the start; tests/test_fast_paths.py)
KEPT_ENDS = True          # backfill's node profiles from each node's running jobs' limit ends, kept sorted as jobs
                          # start and end (`Simulator._ends`), instead of a pass over every active job; off:
                          # that pass (tests/test_fast_paths.py). Without shard jobs only (their GPUs follow
                          # the pairing).
STOP_AT_NOW = True        # backfill's search for a job's earliest start stops at the first node (in the order it
                          # looks) that starts it now: no later node or class can start it sooner, and a tie keeps the
                          # first; the nodes not looked at keep their lazy profiles (off: every node looked at;
                          # tests/test_fast_paths.py)


@dataclass(frozen=True)
class SimSlurmJob(SlurmJob):
    """squeue's view of a simulated job. The tag is parsed once per view (views are cached until
    the job changes), since every round reads every job's tag."""

    @cached_property
    def tag(self):  # noqa: D102 - same meaning as SlurmJob.tag
        return parse_comment(self.comment)[0]


@dataclass(frozen=True)
class SimSlurmNode(SlurmNode):
    """sinfo's view of a simulated node: simulated nodes never go down or drain."""

    @property
    def usable(self) -> bool:
        return True

    @property
    def gpus_free(self) -> int:
        return self.gpus - self.gpus_alloc


class SimError(ValueError):
    """A request the simulated controller refuses (as sbatch/scontrol would); one-line message."""


@dataclass(eq=False)
class SimJob:
    """A job inside the simulator (mutable; callers see `SlurmJob` views)."""

    seq: int
    job_id: str
    name: str
    user: str
    submit_time: float
    num_gpus: int
    runtime_by_type: dict[str, float]       # true seconds on each GPU type where the job can run
    time_limit_s: float | None = None       # the job's own limit (None: the partition default applies)
    partitions: tuple[str, ...] = ()          # the partitions it may run in (first: the one it shows)
    waiting_on: set[str] = field(default_factory=set)    # jobs it depends on that have not ended
    dependency: str = ""                      # afterok / afterany (empty: none)
    limit_s: float | None = None              # the limit it runs under (set at start)
    partition: str = ""                       # the partition it runs in (set at start)
    pinned: str | None = None               # typed gres request
    features: str = ""
    comment: str = ""
    priority: int = 0
    held: bool = False
    begin_time: float = 0.0                  # not startable before it (scontrol update StartTime=)
    nice: int = 0
    model: str = ""
    iterations: float | None = None
    batch_size: int | None = None
    state: str = PENDING
    start_time: float | None = None
    end_time: float | None = None
    nodes: tuple[int, ...] = ()
    gpu_type: str | None = None
    classes: tuple[int, ...] = ()            # node classes the request allows now
    writes: int = 0                          # scontrol updates of this job (priority, features, hold, release)
    run_end: float = 0.0                     # when the current run ends (an end event of an earlier, requeued run is stale)
    requeues: int = 0                        # times `scontrol requeue` put it back to pending
    shards: int = 0                          # a shard job (gres/shard: shares a GPU; slurm_sim.packing)
    exc_nodes: frozenset[int] = frozenset()  # nodes it may not start on (scontrol update ExcNodeList=)
    view: SlurmJob | None = field(default=None, repr=False)
    key: tuple = ()


@dataclass(frozen=True)
class _NodeClass:
    gpu_type: str
    gpus: int
    features: frozenset[str]
    nodes: tuple[int, ...]
    partitions: frozenset[str] = frozenset()


class Simulator:
    """The simulated controller. Time is in seconds from 0."""

    def __init__(self, cluster: ClusterSpec, truth: PerfTable | None = None, *, scheduler: str | None = None,
                 backfill: bool | None = None, bf_interval: float | None = None,
                 bf_max_job_test: int | None = None, bf_window: float | None = None):
        """Scheduler settings come from the cluster spec (Slurm's defaults: sched/backfill, bf_interval 30 s,
        bf_window 1 day, bf_max_job_test 500); keyword arguments override them (`backfill` is the older
        spelling of scheduler="backfill"/"builtin")."""
        if scheduler is None and backfill is not None:
            scheduler = "backfill" if backfill else "builtin"
        cluster = with_scheduler(cluster, scheduler)
        sched = cluster.scheduler
        self.cluster = cluster
        self.truth = truth
        self.scheduler = sched.type
        self.backfill = sched.backfill
        self.bf_interval = sched.bf_interval_s if bf_interval is None else bf_interval
        self.bf_max_job_test = sched.bf_max_job_test if bf_max_job_test is None else bf_max_job_test
        self.bf_window = sched.bf_window_s if bf_window is None else bf_window
        self.default_time_s = cluster.default_time_s
        self.partitions = cluster.partition
        self.default_partition = cluster.default_partition
        self.now = 0.0
        self.version = 0                      # bumps when the pending/running sets change
        self.n_pending = 0
        self.node_names = [n.name for n in cluster.nodes]
        self.node_type = [n.gpu_type for n in cluster.nodes]
        self.node_gpus = [n.gpus for n in cluster.nodes]
        self.node_features = [frozenset(f.lower() for f in n.features) for n in cluster.nodes]
        self.free = list(self.node_gpus)
        self._ends: list[list[tuple[float, int]]] = [[] for _ in self.node_gpus]   # per node, sorted (KEPT_ENDS)
        self.free_total = sum(self.free)          # free GPUs over all nodes
        self.all_features = frozenset().union(*self.node_features) if cluster.nodes else frozenset()
        classes: dict[tuple, list[int]] = {}
        for i, n in enumerate(cluster.nodes):
            classes.setdefault((n.gpu_type, n.gpus, self.node_features[i], frozenset(n.partitions)), []).append(i)
        self.classes = [_NodeClass(t, g, f, tuple(ix), ps) for (t, g, f, ps), ix in classes.items()]
        self.multi_partition = len(self.partitions) > 1
        self.node_class = [0] * len(cluster.nodes)
        for c, cls in enumerate(self.classes):
            for i in cls.nodes:
                self.node_class[i] = c
        # by_free[c][f] = nodes of class c with exactly f free GPUs
        self.by_free: list[list[set[int]]] = [
            [set() for _ in range(cls.gpus + 1)] for cls in self.classes]
        for c, cls in enumerate(self.classes):
            self.by_free[c][cls.gpus].update(cls.nodes)
        self.types = sorted({c.gpu_type for c in self.classes})
        self.busy_by_type = dict.fromkeys(self.types, 0)
        self.jobs: dict[str, SimJob] = {}          # every job ever submitted
        self.active: dict[str, SimJob] = {}        # pending + running
        self.finished: list[SimJob] = []
        self._events: list[tuple[float, int, int, str]] = []
        self._event_seq = 0
        self._queue: list[tuple] = []              # heap of (key, job_id) for pending jobs
        self._queue_dirty = False
        self._needs_pass = False
        self._seq = 0
        self._blocked: set[str] = set()            # jobs that stopped the main scheduler in their partitions
        self._dependents: dict[str, list[str]] = {}
        self._last_bf = -math.inf
        self._wake_at: float | None = None
        self._updates = 0                      # scontrol updates (priority, features, hold, release)
        self._bf_seen: tuple[int, int] | None = None
        self._node_views: list[SlurmNode | None] = [None] * len(cluster.nodes)
        self._node_log: set[int] = set(range(len(cluster.nodes)))     # nodes whose view was dropped since
                                                                      # `node_views` last filled them
        # ids of the jobs whose squeue view was dropped (or that were submitted) since their consumer last
        # read them, in that order (`SimClient.jobs`' kept list, KEEP_JOB_LIST); None: no consumer
        self._view_log: dict[str, None] | None = None
        self._view_log_owner: object | None = None
        self.packing = None                    # slurm_sim.packing.ShardRuns: shard jobs (attach() sets it)

    # --------------------------------------------------------------------- submission
    def submit(self, *, num_gpus: int, name: str = "", user: str = "", model: str = "",
               iterations: float | None = None, batch_size: int | None = None,
               runtime_s: float | None = None, time_limit_s: float | None = None,
               gpu_type: str | None = None, constraint: str = "", comment: str = "",
               hold: bool = False, priority: int | None = None, partition: str = "",
               dependency: str = "", shards: int = 0) -> str:
        """Queue a job now; the scheduler looks at it on the next `run_until`/`advance`.

        `partition`: comma-separated partition names (empty: the default partition). `dependency`:
        `afterok:ID[:ID...]` or `afterany:ID[:ID...]` on jobs already submitted (sbatch's syntax)."""
        if num_gpus < 0:
            raise SimError("num_gpus must not be negative")
        if time_limit_s is not None and not time_limit_s > 0:
            raise SimError("time limit must be positive")
        partitions = self._partitions(partition, time_limit_s)
        kind, deps = self._parse_dependency(dependency)
        runtime = self._runtimes(model, num_gpus, iterations, batch_size, runtime_s, time_limit_s)
        pinned = gpu_type.lower() if gpu_type else None
        if pinned is not None and pinned not in self.types:
            raise SimError(f"Invalid generic resource (gres) specification: no node has GPU type {pinned!r} "
                           f"(types: {', '.join(self.types)})")
        self._check_features(constraint)
        self._seq += 1
        job = SimJob(seq=self._seq, job_id=str(self._seq), name=name or f"job{self._seq}", user=user,
                     submit_time=self.now, num_gpus=num_gpus, runtime_by_type=runtime,
                     time_limit_s=time_limit_s, pinned=pinned, features=constraint or "", comment=comment,
                     priority=priority if priority is not None else max(1, BASE_PRIORITY - self._seq),
                     held=hold, model=model, iterations=iterations, batch_size=batch_size,
                     partitions=partitions, dependency=kind, shards=shards)
        if shards and (self.packing is None or num_gpus != 1):
            self._seq -= 1
            raise SimError("Invalid generic resource (gres) specification: shards need 1 GPU and shard nodes")
        possible = self._possible_classes(job, with_data=False)
        if not possible:
            self._seq -= 1
            raise SimError(f"Requested node configuration is not available: {num_gpus} GPU(s)"
                           + (f" of type {pinned}" if pinned else "")
                           + (f" in partition {','.join(partitions)}" if self.multi_partition else "")
                           + (f" for model {model}" if model else "")
                           + f" (cluster {self.cluster.describe()})")
        gaps = sorted({self.classes[c].gpu_type for c in possible} - set(runtime))
        if gaps:
            self._seq -= 1
            raise SimError(f"the truth table has no data for {model} on {', '.join(gaps)}, where a {num_gpus}-GPU "
                           "job may be sent (fill the truth with an explicit rule, or pin the job's type)")
        job.classes = self._allowed_classes(job)
        for dep in deps:
            if self.jobs[dep].state in (PENDING, RUNNING):
                job.waiting_on.add(dep)
                self._dependents.setdefault(dep, []).append(job.job_id)
            elif kind == "afterok" and self.jobs[dep].state != "COMPLETED":
                self._seq -= 1
                raise SimError(f"Job dependency problem: job {dep} ended {self.jobs[dep].state}, afterok can never be met")
        self.jobs[job.job_id] = job
        self.active[job.job_id] = job
        if self._view_log is not None:
            self._view_log[job.job_id] = None
        self._enqueue(job)
        self.n_pending += 1
        self.version += 1
        self._needs_pass = True
        return job.job_id

    def _runtimes(self, model: str, num_gpus: int, iterations, batch_size, runtime_s, time_limit_s) -> dict[str, float]:
        if runtime_s is not None:
            return dict.fromkeys(self.types, float(runtime_s))
        if model:
            if self.truth is None:
                raise SimError(f"model {model!r} given but the simulator has no truth table")
            if not self.truth.has_model(model):
                raise SimError(f"model {model!r} is not in the truth table")
            if iterations is None or batch_size is None:
                raise SimError(f"model {model!r} needs iterations and batch_size for the truth")
            out = {}
            for t in self.types:
                ms = self.truth.iter_ms(model, t, max(1, num_gpus), int(batch_size))
                if ms is not None:
                    out[t] = float(iterations) * ms / 1000.0
            return out
        return dict.fromkeys(self.types, float(time_limit_s or self.default_time_s))

    def _partitions(self, text: str, time_limit_s: float | None) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(p.strip().lower() for p in (text or "").split(",") if p.strip()))
        if not names:
            names = (self.default_partition,)
        unknown = [n for n in names if n not in self.partitions]
        if unknown:
            raise SimError(f"invalid partition name specified: {', '.join(unknown)} "
                           f"(partitions: {', '.join(self.partitions)})")
        if time_limit_s is not None:
            within = tuple(n for n in names if time_limit_s <= self.partitions[n].max_time_s)
            if not within:
                most = max(self.partitions[n].max_time_s for n in names)
                raise SimError(f"Requested time limit is invalid (missing or exceeds some limit): "
                               f"{time_limit_s:.0f} s is above MaxTime {most:.0f} s of {','.join(names)}")
            names = within
        return names

    def _parse_dependency(self, text: str) -> tuple[str, tuple[str, ...]]:
        text = (text or "").strip()
        if not text:
            return "", ()
        kind, _, ids = text.partition(":")
        deps = tuple(i.strip() for i in ids.split(":") if i.strip())
        if kind not in DEPENDENCY_KINDS or not deps:
            raise SimError(f"Job dependency problem: {text!r}; expected afterok:ID[:ID...] or afterany:ID[:ID...]")
        unknown = [d for d in deps if d not in self.jobs]
        if unknown:
            raise SimError(f"Job dependency problem: no job {', '.join(unknown)}")
        return kind, deps

    def _check_features(self, constraint: str) -> None:
        try:
            unknown = feature_names(constraint or "", counts=_COUNTS) - self.all_features
        except ConstraintError as exc:
            raise SimError(str(exc)) from None
        if unknown:
            raise SimError(f"Invalid feature specification: {', '.join(sorted(unknown))} "
                           f"(node features: {', '.join(sorted(self.all_features))})")

    def _possible_classes(self, job: SimJob, with_data: bool = True) -> list[int]:
        """Classes the job could use under any constraint (partitions, pin, size and, with_data, truth)."""
        parts = set(job.partitions)
        return [c for c, cls in enumerate(self.classes)
                if (not with_data or cls.gpu_type in job.runtime_by_type) and (cls.partitions & parts)
                and (job.pinned is None or cls.gpu_type == job.pinned) and _fits(cls, job.num_gpus)]

    def _allowed_classes(self, job: SimJob) -> tuple[int, ...]:
        pred = compile_constraint(job.features, counts=_COUNTS) if job.features else None
        return tuple(c for c in self._possible_classes(job)
                     if pred is None or pred(self.classes[c].features))

    # --------------------------------------------------------------------- updates (scontrol)
    def set_priority(self, job: SimJob, priority: int) -> None:
        job.priority = int(priority)
        self._touch(job)
        self._queue_dirty = True
        self._needs_pass = True
        self._updates += 1
        job.writes += 1

    def set_exc_nodes(self, job: SimJob, names: str) -> None:
        """Slurm's `scontrol update JobId= ExcNodeList=a,b` on a pending job ("": none): it starts on none
        of them (a job with every node of its partitions excluded waits, BadConstraints on Slurm)."""
        index = {name: i for i, name in enumerate(self.node_names)}
        wanted = [n for n in (names or "").split(",") if n]
        if any(n not in index for n in wanted):
            raise SimError("Invalid node name specified")
        job.exc_nodes = frozenset(index[n] for n in wanted)
        self._touch(job)
        self._needs_pass = True
        self._updates += 1
        job.writes += 1

    def set_features(self, job: SimJob, features: str) -> None:
        self._check_features(features)
        job.features = features or ""
        job.classes = self._allowed_classes(job)
        self._touch(job)
        self._needs_pass = True
        self._updates += 1
        job.writes += 1

    def hold(self, job: SimJob) -> None:
        job.held = True
        self._touch(job)
        self._needs_pass = True
        self._updates += 1
        job.writes += 1

    def release(self, job: SimJob) -> None:
        job.held = False
        self._touch(job)
        self._needs_pass = True
        self._updates += 1
        job.writes += 1

    def set_nice(self, job: SimJob, nice: int) -> None:
        """`scontrol update Nice=`: as priority/basic does, the priority moves by the change of nice."""
        self.set_priority(job, max(1, job.priority + job.nice - int(nice)))
        job.nice = int(nice)

    def set_begin_time(self, job: SimJob, when: float) -> None:
        """`scontrol update StartTime=`: the job waits until `when` (a time not ahead: startable now)."""
        job.begin_time = float(when)
        self._touch(job)
        self._needs_pass = True
        self._updates += 1
        job.writes += 1
        if job.begin_time > self.now:
            self._push_event(job.begin_time, _BEGIN, job.job_id)

    def cancel(self, job: SimJob) -> None:
        if job.state == RUNNING and (not job.shards or self.packing.finish(job, self.now)[0]):
            self._release_nodes(job)
        elif job.state == PENDING:
            self.n_pending -= 1
        job.state = "CANCELLED"
        job.end_time = self.now
        self._touch(job)
        self.active.pop(job.job_id, None)
        self.finished.append(job)
        self.version += 1
        self._needs_pass = True
        self._ended(job)

    def requeue(self, job: SimJob) -> None:
        """`scontrol requeue`: a running job goes back to pending and starts again from its beginning (the
        seconds it ran are lost; its submit time, and so its JCT's origin, stay). Shard jobs are refused.
        Slurm may hold a requeued job back for a while; a caller models that with `set_begin_time`."""
        if job.state != RUNNING:
            raise SimError(f"Job {job.job_id} is not running ({job.state}): only a running job is requeued here")
        if job.shards:
            raise SimError("requeue of a shard job is not modelled")
        self._release_nodes(job)
        job.state = PENDING
        self.n_pending += 1
        job.start_time = None
        job.nodes = ()
        job.gpu_type = None
        job.limit_s = None
        job.partition = ""
        job.requeues += 1
        job.writes += 1
        self._touch(job)
        self._queue_dirty = True
        self._needs_pass = True
        self._updates += 1
        self.version += 1

    def _ended(self, job: SimJob) -> None:
        """Dependents of a job that just ended: startable now, or cancelled when afterok can never be met."""
        for jid in self._dependents.pop(job.job_id, ()):
            dep = self.jobs[jid]
            if dep.state != PENDING:
                continue
            dep.waiting_on.discard(job.job_id)
            self._touch(dep)
            if dep.dependency == "afterok" and job.state != "COMPLETED":
                self.cancel(dep)           # kill_invalid_depend: DependencyNeverSatisfied, cancelled
            self._needs_pass = True

    # --------------------------------------------------------------------- time
    def next_event_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def run_until(self, t: float) -> None:
        """Advance the clock to `t`, processing every event up to and including it."""
        if self._needs_pass:
            self._schedule()
        while self._events and self._events[0][0] <= t:
            tt = self._events[0][0]
            self.now = max(self.now, tt)
            while self._events and self._events[0][0] <= tt:
                _, _, kind, job_id = heapq.heappop(self._events)
                if kind == _END:
                    self._finish(self.jobs[job_id])
                elif kind == _BEGIN:
                    job = self.jobs[job_id]
                    if job.state == PENDING and job.begin_time <= tt:
                        self._touch(job)          # reason BeginTime -> Priority; a new backfill pass may start it
                        self._updates += 1
                        self._needs_pass = True
                else:
                    self._wake_at = None
            self._schedule()
        self.now = max(self.now, t)
        if self._needs_pass:
            self._schedule()

    def run(self) -> None:
        """Run until no event is left (no rounds: whatever the queue holds now plays out)."""
        while True:
            self.run_until(self.now)
            nxt = self.next_event_time()
            if nxt is None:
                return
            self.run_until(nxt)

    def _push_event(self, t: float, kind: int, job_id: str) -> None:
        self._event_seq += 1
        heapq.heappush(self._events, (t, self._event_seq, kind, job_id))

    # --------------------------------------------------------------------- scheduling
    def _enqueue(self, job: SimJob) -> None:
        job.key = (-job.priority, job.submit_time, job.seq)
        heapq.heappush(self._queue, (job.key, job.job_id))

    def _rebuild_queue(self) -> None:
        entries = []
        for job in self.active.values():
            if job.state == PENDING:
                job.key = (-job.priority, job.submit_time, job.seq)
                entries.append((job.key, job.job_id))
        heapq.heapify(entries)
        self._queue = entries
        self._queue_dirty = False

    def effective_limit(self, job: SimJob) -> float:
        """The job's time limit as squeue shows it: its own, else its (first) partition's DefaultTime."""
        if job.limit_s is not None:
            return job.limit_s
        return job.time_limit_s if job.time_limit_s is not None else self.partitions[job.partitions[0]].default_time_s

    def limit_in(self, job: SimJob, c: int) -> float:
        """The limit the job runs under on class c: its own, else the DefaultTime of the partition it runs in."""
        if job.time_limit_s is not None:
            return job.time_limit_s
        return self.partitions[self._partition_in(job, c)].default_time_s

    def _partition_in(self, job: SimJob, c: int) -> str:
        parts = self.classes[c].partitions
        return next(p for p in job.partitions if p in parts)

    def _schedule(self) -> None:
        self._needs_pass = False
        if self._queue_dirty:
            self._rebuild_queue()
        queue = self._queue
        passed_over = []
        blocked: list[SimJob] = []
        closed: set[int] = set()               # classes in a blocked partition (this pass)
        n_classes = len(self.classes)
        while queue:
            key, job_id = queue[0]
            job = self.jobs[job_id]
            if job.state != PENDING or key != job.key:
                heapq.heappop(queue)
                continue
            if job.held or job.waiting_on or not job.classes or job.begin_time > self.now:
                passed_over.append(heapq.heappop(queue))
                continue
            placement = self._place(job, closed)
            if placement is None:
                blocked.append(job)
                if not self.multi_partition:
                    break
                passed_over.append(heapq.heappop(queue))
                parts = set(job.partitions)
                closed.update(c for c, cls in enumerate(self.classes) if cls.partitions & parts)
                if len(closed) == n_classes:
                    break
                continue
            heapq.heappop(queue)
            self._start(job, *placement)
        for entry in passed_over:
            heapq.heappush(queue, entry)
        self._set_blocked(blocked)
        if blocked and self.backfill:
            state = (self.version, self._updates)
            if state == self._bf_seen:
                return          # nothing changed since the last pass: it would decide the same
            if self.now >= self._last_bf + self.bf_interval:
                self._backfill()
                self._last_bf = self.now
                self._bf_seen = (self.version, self._updates)
            if self._blocked:
                t = max(self._last_bf + self.bf_interval, self.now)
                if self._wake_at is None or self._wake_at > t:
                    self._wake_at = t
                    self._push_event(t, _WAKE, "")

    def _set_blocked(self, jobs: list[SimJob]) -> None:
        new = {j.job_id for j in jobs}
        if new != self._blocked:
            for jid in new ^ self._blocked:
                self._touch(self.jobs[jid])
            self._blocked = new

    def _place(self, job: SimJob, closed: set[int] = frozenset()) -> tuple[int, tuple[int, ...]] | None:
        """Where the job can start now: best fit over its allowed classes (class order breaks ties)."""
        if job.shards:                                 # a GPU another shard job holds first (slurm_sim.packing)
            slot = self.packing.open_slot(job, closed)
            if slot is not None:
                return slot
        g = job.num_gpus
        best: tuple[int, int, int] | None = None        # (free level, class, node)
        for c in job.classes:
            if c in closed:
                continue
            cls = self.classes[c]
            levels = self.by_free[c]
            if job.exc_nodes:
                levels = [lv - job.exc_nodes for lv in levels]
            if g <= cls.gpus:
                for f in range(max(g, 0), cls.gpus + 1):
                    if levels[f]:
                        if best is None or f < best[0]:
                            best = (f, c, min(levels[f]) if len(levels[f]) < 64 else next(iter(levels[f])))
                        break
            else:
                k = g // cls.gpus
                if len(levels[cls.gpus]) >= k:
                    return c, tuple(sorted(levels[cls.gpus])[:k])
        if best is None:
            return None
        return best[1], (best[2],)

    def _take(self, node: int, gpus: int) -> None:
        c = self.node_class[node]
        self.by_free[c][self.free[node]].discard(node)
        self.free[node] -= gpus
        self.free_total -= gpus
        self.by_free[c][self.free[node]].add(node)
        self._node_views[node] = None
        self._node_log.add(node)

    def _start(self, job: SimJob, c: int, nodes: tuple[int, ...]) -> None:
        cls = self.classes[c]
        per_node = job.num_gpus if len(nodes) == 1 else cls.gpus
        job.limit_s = self.limit_in(job, c)
        joined, end = (self.packing.start(job, nodes[0], job.runtime_by_type[cls.gpu_type], self.now)
                       if job.shards else (False, self.now + min(job.runtime_by_type[cls.gpu_type], job.limit_s)))
        for n in () if joined else nodes:
            self._take(n, per_node)
        job.state = RUNNING
        self.n_pending -= 1
        job.start_time = self.now
        job.nodes = nodes
        job.gpu_type = cls.gpu_type
        job.partition = self._partition_in(job, c)
        self._touch(job)
        if not job.shards:
            self._keep_ends(job, True)
        self.busy_by_type[cls.gpu_type] += 0 if joined else job.num_gpus
        job.run_end = end
        self._push_event(end, _END, job.job_id)
        self.version += 1

    def _keep_ends(self, job: SimJob, started: bool) -> None:
        """A running (not shard) job's entry in its nodes' sorted limit ends (`_ends`), added or removed:
        what backfill's pass over the active jobs gives each node."""
        entry = (job.start_time + self.effective_limit(job),
                 job.num_gpus if len(job.nodes) == 1 else self.node_gpus[job.nodes[0]])
        for n in job.nodes:
            ends = self._ends[n]
            if started:
                bisect.insort(ends, entry)
            else:
                del ends[bisect.bisect_left(ends, entry)]

    def _release_nodes(self, job: SimJob) -> None:
        if not job.shards:
            self._keep_ends(job, False)
        per_node = job.num_gpus if len(job.nodes) == 1 else self.node_gpus[job.nodes[0]]
        for n in job.nodes:
            self._take(n, -per_node)
        self.busy_by_type[job.gpu_type] -= job.num_gpus

    def _finish(self, job: SimJob) -> None:
        if job.state != RUNNING:        # cancelled meanwhile
            return
        if job.requeues and not job.shards and self.now < job.run_end:
            return                      # the end event of a run that was requeued
        if job.shards:                  # a shard job's speed follows its partner (slurm_sim.packing)
            if not self.packing.due(job, self.now):
                return                  # an end event its partner's start or end moved
            frees, done = self.packing.finish(job, self.now)
            if frees:
                self._release_nodes(job)
            job.state = "COMPLETED" if done else "TIMEOUT"
        else:
            self._release_nodes(job)
            runtime = job.runtime_by_type[job.gpu_type]
            job.state = "COMPLETED" if runtime <= self.effective_limit(job) else "TIMEOUT"
        job.end_time = self.now
        self._touch(job)
        self.active.pop(job.job_id, None)
        self.finished.append(job)
        self.version += 1
        if job.job_id in self._dependents:
            self._ended(job)

    # --------------------------------------------------------------------- backfill
    def _backfill(self) -> None:
        """Reservations for blocked jobs, starts for jobs that fit in front of them (time limits only).

        A pass can start only a job that fits in the GPUs free now (reservations only take from them),
        so when none of the jobs it would look at does, it is skipped: it would change nothing."""
        now = self.now
        candidates = heapq.nsmallest(self.bf_max_job_test,
                                     (e for e in self._queue if self.jobs[e[1]].state == PENDING
                                      and e[0] == self.jobs[e[1]].key))
        if not any(self._startable_now(self.jobs[job_id]) for _key, job_id in candidates):
            self._blocked = {jid for jid in self._blocked if self.jobs[jid].state == PENDING}
            return
        prof: dict[int, _Profile] = {}
        # a node's profile from its kept ends when first asked for (LAZY_PROFILES): until then no job of this
        # pass started on it (a start books the profiles of its nodes first), so its free GPUs and ends are
        # what they were when the pass began
        lazy = LAZY_PROFILES and KEPT_ENDS and self.packing is None
        kept_ends = self._ends

        def profile(n: int) -> _Profile:
            p = prof.get(n)
            if p is None:
                ends = kept_ends[n] if lazy else None
                p = prof[n] = _Profile.from_frees(now, self.free[n], ends, ordered=True) if ends else \
                    _Profile(now, self.free[n])
            return p

        # each running job's GPUs free at its limit's end, per node: every node's step function at once
        # (ONE_PASS_PROFILES) or one insertion per job
        frees: dict[int, list[tuple[float, int]]] = {}
        if KEPT_ENDS and self.packing is None and not lazy:   # no shard job can run: every running job is in `_ends`
            for n, ends in enumerate(self._ends):
                if ends:
                    prof[n] = _Profile.from_frees(now, self.free[n], ends, ordered=True)
        for job in () if KEPT_ENDS and self.packing is None else self.active.values():
            if job.state == RUNNING and (not job.shards or self.packing.owns_gpu(job.job_id)):
                end = max(now, job.start_time + self.effective_limit(job))
                per_node = job.num_gpus if len(job.nodes) == 1 else self.node_gpus[job.nodes[0]]
                for n in job.nodes:
                    frees.setdefault(n, []).append((end, per_node))
        for n, ends in frees.items():
            if ONE_PASS_PROFILES:
                prof[n] = _Profile.from_frees(now, self.free[n], ends)
            else:
                for end, per_node in ends:
                    profile(n).add(end, math.inf, per_node)
        horizon = now + self.bf_window
        for _key, job_id in candidates:
            job = self.jobs[job_id]
            if job.shards and job.state == PENDING and (slot := self.packing.backfill_slot(job, now)):
                self._start(job, *slot)            # an open shard beside a shard job (slurm_sim.packing)
                continue
            if not self.free_total:
                if self.packing is None:
                    break              # nothing can start now: further reservations would change nothing
                continue               # but a shard job further down may join an open shard
            if job.held or job.waiting_on or not job.classes or job.state != PENDING or job.begin_time > now:
                continue
            best = None              # (start, class, nodes)
            # a profile starts at now, so no start is earlier: once one is now the search can stop (STOP_AT_NOW)
            stop = now if STOP_AT_NOW else -math.inf
            for c in job.classes:
                cls = self.classes[c]
                limit = self.limit_in(job, c)
                if job.num_gpus <= cls.gpus:
                    for n in cls.nodes:
                        if n in job.exc_nodes:
                            continue
                        t = profile(n).earliest(job.num_gpus, limit)
                        if t is not None and (best is None or t < best[0]):
                            best = (t, c, (n,))
                            if t <= stop:
                                break
                else:
                    k = job.num_gpus // cls.gpus
                    t, chosen = _earliest_whole(cls, [profile(n) for n in cls.nodes], k, limit)
                    if t is not None and (best is None or t < best[0]):
                        best = (t, c, chosen)
                if best is not None and best[0] <= stop:
                    break
            if best is None or best[0] > horizon:
                continue               # no start within bf_window: no reservation (as Slurm)
            t, c, nodes = best
            limit = self.limit_in(job, c)
            per_node = job.num_gpus if len(nodes) == 1 else self.classes[c].gpus
            for n in nodes:
                profile(n).add(t, t + limit, -per_node)
            if t <= now and all(self.free[n] >= per_node for n in nodes):
                self._start(job, c, nodes)
        self._blocked = {jid for jid in self._blocked if self.jobs[jid].state == PENDING}

    def _startable_now(self, job: SimJob) -> bool:
        """Whether the job could start in the GPUs free now, were no reservation in the way."""
        return (job.state == PENDING and not job.held and not job.waiting_on and bool(job.classes)
                and self._place(job) is not None)

    # --------------------------------------------------------------------- views (squeue / sinfo)
    def job_view(self, job: SimJob) -> SlurmJob:
        if job.view is None:
            if job.state == PENDING:
                reason = ("JobHeldUser" if job.held else "Dependency" if job.waiting_on
                          else "BeginTime" if job.begin_time > self.now
                          else "BadConstraints" if not job.classes
                          else "Resources" if job.job_id in self._blocked else "Priority")
            else:
                reason = "TimeLimit" if job.state == "TIMEOUT" else "None"
            job.view = SimSlurmJob(
                job_id=job.job_id, state=job.state, name=job.name, user=job.user,
                partition=job.partition or ",".join(job.partitions),
                priority=0 if job.held else job.priority, submit_time=job.submit_time,
                start_time=job.start_time, end_time=job.end_time, time_limit_s=self.effective_limit(job),
                num_nodes=max(1, len(job.nodes)), num_gpus=0 if job.shards else job.num_gpus, gres_gpu_type=job.pinned,
                features=job.features, comment=job.comment,
                nodes=",".join(self.node_names[n] for n in job.nodes), gpu_type=job.gpu_type, reason=reason,
                begin_time=job.begin_time if job.state == PENDING and job.begin_time > self.now else None,
                nice=job.nice,
                gpu_index=self.packing.gpu_index(job.job_id) if job.shards and job.state == RUNNING else (),
                shards=job.shards, exc_nodes=",".join(self.node_names[n] for n in sorted(job.exc_nodes)))
        return job.view

    def node_view(self, n: int) -> SlurmNode:
        v = self._node_views[n]
        if v is None:
            alloc = self.node_gpus[n] - self.free[n]
            state = "IDLE" if alloc == 0 else "ALLOCATED" if self.free[n] == 0 else "MIXED"
            v = self._node_views[n] = SimSlurmNode(
                name=self.node_names[n], gpu_type=self.node_type[n], gpus=self.node_gpus[n], gpus_alloc=alloc,
                features=tuple(self.cluster.nodes[n].features), state=state,
                partitions=tuple(self.cluster.nodes[n].partitions),
                shards=self.node_gpus[n] * SHARDS_PER_GPU if SHARD_FEATURE in self.cluster.nodes[n].features else 0)
        return v

    def _touch(self, job: SimJob) -> None:
        """The job's squeue view is stale (its state, fields or reason changed): dropped, and logged for the
        view log's consumer."""
        job.view = None
        if self._view_log is not None:
            self._view_log[job.job_id] = None

    def take_view_log(self, owner: object) -> dict[str, None] | None:
        """The ids of the jobs whose view changed (or that were submitted) since `owner` last took the log,
        in the order they first changed, and a fresh log; None when `owner` is not the log's consumer (then it
        becomes the consumer, and must read every active job once)."""
        log = self._view_log
        self._view_log = {}
        if self._view_log_owner is not owner or log is None:
            self._view_log_owner = owner
            return None
        return log

    def node_views(self) -> list[SlurmNode]:
        """sinfo's view of every node, in order (the views dropped since the last call rebuilt)."""
        views = self._node_views
        if self._node_log:
            for n in self._node_log:
                if views[n] is None:
                    self.node_view(n)
            self._node_log = set()
        return list(views)

    def pending_count(self) -> int:
        return self.n_pending


def _fits(cls: _NodeClass, g: int) -> bool:
    if g <= cls.gpus:
        return True
    return g % cls.gpus == 0 and g // cls.gpus <= len(cls.nodes)


class _Profile:
    """Free GPUs of one node over time, as a step function (backfill's view: time limits only)."""

    __slots__ = ("times", "free")

    def __init__(self, now: float, free: int):
        self.times = [now]
        self.free = [free]

    @classmethod
    def from_frees(cls, now: float, free: int, ends: list[tuple[float, int]], ordered: bool = False) -> _Profile:
        """The profile `add(end, inf, gpus)` for each (end, gpus) builds (ends at or before now count
        from now), in one sort instead of one insertion per job (`ONE_PASS_PROFILES`); `ordered`: `ends` is
        sorted already (`KEPT_ENDS`: ends before now are summed into now's step either way)."""
        p = cls(now, free)
        times, frees = p.times, p.free
        for end, gpus in ends if ordered else sorted(ends):
            if end <= now:
                frees[0] += gpus
                continue
            if end != times[-1]:
                times.append(end)
                frees.append(frees[-1])
            frees[-1] += gpus
        return p

    def _split(self, t: float) -> int:
        times = self.times
        i = len(times) - 1
        while i > 0 and times[i] > t:
            i -= 1
        if times[i] == t:
            return i
        times.insert(i + 1, t)
        self.free.insert(i + 1, self.free[i])
        return i + 1

    def add(self, start: float, end: float, delta: int) -> None:
        start = max(start, self.times[0])
        i = self._split(start)
        j = self._split(end) if end != math.inf else len(self.times)
        for k in range(i, j):
            self.free[k] += delta

    def earliest(self, need: int, length: float) -> float | None:
        """First breakpoint t with at least `need` free GPUs throughout [t, t + length): one pass."""
        times, free = self.times, self.free
        n = len(times)
        i = 0
        while i < n:
            if free[i] < need:
                i += 1
                continue
            end = times[i] + length
            k = i + 1
            while k < n and times[k] < end and free[k] >= need:
                k += 1
            if k >= n or times[k] >= end:
                return times[i]
            i = k + 1                  # free[k] < need: no start before k+1 can span it
        return None

    def earliest_at(self, t: float, need: int, length: float) -> bool:
        times, free = self.times, self.free
        i = len(times) - 1
        while i > 0 and times[i] > t:
            i -= 1
        while i < len(times) and times[i] < t + length:
            if free[i] < need:
                return False
            i += 1
        return True


def _earliest_whole(cls: _NodeClass, profiles: list[_Profile], k: int, length: float
                    ) -> tuple[float | None, tuple[int, ...]]:
    """Earliest time k whole nodes of the class are all free for `length` seconds."""
    candidates = sorted({t for p in profiles for t in p.times})
    for t in candidates:
        ok = [cls.nodes[i] for i, p in enumerate(profiles) if p.earliest_at(t, cls.gpus, length)]
        if len(ok) >= k:
            return t, tuple(ok[:k])
    return None, ()


def runtime_of(truth: PerfTable, model: str, gpu_type: str, num_gpus: int, batch_size: int,
               iterations: float) -> float | None:
    """True seconds of a job on one type (None: no data, cannot run there)."""
    ms = truth.iter_ms(model, gpu_type, max(1, num_gpus), batch_size)
    return None if ms is None else iterations * ms / 1000.0


def sleep_seconds(wrap: str | None) -> float | None:
    """`--wrap "sleep N"` → N: how long a model-less job runs in the simulator."""
    m = _SLEEP.match(wrap or "")
    return float(m.group(1)) if m else None

