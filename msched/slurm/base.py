"""The Slurm client interface: what msched needs from a Slurm cluster, real or simulated.

Backends are sibling modules behind this one interface (as in submitit): `cli` (sbatch/squeue/
scontrol/sinfo, the one CI proves against a real local cluster), `pyslurm` (where pyslurm imports)
and `slurm_sim.client.SimClient` (the simulator). The reorder round core (`msched.rounds.core`) only ever
talks to a `SlurmClient`, so one code path drives the real cluster and the simulator.

Reads are batched: one `jobs()` call and one `nodes()` call per round, never one per job. So are a
round's writes: `update_jobs()` takes every (job, priority, features) change of the round at once. Its
default here loops over the per-job `set_features`/`set_priority` (the simulator and pyslurm use it);
the command-line backend overrides it with one pending check and one scontrol process per field.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields

from msched.tag import PREFIX, JobTag, parse_comment

PENDING = "PENDING"
RUNNING = "RUNNING"
ACTIVE_STATES = (PENDING, RUNNING)
_NO_HOSTS = {"", "N/A", "(null)", "None", "NONE", "Unknown", "UNKNOWN", "n/a"}
FINISHED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY")


# one item of a Slurm host list: a name with any bracketed ranges in it (`gpu[01-04]x`), up to its comma
HOSTLIST_ITEM_RE = re.compile(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*")


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list (`n[1-3,7],gpu01`) into names, without calling scontrol."""
    text = (text or "").strip()
    if text in _NO_HOSTS:
        return []
    names: list[str] = []
    for item in HOSTLIST_ITEM_RE.findall(text):
        item = item.strip(",")
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            if item:
                names.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if hi:
                width = len(lo)
                for i in range(int(lo), int(hi) + 1):
                    names.extend(expand_hostlist(f"{prefix}{i:0{width}d}{suffix}"))
            else:
                names.extend(expand_hostlist(f"{prefix}{lo}{suffix}"))
    return names


class SlurmError(RuntimeError):
    """Slurm refused or could not be reached; the message is one line."""


class SlurmUnavailable(SlurmError):
    """The controller cannot be reached (or the client commands are missing)."""


class JobNotPending(SlurmError):
    """An update hit a job that is no longer pending (it started or ended since it was read)."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it. GPU counts are totals over the job, whichever TRES field held them."""

    job_id: str
    state: str
    name: str = ""
    user: str = ""
    partition: str = ""
    priority: int = 0
    submit_time: float = 0.0          # epoch seconds (simulated seconds in slurm_sim)
    start_time: float | None = None
    end_time: float | None = None
    time_limit_s: float | None = None
    num_nodes: int = 1
    num_gpus: int = 0                 # total GPUs requested
    gpus_per_node: int | None = None  # a fixed per-node count (--gres=gpu:N); None = Slurm may spread them
    gres_gpu_type: str | None = None  # a typed GPU request (gpu:a100:2) = the user pinned this type
    features: str = ""                # the job's constraint expression, as Slurm holds it
    comment: str = ""
    nodes: str = ""                   # allocated node list (running jobs)
    gpu_type: str | None = None       # GPU type of the allocated nodes (running/finished jobs)
    reason: str = ""
    admin_comment: str = ""           # set only by root or a job_submit plugin (users cannot forge it)
    nice: int = 0
    begin_time: float | None = None   # a pending job's begin time (`StartTime=`/--begin; squeue's eligible_time)
    gpu_index: tuple[int, ...] = ()   # the GPUs (indices) it holds on its first node, as Slurm says; () unknown
    shards: int = 0                   # gres/shard it asks for (all nodes; 0: not a shard job)
    exc_nodes: str = ""               # ExcNodeList, as the simulator shows it ("" where the read has none:
                                      # the round reads it with `SlurmClient.excluded_nodes`)

    def held_until(self, now: float) -> float | None:
        """The begin time that keeps this pending job from starting, when it is still ahead of `now`."""
        return self.begin_time if self.is_pending and self.begin_time is not None and self.begin_time > now else None

    @property
    def tag(self) -> JobTag | None:
        """The job's tag: the one job_submit.lua validated and stamped into admin_comment (users cannot
        set it) where there is one, else the claim in the comment (bounded like any claim)."""
        if self.admin_comment.startswith(PREFIX):
            stamped = parse_comment(self.admin_comment)[0]
            if stamped is not None:
                return stamped
        return parse_comment(self.comment)[0]

    @property
    def tag_verified(self) -> bool:
        """Whether the tag comes from admin_comment (checked by the controller), not only the comment."""
        return self.admin_comment.startswith(PREFIX) and parse_comment(self.admin_comment)[0] is not None

    @property
    def user_comment(self) -> str:
        return parse_comment(self.comment)[1]

    @property
    def is_pending(self) -> bool:
        return self.state == PENDING

    @property
    def is_running(self) -> bool:
        return self.state == RUNNING


_JOB_FIELDS = frozenset(f.name for f in fields(SlurmJob))


def job_of(values: dict[str, object]) -> SlurmJob:
    """`SlurmJob(**values)` for a dict of every field (taken as the job's own, not copied): the same job
    (equal, hashed and shown alike), made without the frozen dataclass's generated __init__, which sets
    each of the 25 fields through `object.__setattr__` (~5 us a job, ~50 ms of the queue read at 10,000
    jobs; issue 21, sixteenth pass). For the readers that build every job of the queue. A dict without
    every field, or with another name, raises TypeError (no default is filled in)."""
    if values.keys() != _JOB_FIELDS:
        raise TypeError(f"SlurmJob fields: missing {sorted(_JOB_FIELDS - values.keys())}, "
                        f"unknown {sorted(values.keys() - _JOB_FIELDS)}")
    job = object.__new__(SlurmJob)
    job.__dict__.update(values)
    return job


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gpu_type: str | None          # canonical lowercase GPU type (None: a node without GPUs)
    gpus: int
    gpus_alloc: int = 0
    features: tuple[str, ...] = ()
    state: str = "IDLE"
    partitions: tuple[str, ...] = ()
    shards: int = 0               # gres/shard configured on the node (all its GPUs together; 0: none)

    @property
    def shards_per_gpu(self) -> int:
        """Shards each GPU carries (gres.conf's Count over the GPUs: Slurm spreads them evenly); 0: none."""
        return self.shards // self.gpus if self.gpus > 0 else 0

    @property
    def gpus_free(self) -> int:
        return 0 if not self.usable else max(0, self.gpus - self.gpus_alloc)

    @property
    def usable(self) -> bool:
        s = self.state.upper()
        return not any(bad in s for bad in ("DOWN", "DRAIN", "FAIL", "INVAL", "NOT_RESPONDING", "UNKNOWN"))


@dataclass(frozen=True)
class JobRequest:
    """A submission made by msched itself (calibration jobs, tests, the simulator's trace replay).

    msub does not use this: it hands the user's own argv to the real sbatch untouched.
    """

    name: str
    num_gpus: int = 0
    gpu_type: str | None = None       # typed request (pins the type)
    constraint: str = ""
    comment: str = ""
    time_limit_s: float | None = None
    partition: str = ""
    script: str | None = None         # batch script text, or
    wrap: str | None = None           # a command for --wrap
    num_nodes: int = 1
    hold: bool = False
    extra: dict[str, str] = field(default_factory=dict)   # backend-specific (e.g. simulator's model/iterations)


@dataclass(frozen=True)
class JobUpdate:
    """The changes one round makes to one pending job; None leaves that field as it is."""

    job_id: str
    priority: int | None = None
    features: str | None = None
    partition: str | None = None      # the partition list (where a site steers GPU types by partition)
    nice: int | None = None           # the nice offset (config priority_lever = "nice": multifactor keeps aging)


@dataclass(frozen=True)
class UpdateResult:
    """What became of one JobUpdate: the fields written, and the error that stopped the rest.

    error is JobNotPending when the job started, ended or was held since it was read (skip it), or
    another SlurmError when Slurm refused a value for this job (an invalid feature expression)."""

    job_id: str
    applied: tuple[str, ...] = ()
    error: SlurmError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def not_pending(self) -> bool:
        return isinstance(self.error, JobNotPending)


@dataclass(frozen=True)
class SchedulerSettings:
    """Which scheduler Slurm runs and its parameters (`scontrol show config`: SchedulerType,
    SchedulerParameters), so a round plans for what Slurm will do. The default is Slurm's own."""

    scheduler_type: str = "sched/backfill"
    parameters: tuple[tuple[str, str], ...] = ()     # SchedulerParameters, in order (bf_window=..., ...)

    @property
    def backfill(self) -> bool:
        return self.scheduler_type.strip().lower().endswith("backfill")

    def parameter(self, name: str, default: str | None = None) -> str | None:
        """A SchedulerParameters value ("" for a flag such as bf_continue), or `default`."""
        return next((v for k, v in self.parameters if k == name), default)

    @classmethod
    def parse(cls, scheduler_type: str | None, parameters: str | None) -> SchedulerSettings:
        """From `scontrol show config`'s two lines; "(null)" parameters = none."""
        params = []
        text = (parameters or "").strip()
        if text and text != "(null)":
            for item in text.split(","):
                key, _, value = item.strip().partition("=")
                if key:
                    params.append((key, value))
        return cls((scheduler_type or "").strip() or "sched/backfill", tuple(params))


UPDATE_FIELDS = ("features", "partition", "priority", "nice")      # the order every backend writes them in
NICE_LIMIT = 2147483645     # Slurm's nice range is +-(NICE_OFFSET - 3) (slurm.h: NICE_OFFSET 0x80000000)


def check_updates(updates: Sequence[JobUpdate]) -> list[JobUpdate]:
    """The updates as a list; one JobUpdate per job (ValueError otherwise: merge them first)."""
    updates = list(updates)
    seen: set[str] = set()
    for u in updates:
        if u.job_id in seen:
            raise ValueError(f"job {u.job_id} appears twice in one update_jobs() call")
        seen.add(u.job_id)
    return updates


class SlurmClient(abc.ABC):
    """What the round core, msched jobs, calibrate and the tests need from Slurm."""

    name: str = "abstract"

    @abc.abstractmethod
    def now(self) -> float:
        """The cluster's clock (epoch seconds; simulated seconds in slurm_sim)."""

    @abc.abstractmethod
    def submit(self, request: JobRequest) -> str:
        """Submit a job; return its id."""

    @abc.abstractmethod
    def jobs(self, states: tuple[str, ...] = ACTIVE_STATES) -> list[SlurmJob]:
        """All jobs in the given states, in one batched call."""

    @abc.abstractmethod
    def nodes(self) -> list[SlurmNode]:
        """All nodes with their GPU type, GPU count and allocation, in one batched call."""

    @abc.abstractmethod
    def set_priority(self, job_id: str, priority: int) -> None:
        """Set a pending job's priority. Raises JobNotPending if it is no longer pending."""

    @abc.abstractmethod
    def set_features(self, job_id: str, features: str) -> None:
        """Replace a pending job's feature constraint (how its GPU type is changed: SLURM-NOTES)."""

    def set_partition(self, job_id: str, partition: str) -> None:
        """Replace a pending job's partition list (the type lever of a site that gives each GPU type a
        partition). Backends that cannot write it refuse it for the job."""
        raise SlurmError(f"the {self.name} backend cannot change job {job_id}'s partition")

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[UpdateResult]:
        """Apply a round's changes, one UpdateResult per JobUpdate, in order.

        Contract (every backend): all features and partitions are written before any priority (a job is retyped
        before it is raised, so it cannot start on its old type in between); a job whose features
        update fails gets no priority update; a job that is not pending comes back with JobNotPending
        and the others are still written; another refusal of one job comes back as that job's
        SlurmError. Only SlurmUnavailable (and failures that cannot be pinned on one job) raise; the
        updates written before that stand, each a whole value on a pending job, so the queue is valid.

        This default loops over `set_features`/`set_priority`: one Slurm call per change."""
        updates = check_updates(updates)
        errors: dict[str, SlurmError] = {}
        applied: dict[str, list[str]] = {u.job_id: [] for u in updates}
        for name in UPDATE_FIELDS:
            for u in updates:
                value = getattr(u, name)
                if value is None or u.job_id in errors:
                    continue
                try:
                    if name == "features":
                        self.set_features(u.job_id, str(value))
                    elif name == "partition":
                        self.set_partition(u.job_id, str(value))
                    elif name == "nice":
                        self.set_nice(u.job_id, int(value))
                    else:
                        self.set_priority(u.job_id, int(value))
                except SlurmUnavailable:
                    raise
                except SlurmError as exc:
                    errors[u.job_id] = exc
                    continue
                applied[u.job_id].append(name)
        return [UpdateResult(u.job_id, tuple(applied[u.job_id]), errors.get(u.job_id)) for u in updates]

    def set_nice(self, job_id: str, nice: int) -> None:
        """Shift a pending job's priority by a nice offset (priority minus nice) that Slurm's multifactor
        plugin keeps applying as the job ages (an explicit priority would freeze it)."""
        raise SlurmError(f"the {self.name} backend cannot set a nice offset")

    def set_exc_nodes(self, job_id: str, nodes: str) -> None:
        """Replace a pending job's excluded nodes (`ExcNodeList=`, comma-separated names; "": none): the
        packing round's lever (msched.rounds.packing). Record it in the hold journal first."""
        raise SlurmError(f"the {self.name} backend cannot set excluded nodes")

    def excluded_nodes(self, job_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """{job id: the node names its ExcNodeList holds now (sorted; () for none)} for those of `job_ids`
        that are pending and whose list this backend can read; a job left out is unknown, and the packing
        round writes nothing on it (the list may hold the job owner's own names)."""
        return {}

    def set_begin_time(self, job_id: str, when: float | None) -> None:
        """Keep a pending job from starting before `when` (epoch seconds; None: from now on). Slurm
        undoes it by itself when the time passes; record it in the hold journal first (msched.store.holds)."""
        raise SlurmError(f"the {self.name} backend cannot set a begin time")

    @abc.abstractmethod
    def hold(self, job_id: str) -> None: ...

    @abc.abstractmethod
    def release(self, job_id: str) -> None: ...

    def hold_many(self, job_ids: Sequence[str]) -> dict[str, SlurmError]:
        """Hold every job of `job_ids`, in that order; {job id: error} for the jobs Slurm refused
        (JobNotPending for one that started or ended). Raises SlurmUnavailable when Slurm cannot be
        reached. Backends that can batch (the command line: one scontrol) make it one pass, so the
        first and last hold are milliseconds apart, not a process per job."""
        return each_job(self.hold, job_ids)

    def release_many(self, job_ids: Sequence[str]) -> dict[str, SlurmError]:
        """Release every job of `job_ids`, in that order; errors as `hold_many`."""
        return each_job(self.release, job_ids)

    @abc.abstractmethod
    def cancel(self, job_id: str) -> None: ...

    def finished_jobs(self, since: float | None = None) -> list[SlurmJob]:
        """Jobs that ended (for completion tracking); backends read what their Slurm keeps."""
        return self.jobs(states=FINISHED_STATES)

    def queue_digest(self, setup: str = "") -> str | None:
        """A digest of what a round reads of Slurm (every job Slurm remembers and every node, in a
        format that leaves out what Slurm rewrites by itself), with `setup` (what else the plan depends
        on), read more cheaply than `jobs()`: the reorderer's light round compares it with the last
        round's and, unchanged, reads nothing more. None where the backend has no cheap read (then
        every round reads the queue whole); this default."""
        return None

    # whether `read_digest` can give the digest of a read (the round then reads no digest beside it), and
    # whether the reads should keep what it needs (a round that has read the digest turns it off: building
    # each job's line costs ~5 us of CPU per job, measured at 10,000 pending)
    digest_of_read = False
    digest_wanted = True
    # jobs that ended before this time are wanted by id only (the round's completions look back to it): the
    # next `jobs()` may leave them out of what it parses (the command line's tight read does), and
    # `finished_jobs(since)` with `since` at or after it answers as if they were read. None: read them all
    finished_before: float | None = None

    def read_digest(self, setup: str = "") -> str | None:
        """The digest `queue_digest` would give now, of the last `jobs()` and `nodes()` reads themselves
        (a round that reads the queue anyway need not run the digest's read too). None where the backend
        cannot tell it from them; this default."""
        return None

    def read_digest_later(self, setup: str = "") -> Callable[[], str | None]:
        """`read_digest` of the reads made so far, worked out when the returned function is called (a
        round needs it only when it wrote nothing); this default works it out now."""
        value = self.read_digest(setup)
        return lambda: value

    def activity(self) -> str | None:
        """Counters of what happened to Slurm's jobs (submitted, started, completed, cancelled, failed, and
        since when they count), read without reading the job table: equal in two rounds, no job arrived,
        started or ended between them. Only a hint (config `activity_hint`: when they moved, the reorderer
        skips the light check's digest and reads the queue at once): what they do not count (a user's
        scontrol update, a node's state) the digest still sees. None where the backend cannot tell; this
        default."""
        return None

    def prefetch_activity(self) -> None:
        """Start reading what the next `activity()` returns, where the backend can (the command line: its
        sdiag, beside the queue's read); this default does nothing."""
        return None

    def prefetch(self) -> bool:
        """Start the next `jobs()` and `nodes()` reads in the background where the backend can (the
        command line: their squeue and sinfo), so that the caller's work meanwhile overlaps them; they
        then collect what was started. False where it cannot; this default."""
        return False

    def close(self) -> None:
        """End what `prefetch` started and no read collected; this default has nothing to end."""
        return None

    def prefetch_finished(self, since: float | None) -> None:
        """Read now what the next `finished_jobs(since)` can read before the queue (the command line: the
        jobcomp file's tail), so that it overlaps the queue's read started by `prefetch`; this default
        reads nothing ahead."""
        return None

    def scheduler(self) -> SchedulerSettings:
        """The scheduler Slurm runs (the command-line backend reads `scontrol show config`; the
        simulator answers from its own settings). This default is Slurm's default: sched/backfill."""
        return SchedulerSettings()


def each_job(action: Callable[[str], None], job_ids: Sequence[str]) -> dict[str, SlurmError]:
    """Run `action` on each job id; {job id: error} for the ones Slurm refused (unreachable raises)."""
    errors: dict[str, SlurmError] = {}
    for job_id in job_ids:
        try:
            action(job_id)
        except SlurmUnavailable:
            raise
        except SlurmError as exc:
            errors[job_id] = exc
    return errors
