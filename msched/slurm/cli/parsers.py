"""Parsers of what squeue, sinfo and failed Slurm commands print (the command-line backend's reads).

- `squeue -O field:SEP,...` with an empty width and a suffix prints each field unpadded and untruncated
  followed by SEP; SLURM_TIME_FORMAT=%s makes every timestamp epoch seconds, so no time zone guessing.
- Error messages are classified here (controller unreachable, job no longer pending, other refusal).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from msched.config import Config
from msched.msub.sbatch_args import parse_time_limit  # Slurm's one time syntax, read one way
from msched.slurm.base import (
    FINISHED_STATES,
    PENDING,
    JobNotPending,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
    expand_hostlist,
)
from msched.util.text import one_line

SEP = "\x1f"

# squeue -O fields, in parse order. Comment stays last (see module docstring).
JOB_FIELDS = (
    "JobID", "State", "Name", "UserName", "Partition", "PriorityLong", "SubmitTime", "StartTime",
    "EndTime", "TimeLimit", "NumNodes", "NumTasks", "tres-per-job", "tres-per-node", "tres-per-task",
    "Feature", "NodeList", "Reason", "Comment",
)
NODE_FIELDS = ("NodeList", "StateComplete", "Gres", "GresUsed", "Features", "Partition")

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

def classify_error(message: str, default: type[SlurmError] = SlurmError) -> type[SlurmError]:
    """Which exception a failed command's message means. `default=JobNotPending` marks job updates:
    there a not-pending message gives JobNotPending and any other refusal a plain SlurmError."""
    low = message.lower()
    if any(s.lower() in low for s in _UNAVAILABLE):
        return SlurmUnavailable
    if default is JobNotPending:
        return JobNotPending if any(s.lower() in low for s in _NOT_PENDING) else SlurmError
    return default



def _one_line(text: str) -> str:
    """Slurm's stderr, all its distinct lines, as one line."""
    return one_line(text, limit=500, all_lines=True, empty="(no message)")

