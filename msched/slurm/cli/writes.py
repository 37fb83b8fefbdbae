"""Batched writes: one `update JobId=N Field=V` line per job on one scontrol's standard input, and
the per-job errors read back from its stderr (see msched.slurm.cli.client's docstring)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# One scontrol update command per line on its standard input (see the module docstring).
_BATCH_JOB_ID = re.compile(r"\d+(?:_\d+)?")
_BATCH_VALUE = re.compile(r"[A-Za-z0-9_.,:|&!()\[\]*+=@%/-]*")   # what scontrol's line reader keeps whole
# A failed line's stderr: `<reason> for job <id>`, or `<id>: <reason>` for an array task id (22.05.8).
_FOR_JOB = re.compile(r"(?P<reason>.*\S)\s+for job (?P<id>\S+)|(?P<id2>\d+(?:_\d+)?): (?P<reason2>.*\S)")
_SCONTROL_KEY = {"features": "Features", "partition": "Partition", "priority": "Priority", "nice": "Nice"}
_INTEGER_FIELDS = ("priority", "nice")


def scontrol_update_line(job_id: str, field: str, value: int | str) -> str | None:
    """The line `scontrol` reads for one update (`update JobId=12 Priority=500`), or None when the
    job id or value holds anything beyond the plain characters Slurm ids and feature expressions use
    (such a value is sent as its own argv instead, never spliced into a command line)."""
    text = str(int(value)) if field in _INTEGER_FIELDS else str(value)
    if not _BATCH_JOB_ID.fullmatch(str(job_id)) or not _BATCH_VALUE.fullmatch(text):
        return None
    return f"update JobId={job_id} {_SCONTROL_KEY[field]}={text}"


def scontrol_job_line(command: str, job_id: str) -> str | None:
    """The line `scontrol` reads to hold or release one job (`hold 12`), or None for a job id that is
    not a plain Slurm id (such an id never reaches a command line)."""
    if command not in ("hold", "release") or not _BATCH_JOB_ID.fullmatch(str(job_id)):
        return None
    return f"{command} {job_id}"


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


