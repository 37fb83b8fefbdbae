"""`SimClient`: msched's `SlurmClient` interface over the simulator, so a reorder round runs unchanged
against a simulated cluster (DESIGN: one code path for the real cluster and the simulator).

Behaves like the real backends where the contract tests look: ids are strings of integers, a fresh job
stays PENDING until the clock moves (real Slurm starts it about a second later: call `advance(0)` or
`advance(1)`), updates of a job that is no longer pending raise `JobNotPending`, a held job shows
priority 0 and reason JobHeldUser, refused requests raise `SlurmError` with one line.

`JobRequest.extra` carries what the simulator needs to know the job's true runtime: `model`,
`iterations`, `batch_size` (per GPU); or `runtime_s` directly; a model-less job runs for the N of a
`--wrap "sleep N"`, else for its time limit. `extra["user"]` sets the job's user, `extra["dependency"]`
sbatch's `--dependency` (afterok:ID / afterany:ID).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from msched.estimate.perf_table import PerfTable
from msched.slurm.base import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING,
    JobNotPending,
    JobRequest,
    SchedulerSettings,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
)
from slurm_sim.cluster import ClusterSpec, parse_cluster
from slurm_sim.simulator import SimError, SimJob, Simulator, sleep_seconds

# `jobs()` of the active states keeps its list from one call to the next and rebuilds only the views the
# simulator logged as changed (`Simulator.take_view_log`: submitted, changed, started, ended), handing the
# changes on with the list (`JobList`, which `msched.rounds.core.build_snapshot` reads as a delta); off:
# every active job's view looked up each call (tests/test_fast_paths.py). Not with shard jobs (their
# views follow the pairing).
KEEP_JOB_LIST = True


class JobList(list):
    """`SimClient.jobs()`'s answer for the active states: the jobs, and what changed since the client's
    previous answer `prev` (a token): `changed`, (job id, its view or None when it left the active
    states) in the order the jobs first changed. `token` is this answer's own token. A caller may use
    the delta only when it read the answer whose token is `prev`, and only while neither list was modified."""

    __slots__ = ("changed", "prev", "token")



class SimClient(SlurmClient):
    name = "sim"

    def __init__(self, simulator: Simulator):
        self.sim = simulator
        self._kept: dict[str, SlurmJob] = {}       # the last active answer's views, in the simulator's order
        self._token: object | None = None

    @classmethod
    def from_spec(cls, spec: str | os.PathLike | ClusterSpec, truth: PerfTable | None = None, *,
                  backfill: bool | None = None, **kwargs) -> SimClient:
        """A client over a fresh simulated cluster, e.g. `from_spec("a100:4x1,titanv:4x1", truth=table)`.
        The scheduler is the spec's (default sched/backfill, as Slurm's); `scheduler="builtin"` or
        `backfill=False` gives strict priority order."""
        cluster = spec if isinstance(spec, ClusterSpec) else parse_cluster(spec)
        return cls(Simulator(cluster, truth, backfill=backfill, **kwargs))

    def scheduler(self) -> SchedulerSettings:
        """What `scontrol show config` would say of the simulated Slurm: SchedulerType and, for backfill,
        the SchedulerParameters it models (bf_window in minutes, as slurm.conf writes it)."""
        sim = self.sim
        if not sim.backfill:
            return SchedulerSettings("sched/builtin")
        return SchedulerSettings("sched/backfill", (
            ("bf_interval", f"{sim.bf_interval:g}"), ("bf_window", f"{sim.bf_window / 60:g}"),
            ("bf_max_job_test", str(sim.bf_max_job_test))))

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        return self.sim.now

    def advance(self, seconds: float) -> float:
        """Move the simulated clock forward (0 lets the scheduler act on what was just changed)."""
        if seconds < 0:
            raise ValueError("cannot advance the clock backwards")
        self.sim.run_until(self.sim.now + seconds)
        return self.sim.now

    def run_until(self, t: float) -> float:
        self.sim.run_until(max(t, self.sim.now))
        return self.sim.now

    # ------------------------------------------------------------------ SlurmClient
    def submit(self, request: JobRequest) -> str:
        extra = request.extra or {}
        try:
            runtime = extra.get("runtime_s")
            if runtime is None and not extra.get("model"):
                runtime = sleep_seconds(request.wrap)
            return self.sim.submit(
                num_gpus=int(request.num_gpus), name=request.name, user=str(extra.get("user", "")),
                model=str(extra.get("model", "")),
                iterations=_num(extra.get("iterations")), batch_size=_int(extra.get("batch_size")),
                runtime_s=_num(runtime), time_limit_s=request.time_limit_s,
                gpu_type=request.gpu_type, constraint=request.constraint, comment=request.comment,
                hold=request.hold, partition=request.partition, dependency=str(extra.get("dependency", "")),
                shards=int(extra.get("shards", 0)))
        except (SimError, ValueError) as exc:
            raise SlurmError(f"sbatch: error: {exc}") from None

    def jobs(self, states: tuple[str, ...] = ACTIVE_STATES) -> list[SlurmJob]:
        view = self.sim.job_view
        wanted = set(states)
        if KEEP_JOB_LIST and wanted == _ACTIVE and self.sim.packing is None:
            return self._active_jobs()
        out = []
        if wanted & set(ACTIVE_STATES):
            out = [j.view if j.view is not None else view(j) for j in self.sim.active.values() if j.state in wanted]
        if wanted - set(ACTIVE_STATES):
            out.extend(view(j) for j in self.sim.finished if j.state in wanted)
        return out

    def _active_jobs(self) -> JobList:
        """Every active job's view, in the simulator's order (`active`, submission order), as `jobs()`'s
        per-job lookup gives it: the kept views of jobs not logged since (their view objects are still
        the job's) and the logged jobs' views anew; a job first seen is appended (a job submitted later
        than every kept one, and the log holds new jobs in submission order)."""
        sim = self.sim
        view = sim.job_view
        active = sim.active
        log = sim.take_view_log(self)
        kept = self._kept
        fresh = log is None
        if fresh:                       # no log of this client's: every active job read (and no delta handed on)
            kept.clear()
            log = active
        changed = []
        for jid in log:
            j = active.get(jid)
            if j is None:
                if kept.pop(jid, None) is not None:
                    changed.append((jid, None))
                continue
            v = kept[jid] = j.view if j.view is not None else view(j)
            changed.append((jid, v))
        out = JobList(kept.values())
        out.changed, out.prev = changed, None if fresh else self._token
        out.token = self._token = object()
        return out

    def finished_jobs(self, since: float | None = None) -> list[SlurmJob]:
        view = self.sim.job_view
        return [view(j) for j in self.sim.finished
                if j.state in FINISHED_STATES and (since is None or (j.end_time or 0) >= since)]

    def nodes(self) -> list[SlurmNode]:
        if KEEP_JOB_LIST:
            return self.sim.node_views()
        return [self.sim.node_view(i) for i in range(len(self.sim.node_names))]

    def set_priority(self, job_id: str, priority: int) -> None:
        job = self._pending(job_id)
        if job.held:
            raise SlurmError(f"job {job_id} is held: release it before setting a priority")
        self.sim.set_priority(job, int(priority))

    def set_features(self, job_id: str, features: str) -> None:
        job = self._pending(job_id)
        try:
            self.sim.set_features(job, features)
        except SimError as exc:
            raise SlurmError(f"scontrol: error: {exc}") from None

    def set_nice(self, job_id: str, nice: int) -> None:
        job = self._pending(job_id)
        if job.held:
            raise SlurmError(f"job {job_id} is held: release it before setting a nice offset")
        self.sim.set_nice(job, int(nice))

    def set_exc_nodes(self, job_id: str, nodes: str) -> None:
        try:
            self.sim.set_exc_nodes(self._pending(job_id), nodes)
        except SimError as exc:
            raise SlurmError(f"scontrol: error: {exc}") from None

    def excluded_nodes(self, job_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        jobs = ((str(j), self.sim.jobs.get(str(j))) for j in job_ids)
        return {j: tuple(sorted(self.sim.node_names[n] for n in job.exc_nodes))
                for j, job in jobs if job is not None and job.state == PENDING}

    def set_begin_time(self, job_id: str, when: float | None) -> None:
        self.sim.set_begin_time(self._pending(job_id), self.sim.now if when is None else float(when))

    def hold(self, job_id: str) -> None:
        self.sim.hold(self._pending(job_id))

    def release(self, job_id: str) -> None:
        self.sim.release(self._pending(job_id))

    def cancel(self, job_id: str) -> None:
        job = self._job(job_id)
        if job.state in ACTIVE_STATES:
            self.sim.cancel(job)

    # ------------------------------------------------------------------ helpers
    def _job(self, job_id: str) -> SimJob:
        job = self.sim.jobs.get(str(job_id))
        if job is None:
            raise SlurmError(f"Invalid job id specified: {job_id}")
        return job

    def _pending(self, job_id: str) -> SimJob:
        job = self._job(job_id)
        if job.state != PENDING:
            raise JobNotPending(f"job {job_id} is {job.state}, not pending")
        return job


_ACTIVE = set(ACTIVE_STATES)


def _num(v) -> float | None:
    return None if v is None or v == "" else float(v)


def _int(v) -> int | None:
    return None if v is None or v == "" else int(float(v))
