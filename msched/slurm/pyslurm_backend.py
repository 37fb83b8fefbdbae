"""The pyslurm Slurm backend: the same `SlurmClient` over pyslurm's object API (pyslurm >= 22.5).

Why keep it: at a site with a pyslurm built for its Slurm, it reads the queue with one RPC instead of
forking squeue. It cannot be installed on the Debian 12 machines this project is tested on (Slurm
22.05 has no pyslurm on PyPI, SLURM-NOTES), so importing this module raises ImportError where pyslurm
is absent and `msched.slurm.get_client("auto")` falls back to the command-line backend.

Values are normalised through the command-line backend's parsers (GPU strings, node states, error
classification), so both backends report jobs and nodes identically; the shared contract tests
(tests/test_slurm_contract.py) run on this backend wherever pyslurm imports.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import pyslurm  # noqa: F401  (ImportError here is the signal get_client relies on)

from msched.config import Config, load_config
from msched.slurm.base import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING,
    JobNotPending,
    JobRequest,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    expand_hostlist,
)
from msched.slurm.cli.parsers import (
    classify_error,
    format_time_limit,
    normalise_node_state,
    parse_gpu_tres,
    parse_shards,
)

_RPC_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(pyslurm, "RPCError", None), getattr(pyslurm, "PyslurmError", None))
    if isinstance(e, type)
) or (RuntimeError,)


def _gres_text(value: object) -> str:
    """pyslurm gives GRES as a dict ({'gpu:a100': 2} or {'gpu': 2}) or a string; -> 'gpu:a100:2,...'."""
    if not value:
        return ""
    if isinstance(value, Mapping):
        parts = []
        for key, count in value.items():
            if isinstance(count, Mapping):    # {'gpu': {'a100': {...'count': 2}}} style
                for gtype, detail in count.items():
                    n = detail.get("count", 0) if isinstance(detail, Mapping) else detail
                    parts.append(f"{key}:{gtype}:{n}")
            else:
                parts.append(f"{key}:{count}")
        return ",".join(parts)
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)


def _join(value: object, sep: str = ",") -> str:
    if not value:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return sep.join(str(v) for v in value)
    return str(value)


def _epoch(value: object) -> float | None:
    if value in (None, 0, "", "N/A"):
        return None
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


class PyslurmClient(SlurmClient):
    """SlurmClient over pyslurm. Constructor arguments match CliClient's (extra ones are ignored)."""

    name = "pyslurm"

    def __init__(self, config: Config | None = None, **_ignored: object):
        self.config = config if config is not None else load_config()
        self._node_types: dict[str, str | None] = {}

    def _call(self, fn, *args, error: type[SlurmError] = SlurmError, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _RPC_ERRORS as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise classify_error(message, error)(f"pyslurm: {message}") from None

    def now(self) -> float:
        return time.time()

    # -- reads --------------------------------------------------------------------------------------
    def _all_jobs(self) -> Iterable[object]:
        jobs = self._call(pyslurm.Jobs.load)
        return jobs.values()

    def _to_job(self, j: object) -> SlurmJob:
        state = str(getattr(j, "state", "") or "").split()[0].upper()
        num_nodes = int(getattr(j, "num_nodes", None) or 1)
        num_tasks = int(getattr(j, "ntasks", None) or 1)
        per_node, t_node = parse_gpu_tres(_gres_text(getattr(j, "gres_per_node", None)))
        per_job, t_job = parse_gpu_tres(_gres_text(getattr(j, "gpus", None) and f"gpu:{j.gpus}"))
        per_task, t_task = parse_gpu_tres(_gres_text(getattr(j, "gpus_per_task", None)
                                                     and f"gpu:{j.gpus_per_task}"))
        typed = t_node or t_job or t_task
        nodes = _join(getattr(j, "allocated_nodes", "")) if state != PENDING else ""
        gpu_type = next((self._node_types[n] for n in expand_hostlist(nodes) if self._node_types.get(n)), None)
        limit = getattr(j, "time_limit", None)   # minutes in pyslurm's API
        finished = state in FINISHED_STATES
        return SlurmJob(
            job_id=str(j.id),
            state=state,
            name=str(getattr(j, "name", "") or ""),
            user=str(getattr(j, "user_name", "") or ""),
            partition=str(getattr(j, "partition", "") or ""),
            priority=int(getattr(j, "priority", 0) or 0),
            submit_time=_epoch(getattr(j, "submit_time", None)) or 0.0,
            start_time=_epoch(getattr(j, "start_time", None)) if state != PENDING else None,
            end_time=_epoch(getattr(j, "end_time", None)) if finished else None,
            time_limit_s=float(limit) * 60 if isinstance(limit, int | float) and limit > 0 else None,
            num_nodes=num_nodes,
            num_gpus=per_job + per_node * num_nodes + per_task * num_tasks,
            gres_gpu_type=self.config.canonical_gpu_type(typed) if typed else None,
            features=_join(getattr(j, "constraints", "")),
            comment=str(getattr(j, "comment", "") or ""),
            nodes=nodes,
            gpu_type=gpu_type,
            reason=str(getattr(j, "state_reason", "") or "").replace("None", ""),
            shards=parse_shards(_gres_text(getattr(j, "gres_per_node", None))) * num_nodes,
        )

    def jobs(self, states: tuple[str, ...] = ACTIVE_STATES) -> list[SlurmJob]:
        if not self._node_types:
            self.nodes()
        wanted = {s.upper() for s in states}
        out = []
        for j in self._all_jobs():
            job = self._to_job(j)
            if job.state in wanted:
                out.append(job)
        if any(n not in self._node_types for job in out for n in expand_hostlist(job.nodes)):
            self.nodes()
            out = [job for job in (self._to_job(j) for j in self._all_jobs()) if job.state in wanted]
        return out

    def finished_jobs(self, since: float | None = None) -> list[SlurmJob]:
        jobs = self.jobs(states=FINISHED_STATES)
        if since is not None:
            jobs = [j for j in jobs if (j.end_time or 0.0) >= since]
        return jobs

    def nodes(self) -> list[SlurmNode]:
        loaded = self._call(pyslurm.Nodes.load)
        nodes = []
        for n in loaded.values():
            gpus, gtype = parse_gpu_tres(_gres_text(getattr(n, "configured_gres", None)))
            used, _ = parse_gpu_tres(_gres_text(getattr(n, "allocated_gres", None)))
            configured = _gres_text(getattr(n, "configured_gres", None))
            features = getattr(n, "available_features", None) or getattr(n, "features", None) or ()
            nodes.append(SlurmNode(
                name=str(n.name),
                gpu_type=self.config.canonical_gpu_type(gtype) if gtype else None,
                gpus=gpus,
                gpus_alloc=used,
                features=tuple(_join(features).split(",")) if features else (),
                state=normalise_node_state(str(getattr(n, "state", "UNKNOWN"))),
                partitions=tuple(getattr(n, "partitions", None) or ()),
                shards=parse_shards(configured),
            ))
        self._node_types = {n.name: n.gpu_type for n in nodes}
        return nodes

    # -- writes -------------------------------------------------------------------------------------
    def submit(self, request: JobRequest) -> str:
        opts: dict[str, object] = {"name": request.name}
        if request.num_gpus:
            opts["gres_per_node"] = (f"gpu:{request.gpu_type}:{request.num_gpus}" if request.gpu_type
                                     else f"gpu:{request.num_gpus}")
        if request.constraint:
            opts["constraints"] = request.constraint
        if request.comment:
            opts["comment"] = request.comment
        if request.time_limit_s is not None:
            opts["time_limit"] = format_time_limit(request.time_limit_s)
        if request.partition:
            opts["partition"] = request.partition
        if request.num_nodes != 1:
            opts["nodes"] = request.num_nodes
        if request.hold:
            opts["priority"] = 0
        out = request.extra.get("--output")
        if out:
            opts["standard_output"] = out
        if request.wrap is not None:
            opts["script"] = f"#!/bin/sh\n{request.wrap}\n"
        elif request.script is not None:
            opts["script"] = request.script
        else:
            opts["script"] = "#!/bin/sh\nexec sleep infinity\n"   # runs until its time limit, as in the simulator
        desc = pyslurm.JobSubmitDescription(**opts)
        return str(self._call(desc.submit))

    def _modify(self, job_id: str, **changes: object) -> None:
        desc = pyslurm.JobSubmitDescription(**changes)
        self._call(pyslurm.Job(int(job_id)).modify, desc, error=JobNotPending)

    def _require_pending(self, job_id: str) -> None:
        job = self._call(pyslurm.Job.load, int(job_id), error=JobNotPending)
        state = str(getattr(job, "state", "")).split()[0].upper()
        if state != PENDING:
            raise JobNotPending(f"job {job_id} is not pending (state {state or 'unknown'})")

    def set_priority(self, job_id: str, priority: int) -> None:
        self._require_pending(job_id)     # Slurm accepts a priority for a running job silently
        self._modify(job_id, priority=int(priority))

    def set_features(self, job_id: str, features: str) -> None:
        self._modify(job_id, constraints=features)

    def set_nice(self, job_id: str, nice: int) -> None:
        self._require_pending(job_id)
        self._modify(job_id, nice=int(nice))

    def hold(self, job_id: str) -> None:
        self._call(pyslurm.Job(int(job_id)).hold, error=JobNotPending)

    def release(self, job_id: str) -> None:
        self._call(pyslurm.Job(int(job_id)).release, error=JobNotPending)

    def cancel(self, job_id: str) -> None:
        self._call(pyslurm.Job(int(job_id)).cancel)
