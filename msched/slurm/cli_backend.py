"""The command-line Slurm backend: sbatch, squeue, sinfo, scontrol and scancel.

Why the command line: it works against any Slurm the site runs (pyslurm must match the Slurm version
exactly, SLURM-NOTES), and it is the backend CI proves against a real local cluster.

How it reads Slurm:
- `squeue -O field:SEP,...` with an empty width and a suffix prints each field unpadded and untruncated
  followed by SEP; SEP is the ASCII unit separator, which no job name or comment holds in practice
  (the msched tag itself may hold `|`). The comment is the last field, so even a separator inside it
  cannot shift the others. `squeue --json` is not used: in 22.05 it ignores the state filters.
- SLURM_TIME_FORMAT=%s makes every timestamp epoch seconds, so no time zone guessing.
- One squeue per `jobs()`, one sinfo per `nodes()`. The GPU type of a running job comes from the
  nodes it runs on: a node -> type map cached from sinfo, refreshed only when an unknown node shows up.
- `finished_jobs()` merges squeue's memory of ended jobs (MinJobAge), sacct where the cluster runs
  slurmdbd, and the jobcomp/filetxt file where configured (read backwards only as far as needed).
- `set_priority` checks the job is pending first (one squeue): scontrol accepts a priority for a
  running job silently, and the round core relies on JobNotPending to skip jobs that started.
- A round's writes go through `update_jobs()`: one `squeue -t PD` for the pending check of every job,
  then one `scontrol` for all feature updates and one for all priority updates (features first: a job is
  retyped before it is raised), each reading one `update JobId=N Field=V` command per line from its
  standard input. Measured on 22.05.8 (tests/data/slurm/scontrol_batch.json): scontrol runs every line
  even after one fails, writes one stderr line `<reason> for job <id>` per failed job and exits 1 if
  any failed, so failures come back per job. A job listed in one command (`JobId=1,2,3`) costs one RPC
  per job all the same, so a line per job is as fast and simpler. A priority and features in one
  command are not atomic (a refused feature still writes the priority), hence two processes. A value
  that could not travel on one line unchanged (whitespace, quotes...) goes through its own argv call.
- Every command is an argv list; nothing is ever passed through a shell.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from msched.config import Config, load_config
from msched.msub.sbatch_args import parse_time_limit  # Slurm's one time syntax, read one way
from msched.slurm.base import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING,
    UPDATE_FIELDS,
    JobNotPending,
    JobRequest,
    JobUpdate,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
    UpdateResult,
    check_updates,
    expand_hostlist,
)

SEP = "\x1f"

# squeue -O fields, in parse order. Comment stays last (see module docstring).
JOB_FIELDS = (
    "JobID", "State", "Name", "UserName", "Partition", "PriorityLong", "SubmitTime", "StartTime",
    "EndTime", "TimeLimit", "NumNodes", "NumTasks", "tres-per-job", "tres-per-node", "tres-per-task",
    "Feature", "NodeList", "Reason", "Comment",
)
NODE_FIELDS = ("NodeList", "StateComplete", "Gres", "GresUsed", "Features", "Partition")

# sacct --format fields (job allocations only, -X), used where the cluster keeps accounting (slurmdbd).
SACCT_FIELDS = (
    "JobIDRaw", "State", "JobName", "User", "Partition", "Priority", "Submit", "Start", "End",
    "TimelimitRaw", "NNodes", "ReqTRES", "AllocTRES", "Constraints", "NodeList", "Reason", "Comment",
)
SACCT_STATES = "CA,CD,F,TO,NF,PR,OOM,BF,DL"
HISTORY_DEFAULT_S = 7 * 86400     # finished_jobs(since=None) looks this far back in sacct

_EMPTY = {"", "N/A", "(null)", "None", "NONE", "Unknown", "UNKNOWN", "n/a"}

# What Slurm prints when the controller cannot be reached (scontrol's update path reports the
# connection failure as "Unexpected message received").
_UNAVAILABLE = (
    "Unable to contact slurm controller",
    "connect failure",
    "Socket timed out",
    "Unexpected message received",
    "Could not establish a configuration source",
    "Zero Bytes were transmitted or received",
)
# What scontrol prints when an update meets a job that can no longer be changed as pending.
_NOT_PENDING = (
    "no longer pending",
    "already finished",
    "Invalid job id",
    "Job is in held state",
    "already completing",
    "Requested operation is presently disabled",
)
_GPU_RE = re.compile(r"(?:^|,)(?:gres[:/])?gpu(?::([^:,()]+))?:(\d+)")


def format_time_limit(seconds: float) -> str:
    """Seconds as Slurm's D-HH:MM:SS (rounded up to whole seconds)."""
    total = int(math.ceil(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def parse_epoch(text: str) -> float | None:
    """An epoch timestamp as printed under SLURM_TIME_FORMAT=%s; None for N/A/0/Unknown."""
    text = text.strip()
    if text in _EMPTY:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 else None


def parse_gpu_tres(text: str) -> tuple[int, str | None]:
    """GPUs in a TRES/GRES string (`gres:gpu:a100:2`, `gres/gpu=2` is not GRES syntax) -> (count, type)."""
    if not text or text.strip() in _EMPTY:
        return 0, None
    count, gtype = 0, None
    for m in _GPU_RE.finditer(text.strip()):
        count += int(m.group(2))
        if m.group(1) and gtype is None:
            gtype = m.group(1)
    return count, gtype


def _field(value: str) -> str:
    value = value.strip()
    return "" if value in _EMPTY else value


def _int(value: str, default: int = 0) -> int:
    try:
        return int(value.strip())
    except ValueError:
        return default


@dataclass(frozen=True)
class JobRow:
    """One squeue line split into its fields (before GPU types are resolved)."""

    values: dict[str, str]

    @classmethod
    def parse(cls, line: str) -> JobRow | None:
        parts = line.split(SEP)
        n = len(JOB_FIELDS)
        if len(parts) < n:
            return None
        if len(parts) > n + 1 or (len(parts) == n + 1 and parts[-1].strip()):
            # A separator inside the comment (the last field): join the rest back into it.
            parts = parts[: n - 1] + [SEP.join(parts[n - 1:]).rstrip(SEP)]
        return cls(dict(zip(JOB_FIELDS, parts[:n], strict=True)))


def job_from_row(row: JobRow, config: Config, node_types: Mapping[str, str | None]) -> SlurmJob:
    v = row.values
    state = v["State"].strip().split()[0].upper() if v["State"].strip() else ""
    num_nodes = max(1, _int(v["NumNodes"], 1))
    num_tasks = _int(v["NumTasks"], 1)
    if not 0 < num_tasks < 0xFFFFFF00:      # NO_VAL (4294967294) for jobs that never started
        num_tasks = 1
    per_job, t_job = parse_gpu_tres(v["tres-per-job"])
    per_node, t_node = parse_gpu_tres(v["tres-per-node"])
    per_task, t_task = parse_gpu_tres(v["tres-per-task"])
    num_gpus = per_job + per_node * num_nodes + per_task * num_tasks
    typed = t_job or t_node or t_task
    nodes = _field(v["NodeList"]) if state != PENDING else ""
    gpu_type = None
    if nodes:
        for name in expand_hostlist(nodes):
            if node_types.get(name):
                gpu_type = node_types[name]
                break
    finished = state in FINISHED_STATES
    return SlurmJob(
        job_id=v["JobID"].strip(),
        state=state,
        name=v["Name"],
        user=v["UserName"].strip(),
        partition=v["Partition"].strip(),
        priority=_int(v["PriorityLong"]),
        submit_time=parse_epoch(v["SubmitTime"]) or 0.0,
        start_time=parse_epoch(v["StartTime"]) if state != PENDING else None,
        end_time=parse_epoch(v["EndTime"]) if finished else None,
        time_limit_s=parse_time_limit(v["TimeLimit"]),
        num_nodes=num_nodes,
        num_gpus=num_gpus,
        gpus_per_node=per_node or None,
        gres_gpu_type=config.canonical_gpu_type(typed) if typed else None,
        features=_field(v["Feature"]),
        comment=_field(v["Comment"]) if v["Comment"].strip() != "(null)" else "",
        nodes=nodes,
        gpu_type=gpu_type,
        reason=_field(v["Reason"]),
    )


def parse_squeue(text: str, config: Config, node_types: Mapping[str, str | None]) -> list[SlurmJob]:
    """Parse `squeue -h -O <JOB_FIELDS with SEP suffixes>` output."""
    jobs = []
    for line in text.splitlines():
        row = JobRow.parse(line)
        if row is not None and row.values["JobID"].strip():
            jobs.append(job_from_row(row, config, node_types))
    return jobs


def parse_sinfo(text: str, config: Config) -> list[SlurmNode]:
    """Parse `sinfo -h -N -O <NODE_FIELDS with SEP suffixes>`: one line per (node, partition), merged."""
    merged: dict[str, dict] = {}
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) < len(NODE_FIELDS) or not parts[0].strip():
            continue
        v = dict(zip(NODE_FIELDS, parts[: len(NODE_FIELDS)], strict=True))
        name = v["NodeList"].strip()
        part = v["Partition"].strip().rstrip("*")
        if name in merged:
            if part and part not in merged[name]["partitions"]:
                merged[name]["partitions"].append(part)
            continue
        gpus, gtype = parse_gpu_tres(v["Gres"])
        used, _ = parse_gpu_tres(v["GresUsed"])
        features = tuple(f for f in _field(v["Features"]).split(",") if f)
        merged[name] = {
            "name": name,
            "gpu_type": config.canonical_gpu_type(gtype) if gtype else None,
            "gpus": gpus,
            "gpus_alloc": used,
            "features": features,
            "state": normalise_node_state(v["StateComplete"]),
            "partitions": [part] if part else [],
        }
    return [SlurmNode(**{**d, "partitions": tuple(d["partitions"])}) for d in merged.values()]


def normalise_node_state(text: str) -> str:
    """sinfo's `idle+drain`, `down*`, `mixed~` -> `IDLE+DRAIN`, `DOWN+NOT_RESPONDING`, `MIXED+POWERED_DOWN`."""
    text = text.strip().upper()
    flags = []
    suffixes = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "!": "POWERING_DOWN",
                "%": "POWERING_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
                "-": "PLANNED"}
    while text and text[-1] in suffixes:
        flags.append(suffixes[text[-1]])
        text = text[:-1]
    return "+".join([text or "UNKNOWN", *flags])


_TRES_GPU_RE = re.compile(r"(?:^|,)gres/gpu(?::([^=,]+))?=(\d+)")


def parse_tres_gpus(text: str) -> tuple[int, str | None]:
    """GPUs in accounting TRES (`cpu=1,gres/gpu:titanv=2,gres/gpu=2`) -> (total, type or None)."""
    total, typed_total, gtype = 0, 0, None
    for m in _TRES_GPU_RE.finditer(text.strip()):
        if m.group(1):
            typed_total += int(m.group(2))
            gtype = gtype or m.group(1)
        else:
            total = int(m.group(2))
    return (total or typed_total), gtype


def parse_sacct(text: str, config: Config, node_types: Mapping[str, str | None]) -> list[SlurmJob]:
    """Parse `sacct -X -n -P --delimiter=SEP --format=<SACCT_FIELDS>` under SLURM_TIME_FORMAT=%s.

    The request's TRES names a GPU type only when the user asked for one (the pin); the GPU type a
    job ran on comes from its allocated TRES, else from its nodes.
    """
    n = len(SACCT_FIELDS)
    jobs = []
    for line in text.splitlines():
        parts = line.split(SEP)
        if len(parts) < n:
            continue
        if len(parts) > n:
            parts = parts[: n - 1] + [SEP.join(parts[n - 1:])]
        v = dict(zip(SACCT_FIELDS, parts, strict=True))
        if not v["JobIDRaw"].strip().isdigit():
            continue
        state = v["State"].strip().split()[0].upper() if v["State"].strip() else ""
        req, req_type = parse_tres_gpus(v["ReqTRES"])
        alloc, alloc_type = parse_tres_gpus(v["AllocTRES"])
        nodes = _field(v["NodeList"])
        if nodes == "None assigned":
            nodes = ""
        ran_on = alloc_type or next((node_types[x] for x in expand_hostlist(nodes) if node_types.get(x)), None)
        limit = v["TimelimitRaw"].strip()
        jobs.append(SlurmJob(
            job_id=v["JobIDRaw"].strip(),
            state=state,
            name=v["JobName"],
            user=v["User"].strip(),
            partition=v["Partition"].strip(),
            priority=_int(v["Priority"]),
            submit_time=parse_epoch(v["Submit"]) or 0.0,
            start_time=parse_epoch(v["Start"]),
            end_time=parse_epoch(v["End"]),
            time_limit_s=float(limit) * 60 if limit.isdigit() else None,
            num_nodes=max(1, _int(v["NNodes"], 1)),
            num_gpus=req or alloc,
            gres_gpu_type=config.canonical_gpu_type(req_type) if req_type else None,
            features=_field(v["Constraints"]),
            comment=v["Comment"].strip(),
            nodes=nodes,
            gpu_type=config.canonical_gpu_type(ran_on) if ran_on else None,
            reason=_field(v["Reason"]),
        ))
    return jobs


_JOBCOMP_RE = re.compile(r"(\w+)=(.*?)(?= \w+=|$)")


def parse_jobcomp(text: str, config: Config, node_types: Mapping[str, str | None]) -> list[SlurmJob]:
    """Parse jobcomp/filetxt lines (`JobId=10 UserId=u(1001) ... JobState=COMPLETED ...`).

    The file holds no comment or GPU request; it is the fallback for jobs squeue has forgotten.
    Its timestamps are the controller's local time (`2026-12-02T14:16:33`).
    """
    jobs = []
    for line in text.splitlines():
        v = {m.group(1): m.group(2) for m in _JOBCOMP_RE.finditer(line.strip())}
        if "JobId" not in v or "JobState" not in v:
            continue
        nodes = _field(v.get("NodeList", ""))
        gpu_type = next((node_types[n] for n in expand_hostlist(nodes) if node_types.get(n)), None)
        limit = v.get("TimeLimit", "")
        jobs.append(SlurmJob(
            job_id=v["JobId"],
            state=v["JobState"].split()[0].upper(),
            name=v.get("Name", ""),
            user=re.sub(r"\(\d+\)$", "", v.get("UserId", "")),
            partition=v.get("Partition", ""),
            submit_time=_local_time(v.get("SubmitTime", "")) or 0.0,
            start_time=_local_time(v.get("StartTime", "")),
            end_time=_local_time(v.get("EndTime", "")),
            # jobcomp writes the limit in minutes ("60") or UNLIMITED
            time_limit_s=(float(limit) * 60 if limit.isdigit() else parse_time_limit(limit)),
            num_nodes=_int(v.get("NodeCnt", "1"), 1),
            nodes=nodes,
            gpu_type=gpu_type,
        ))
    return jobs


_ENDTIME_RE = re.compile(r" EndTime=(\S+)")


def read_jobcomp_tail(path: Path, since: float | None, *, chunk: int = 1 << 16, margin_s: float = 3600.0) -> str:
    """The lines of a jobcomp file that can hold jobs ended at or after `since`.

    The file only grows (a line per finished job, in completion order), so it is read backwards in
    chunks and reading stops once the oldest whole line read ended well before `since`: a round costs
    the same on a file of years as on a file of minutes, and one timestamp is read per chunk, not per
    line (a busy cluster finishes thousands of jobs within the margin).
    """
    if since is None:
        return path.read_text(errors="replace")
    pieces: list[bytes] = []
    with open(path, "rb") as fh:
        pos = fh.seek(0, os.SEEK_END)
        while pos > 0:
            step = min(chunk, pos)
            pos -= step
            fh.seek(pos)
            pieces.append(fh.read(step))
            if pos == 0:
                break
            head = pieces[-1]                       # this chunk's first piece may be a partial line
            first_nl = head.find(b"\n")
            if first_nl < 0:
                continue
            second_nl = head.find(b"\n", first_nl + 1)
            oldest = head[first_nl + 1:second_nl if second_nl >= 0 else len(head)]
            m = _ENDTIME_RE.search(oldest.decode(errors="replace"))
            end = _local_time(m.group(1)) if m else None
            if end is not None and end < since - margin_s:
                pieces[-1] = head[first_nl + 1:]
                break
    return b"".join(reversed(pieces)).decode(errors="replace")


def _local_time(text: str) -> float | None:
    """A controller-local timestamp (`2026-12-02T14:16:33`) as epoch seconds; None when empty/unknown."""
    text = text.strip()
    if text in _EMPTY:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()      # naive = local time, as time.mktime reads it
    except ValueError:
        return None


def classify_error(message: str, default: type[SlurmError] = SlurmError) -> type[SlurmError]:
    """Which exception a failed command's message means. `default=JobNotPending` marks job updates:
    there a not-pending message gives JobNotPending and any other refusal a plain SlurmError."""
    low = message.lower()
    if any(s.lower() in low for s in _UNAVAILABLE):
        return SlurmUnavailable
    if default is JobNotPending:
        return JobNotPending if any(s.lower() in low for s in _NOT_PENDING) else SlurmError
    return default


# One scontrol update command per line on its standard input (see the module docstring).
_BATCH_JOB_ID = re.compile(r"\d+(?:_\d+)?")
_BATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:|&!()\[\]*+=@%/-]*")   # what scontrol's line reader keeps whole
# A failed line's stderr: `<reason> for job <id>`, or `<id>: <reason>` for an array task id (22.05.8).
_FOR_JOB = re.compile(r"(?P<reason>.*\S)\s+for job (?P<id>\S+)|(?P<id2>\d+(?:_\d+)?): (?P<reason2>.*\S)")
_SCONTROL_KEY = {"features": "Features", "priority": "Priority"}


def scontrol_update_line(job_id: str, field: str, value: int | str) -> str | None:
    """The line `scontrol` reads for one update (`update JobId=12 Priority=500`), or None when the
    job id or value holds anything beyond the plain characters Slurm ids and feature expressions use
    (such a value is sent as its own argv instead, never spliced into a command line)."""
    text = str(int(value)) if field == "priority" else str(value)
    if not _BATCH_JOB_ID.fullmatch(str(job_id)) or not _BATCH_VALUE.fullmatch(text):
        return None
    return f"update JobId={job_id} {_SCONTROL_KEY[field]}={text}"


def parse_scontrol_errors(stderr: str, job_ids: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Split a batched scontrol's stderr into {job id: reason} for the jobs of the batch (`Job is no
    longer pending execution for job 13` -> {"13": "Job is no longer pending execution"}; `12_9:
    Invalid job id specified` -> {"12_9": "Invalid job id specified"}) and the lines that name no job
    of the batch."""
    wanted = {str(j) for j in job_ids}
    per_job: dict[str, str] = {}
    other: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _FOR_JOB.fullmatch(line)
        job_id, reason = (m.group("id") or m.group("id2"), m.group("reason") or m.group("reason2")) if m else ("", "")
        if job_id in wanted:
            per_job[job_id] = f"{per_job[job_id]}; {reason}" if job_id in per_job else reason
        else:
            other.append(line)
    return per_job, other


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return "; ".join(dict.fromkeys(lines))[:500] if lines else "(no message)"


class CliClient(SlurmClient):
    """SlurmClient over Slurm's own commands.

    config:    site configuration (GPU-type aliases, the real sbatch path); default `load_config()`.
    bin_dir:   where squeue/scontrol/sinfo/scancel live (default: next to config.sbatch if they are
               there, else PATH). sbatch itself is always `config.sbatch` when that exists, since msub may be
               installed under the name `sbatch`.
    env:       extra environment for every command (e.g. {"SLURM_CONF": ...}); os.environ otherwise.
    timeout_s: wall-clock limit per command; a command that hangs raises SlurmUnavailable.
    """

    name = "cli"

    def __init__(self, config: Config | None = None, *, bin_dir: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None, timeout_s: float = 60.0):
        self.config = config if config is not None else load_config()
        self.timeout_s = timeout_s
        self._extra_env = dict(env or {})
        self._bin_dir = Path(bin_dir) if bin_dir else None
        self._node_types: dict[str, str | None] = {}
        self._slurm_config: dict[str, str] | None = None

    # -- running commands ---------------------------------------------------------------------------
    def _cmd(self, name: str) -> str:
        if name == "sbatch" and self._bin_dir is None and os.path.isfile(self.config.sbatch):
            return self.config.sbatch
        if self._bin_dir is not None:
            return str(self._bin_dir / name)
        beside = Path(self.config.sbatch).parent / name
        if beside.is_file():
            return str(beside)
        return shutil.which(name) or name

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._extra_env)
        env["SLURM_TIME_FORMAT"] = "%s"   # epoch seconds everywhere
        # squeue/sinfo read filters and formats from SQUEUE_*/SINFO_* (SQUEUE_USERS would hide
        # other users' jobs from the reorderer): the client's own arguments must be the only ones.
        for var in [v for v in env if v.startswith(("SQUEUE_", "SINFO_", "SACCT_"))] + ["SLURM_CLUSTERS"]:
            env.pop(var, None)
        return env

    def _exec(self, argv: list[str], *, input: str | None = None,
              timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run one Slurm command (argv list, no shell); a missing or hung command is SlurmUnavailable."""
        argv = [self._cmd(argv[0]), *argv[1:]]
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            return subprocess.run(argv, input=input, capture_output=True, text=True, env=self._env(),
                                  timeout=limit)
        except FileNotFoundError:
            raise SlurmUnavailable(f"{argv[0]} not found: is the Slurm client installed?") from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"{os.path.basename(argv[0])} did not answer within {limit:g}s") from None

    def _run(self, argv: list[str], *, input: str | None = None,
             error: type[SlurmError] = SlurmError) -> str:
        proc = self._exec(argv, input=input)
        if proc.returncode != 0:
            message = _one_line(proc.stderr or proc.stdout)
            raise classify_error(message, error)(f"{os.path.basename(self._cmd(argv[0]))}: {message}")
        return proc.stdout

    @staticmethod
    def _format(fields: Iterable[str]) -> str:
        return ",".join(f"{f}:{SEP}" for f in fields)

    # -- reads --------------------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def jobs(self, states: tuple[str, ...] = ACTIVE_STATES) -> list[SlurmJob]:
        out = self._run(["squeue", "-h", "-t", ",".join(states), "-O", self._format(JOB_FIELDS)])
        rows = [r for r in (JobRow.parse(line) for line in out.splitlines()) if r is not None]
        wanted = {s.upper() for s in states}
        node_names = {n for r in rows for n in expand_hostlist(_field(r.values["NodeList"]))}
        if node_names - set(self._node_types):
            self._refresh_node_types()
        jobs = [job_from_row(r, self.config, self._node_types) for r in rows if r.values["JobID"].strip()]
        return [j for j in jobs if j.state in wanted or "ALL" in wanted]

    def _refresh_node_types(self) -> None:
        self._node_types = {n.name: n.gpu_type for n in self.nodes()}

    def nodes(self) -> list[SlurmNode]:
        out = self._run(["sinfo", "-h", "-N", "-O", self._format(NODE_FIELDS)])
        nodes = parse_sinfo(out, self.config)
        self._node_types = {n.name: n.gpu_type for n in nodes}
        return nodes

    def job(self, job_id: str) -> SlurmJob | None:
        """One job by id, in any state Slurm still remembers (None when it has forgotten it)."""
        try:
            out = self._run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-O", self._format(JOB_FIELDS)])
        except SlurmUnavailable:
            raise
        except SlurmError:
            return None      # "Invalid job id specified"
        rows = [r for r in (JobRow.parse(line) for line in out.splitlines()) if r is not None]
        if {n for r in rows for n in expand_hostlist(_field(r.values["NodeList"]))} - set(self._node_types):
            self._refresh_node_types()
        jobs = parse_squeue(out, self.config, self._node_types)
        return next((j for j in jobs if j.job_id == str(job_id)), jobs[0] if jobs else None)

    def slurm_config(self) -> dict[str, str]:
        """`scontrol show config` as a dict (cached): where completion records are kept."""
        if self._slurm_config is None:
            out = self._run(["scontrol", "show", "config"])
            conf = {}
            for line in out.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    conf[key.strip()] = value.strip()
            self._slurm_config = conf
        return self._slurm_config

    def finished_jobs(self, since: float | None = None) -> list[SlurmJob]:
        """Finished jobs: squeue's memory (MinJobAge, full detail), then the accounting database
        (sacct, where slurmdbd runs; `since=None` looks back HISTORY_DEFAULT_S), then the
        jobcomp/filetxt file. A job found in several sources comes from the first: squeue keeps the
        comment (the tag) and GPU request; sacct keeps them only with AccountingStoreFlags=job_comment
        and gres/gpu in AccountingStorageTRES; the jobcomp file keeps neither.
        squeue is read last: a job that ends between the reads is then in squeue's answer with its tag,
        rather than only in the jobcomp file without it.
        """
        found: dict[str, SlurmJob] = {}
        conf = self.slurm_config()
        if not self._node_types:
            self._refresh_node_types()
        if conf.get("AccountingStorageType", "").endswith("slurmdbd"):
            start = since if since is not None else self.now() - HISTORY_DEFAULT_S
            out = self._run([
                "sacct", "-X", "-n", "-P", "-a", f"--delimiter={SEP}",
                "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)), "-E", "now",
                f"--state={SACCT_STATES}", f"--format={','.join(SACCT_FIELDS)}",
            ])
            for job in parse_sacct(out, self.config, self._node_types):
                found.setdefault(job.job_id, job)
        loc = conf.get("JobCompLoc", "")
        if conf.get("JobCompType", "").endswith("filetxt") and loc and os.path.isfile(loc):
            try:
                text = read_jobcomp_tail(Path(loc), since)
            except OSError:
                text = ""
            for job in parse_jobcomp(text, self.config, self._node_types):
                found.setdefault(job.job_id, job)
        found.update((j.job_id, j) for j in self.jobs(states=FINISHED_STATES))
        jobs = [j for j in found.values() if j.state in FINISHED_STATES]
        if since is not None:
            jobs = [j for j in jobs if (j.end_time or 0.0) >= since]
        return sorted(jobs, key=lambda j: (j.end_time or 0.0, j.job_id))

    # -- writes -------------------------------------------------------------------------------------
    def submit(self, request: JobRequest) -> str:
        argv = ["sbatch", "--parsable", f"--job-name={request.name}"]
        if request.num_gpus:
            gres = f"gpu:{request.gpu_type}:{request.num_gpus}" if request.gpu_type else f"gpu:{request.num_gpus}"
            argv.append(f"--gres={gres}")
        if request.constraint:
            argv.append(f"--constraint={request.constraint}")
        if request.comment:
            argv.append(f"--comment={request.comment}")
        if request.time_limit_s is not None:
            argv.append(f"--time={format_time_limit(request.time_limit_s)}")
        if request.partition:
            argv.append(f"--partition={request.partition}")
        if request.num_nodes != 1:
            argv.append(f"--nodes={request.num_nodes}")
        if request.hold:
            argv.append("--hold")
        # Backend-specific extras: keys spelled as sbatch long options ("--output") pass through;
        # other backends' keys (the simulator's model/iterations) are not sbatch's and are ignored.
        for key, value in request.extra.items():
            if key.startswith("--"):
                argv.append(f"{key}={value}" if value != "" else key)
        if request.wrap is not None:
            argv.append(f"--wrap={request.wrap}")
            script = None
        elif request.script is not None:
            script = request.script
        else:
            # Neither: like the simulator, a job that runs until its time limit ends it.
            argv.append("--wrap=exec sleep infinity")
            script = None
        out = self._run(argv, input=script)
        job_id = out.strip().splitlines()[-1].split(";")[0].strip() if out.strip() else ""
        if not job_id.isdigit():
            raise SlurmError(f"sbatch: unexpected output {out.strip()!r}")
        return job_id

    def _require_pending(self, job_id: str) -> None:
        out = self._run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"], error=JobNotPending)
        state = out.strip().split()[0] if out.strip() else ""
        if state != PENDING:
            raise JobNotPending(f"job {job_id} is not pending (state {state or 'unknown'})")

    def set_priority(self, job_id: str, priority: int) -> None:
        # scontrol accepts a priority for a running job without complaint, so check the state
        # first: callers (the round core) rely on JobNotPending to skip jobs that started.
        self._require_pending(job_id)
        self._run(["scontrol", "update", f"jobid={job_id}", f"priority={int(priority)}"], error=JobNotPending)

    def set_features(self, job_id: str, features: str) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"Features={features}"], error=JobNotPending)

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[UpdateResult]:
        """A round's writes in at most three processes: one squeue (which jobs are pending), one
        scontrol for every feature update, one for every priority update (see the module docstring)."""
        updates = check_updates(updates)
        if not updates:
            return []
        errors: dict[str, SlurmError] = {}
        applied: dict[str, list[str]] = {u.job_id: [] for u in updates}
        pending = self.pending_job_ids()
        for u in updates:
            if u.job_id not in pending:
                errors[u.job_id] = JobNotPending(f"job {u.job_id} is not pending (not among squeue's pending "
                                                 "jobs: it started or ended)")
        for name in UPDATE_FIELDS:
            lines: dict[str, str] = {}
            one_by_one: list[tuple[str, int | str]] = []
            for u in updates:
                value = getattr(u, name)
                if value is None or u.job_id in errors:
                    continue
                line = scontrol_update_line(u.job_id, name, value)
                if line is None:
                    one_by_one.append((u.job_id, value))
                else:
                    lines[u.job_id] = line
            failed = self._scontrol_batch(lines) if lines else {}
            for job_id in lines:
                if job_id in failed:
                    errors[job_id] = failed[job_id]
                else:
                    applied[job_id].append(name)
            for job_id, value in one_by_one:
                text = str(int(value)) if name == "priority" else str(value)
                try:
                    self._run(["scontrol", "update", f"jobid={job_id}", f"{_SCONTROL_KEY[name]}={text}"],
                              error=JobNotPending)
                except SlurmUnavailable:
                    raise
                except SlurmError as exc:
                    errors[job_id] = exc
                    continue
                applied[job_id].append(name)
        return [UpdateResult(u.job_id, tuple(applied[u.job_id]), errors.get(u.job_id)) for u in updates]

    def pending_job_ids(self) -> set[str]:
        """The ids of every pending job (held ones included), in one squeue."""
        out = self._run(["squeue", "-h", "-t", PENDING, "-O", self._format(("JobID",))])
        return {line.split(SEP)[0].strip() for line in out.splitlines() if line.split(SEP)[0].strip()}

    def _scontrol_batch(self, lines: Mapping[str, str]) -> dict[str, SlurmError]:
        """Run {job id: update line} through one scontrol; {job id: error} for the jobs it refused.

        Raises SlurmUnavailable when the controller could not be reached (or scontrol hung), and
        SlurmError when scontrol failed in a way no job of the batch is named in: then some lines
        may have been written and some not, each a whole value, and the next round re-plans."""
        proc = self._exec(["scontrol"], input="".join(f"{line}\n" for line in lines.values()),
                          timeout_s=self.timeout_s + 0.05 * len(lines))
        per_job, other = parse_scontrol_errors(proc.stderr, lines)
        for message in [*per_job.values(), *other]:
            if classify_error(message) is SlurmUnavailable:
                raise SlurmUnavailable(f"scontrol: {_one_line(message)}")
        unexplained = [ln for ln in other if not any(reason in ln for reason in per_job.values())]
        if proc.returncode != 0 and (unexplained or not per_job):
            what = _one_line("\n".join(unexplained)) if unexplained else f"exit status {proc.returncode}, no message"
            raise SlurmError(f"scontrol: {what} (in a batch of {len(lines)} updates: those before it are written)")
        return {job_id: classify_error(reason, JobNotPending)(f"scontrol: {reason} for job {job_id}")
                for job_id, reason in per_job.items()}

    def hold(self, job_id: str) -> None:
        self._run(["scontrol", "hold", str(job_id)], error=JobNotPending)

    def release(self, job_id: str) -> None:
        self._run(["scontrol", "release", str(job_id)], error=JobNotPending)

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", str(job_id)])


__all__ = ["CliClient", "parse_squeue", "parse_sinfo", "parse_jobcomp", "parse_gpu_tres",
           "parse_time_limit", "expand_hostlist", "format_time_limit", "read_jobcomp_tail", "classify_error",
           "parse_sacct", "parse_tres_gpus", "parse_scontrol_errors", "scontrol_update_line"]
