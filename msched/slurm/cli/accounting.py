"""Finished jobs from Slurm's accounting: sacct (where slurmdbd runs) and the jobcomp/filetxt file
(read backwards only as far as needed). squeue's own memory of ended jobs (MinJobAge) is read by the
client through the same parser as the queue."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from msched.config import Config
from msched.msub.sbatch_args import parse_time_limit
from msched.slurm.base import SlurmJob, expand_hostlist
from msched.slurm.cli.parsers import _EMPTY, _field, _int, _json_document, _json_epoch, _json_int, _json_str

SACCT_STATES = "CA,CD,F,TO,NF,PR,OOM,BF,DL"
HISTORY_DEFAULT_S = 7 * 86400     # finished_jobs(since=None) looks this far back in sacct

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


def _tres_gpus(entries: object) -> tuple[int, str | None]:
    """GPUs in sacct --json's TRES list ([{"type": "gres", "name": "gpu:titanv", "count": 2}, ...]) ->
    (total, type or None): the untyped entry is the total, a typed one names the type."""
    total, typed_total, gtype = 0, 0, None
    for t in entries if isinstance(entries, list) else []:
        if not isinstance(t, dict) or t.get("type") != "gres" or not isinstance(t.get("name"), str):
            continue
        name, count = t["name"], _json_int(t.get("count"))
        if name == "gpu":
            total = count
        elif name.startswith("gpu:"):
            typed_total += count
            gtype = gtype or name[4:]
    return (total or typed_total), gtype


def parse_sacct(raw: bytes | str, config: Config, node_types: Mapping[str, str | None]) -> list[SlurmJob]:
    """Parse `sacct --json -X -a -S .. -E now --state=..` (OpenAPI v0.0.38; 22.05 honours the filters).

    The request's TRES names a GPU type only when the user asked for one (the pin); the GPU type a
    job ran on comes from its allocated TRES, else from its nodes. Read as JSON because the text format
    prints a comment raw, so a comment holding a newline could add a whole forged row (recorded with
    the text format: an ordinary user's comment forged root's job 1). As for squeue, bytes that are not
    UTF-8 become U+FFFD and an error record raises; a job id found twice is dropped all the same.
    """
    doc = _json_document(raw, "sacct")
    jobs = []
    for d in doc.get("jobs") or []:
        if not isinstance(d, dict):
            continue
        job_id = _json_int(d.get("job_id"), -1)
        if job_id <= 0:
            continue
        state_d = d.get("state") if isinstance(d.get("state"), dict) else {}
        state = _json_str(state_d.get("current")).split(" ")[0].upper()
        times = d.get("time") if isinstance(d.get("time"), dict) else {}
        tres = d.get("tres") if isinstance(d.get("tres"), dict) else {}
        req, req_type = _tres_gpus(tres.get("requested"))
        alloc, alloc_type = _tres_gpus(tres.get("allocated"))
        nodes = _field(_json_str(d.get("nodes")))
        if nodes == "None assigned":
            nodes = ""
        ran_on = alloc_type or next((node_types[x] for x in expand_hostlist(nodes) if node_types.get(x)), None)
        limit = _json_int(times.get("limit"), -1)
        comment = d.get("comment") if isinstance(d.get("comment"), dict) else {}
        jobs.append(SlurmJob(
            job_id=str(job_id),
            state=state,
            name=_json_str(d.get("name")),
            user=_json_str(d.get("user")),
            partition=_json_str(d.get("partition")),
            priority=_json_int(d.get("priority")),
            submit_time=_json_epoch(times.get("submission")) or 0.0,
            start_time=_json_epoch(times.get("start")) if nodes else None,   # cancelled while pending: no start
            end_time=_json_epoch(times.get("end")),
            time_limit_s=float(limit) * 60 if limit > 0 else None,
            num_nodes=1,
            num_gpus=req or alloc,
            gres_gpu_type=config.canonical_gpu_type(req_type) if req_type else None,
            features=_field(_json_str(d.get("constraints"))),
            comment=_json_str(comment.get("job")),
            nodes=nodes,
            gpu_type=config.canonical_gpu_type(ran_on) if ran_on else None,
            reason=_field(_json_str(state_d.get("reason"))),
        ))
    return _unique_ids(jobs)


def _unique_ids(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """The records whose job id appears once (a second record for an id is a forgery or the real one)."""
    count: dict[str, int] = {}
    for j in jobs:
        count[j.job_id] = count.get(j.job_id, 0) + 1
    return [j for j in jobs if count[j.job_id] == 1]


_JOBCOMP_RE = re.compile(r"(\w+)=(.*?)(?= \w+=|$)")


# a line whose job id, job state and end time can be told without `_JOBCOMP_RE` (jobcomp/filetxt writes
# JobId first and every value but the name without spaces): see `_ended_before`
_PLAIN_ID = re.compile(r"JobId=(\d+)(?= \w+=)")
_PLAIN_STATE = re.compile(r" JobState=\S")
_PLAIN_END = re.compile(r" EndTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?= \w+=|$)")


def _ended_before(line: str, since: float) -> str | None:
    """The job id of a jobcomp line (stripped) that `parse_jobcomp` would read with an end time before
    `since`, told without its ~20 us regex: the line starts `JobId=<digits>` and holds no other `JobId=`,
    holds one `JobState=` (a space before it, none after), and exactly one `EndTime=`, a plain timestamp
    before `since` followed by the next field or the line's end. `_JOBCOMP_RE` then reads the same id, a job state and that end time (a
    value ends at the first ` <word>=`, and a later key of the same name would be another `JobId=` or
    `EndTime=`); its state is not blank. None: any other line (read whole)."""
    if not line.startswith("JobId=") or line.count("JobId=") != 1 or line.count("JobState=") != 1 \
            or line.count("EndTime=") != 1:
        return None
    jid, end = _PLAIN_ID.match(line), _PLAIN_END.search(line)
    if jid is None or end is None or not _PLAIN_STATE.search(line):
        return None
    t = _local_time(end.group(1))
    return jid.group(1) if t is not None and t < since else None


def parse_jobcomp(text: str | Iterable[str], config: Config, node_types: Mapping[str, str | None],
                  since: float | None = None) -> list[SlurmJob]:
    """Parse jobcomp/filetxt lines (`JobId=10 UserId=u(1001) ... JobState=COMPLETED ...`): a text, or its
    lines one at a time (`jobcomp_tail_lines`).

    The file holds no comment or GPU request; it is the fallback for jobs squeue has forgotten.
    Its timestamps are the controller's local time (`2026-12-02T14:16:33`). Slurm writes a job's name
    raw, so a name holding a newline splits its line (its head then lacks JobState and is skipped) and
    can add forged lines: as for sacct, an id on two lines is dropped and the caller drops jobs squeue
    shows as active.

    `since`: the caller keeps only jobs that ended at or after it, so a plain line of a job that ended
    before it is not read whole (`_ended_before`), only counted for the rule above; the jobs kept are the
    same (tests/test_slurm_cli_parse.py). A round reads back an hour of the file (`read_jobcomp_tail`),
    which on a busy cluster is thousands of lines: 10,000 cost 0.25 s of CPU, measured on the dev cluster.
    """
    jobs = []
    earlier: list[str] = []
    for line in text.splitlines() if isinstance(text, str) else text:
        line = line.strip()
        if since is not None and (jid := _ended_before(line, since)) is not None:
            earlier.append(jid)
            continue
        v = {m.group(1): m.group(2) for m in _JOBCOMP_RE.finditer(line)}
        if "JobId" not in v or not v.get("JobState", "").split():
            continue        # not a record (a blank state: a name holding ` JobState=` and a newline)
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
    if earlier:
        seen = {j.job_id for j in jobs}
        twice = {jid for jid in earlier if jid in seen} | {jid for jid, n in Counter(earlier).items() if n > 1}
        jobs = [j for j in jobs if j.job_id not in twice]
    return _unique_ids(jobs)


_ENDTIME_RE = re.compile(r" EndTime=(\S+)")


def read_jobcomp_tail(path: Path, since: float | None, *, chunk: int = 1 << 16, margin_s: float = 3600.0) -> str:
    """The lines of a jobcomp file that can hold jobs ended at or after `since`, as one text.

    The file only grows (a line per finished job, in completion order), so it is read backwards in
    chunks and reading stops once the oldest whole line read ended well before `since`: a round costs
    the same on a file of years as on a file of minutes, and one timestamp is read per chunk, not per
    line (a busy cluster finishes thousands of jobs within the margin). A round reads the same lines
    one at a time (`jobcomp_tail_lines`) instead of holding this text.
    """
    if since is None:
        return path.read_text(errors="replace")
    with open(path, "rb") as fh:
        start, end = _tail_span(fh, since, chunk, margin_s)
        fh.seek(start)
        return fh.read(end - start).decode(errors="replace")


def jobcomp_tail_lines(path: Path, since: float | None, *, chunk: int = 1 << 16,
                       margin_s: float = 3600.0) -> Iterator[str]:
    """`read_jobcomp_tail(...).splitlines()`, read forward a chunk at a time from where the backward scan
    stops (but blank lines, which hold no record). The text is never whole: at 27,000 lines of the last
    hour (~12 MB) holding the bytes, the text and its lines cost a round ~36 MB at its peak (ninth pass's
    10,000-job queue on the dev cluster). A line is decoded whole (UTF-8 never uses the newline byte
    inside a character) and split as `str.splitlines` splits the text (its other line breaks)."""
    with open(path, "rb") as fh:
        start, end = _tail_span(fh, since, chunk, margin_s) if since is not None else (0, fh.seek(0, os.SEEK_END))
        fh.seek(start)
        left = end - start
        carry = b""
        while left > 0:
            data = fh.read(min(chunk, left))
            if not data:
                break
            left -= len(data)
            *whole, carry = (carry + data).split(b"\n")
            for raw in whole:
                yield from filter(None, raw.decode(errors="replace").splitlines())
        yield from filter(None, carry.decode(errors="replace").splitlines())


def _tail_span(fh: BinaryIO, since: float, chunk: int, margin_s: float) -> tuple[int, int]:
    """(start, end) byte offsets of the tail `read_jobcomp_tail` reads: the file's end now, and the start
    of the first whole line of the chunk whose oldest whole line ended before `since - margin_s` (0 when
    none did)."""
    pos = end = fh.seek(0, os.SEEK_END)
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        fh.seek(pos)
        if pos == 0:
            break
        head = fh.read(step)                    # this chunk's first piece may be a partial line
        first_nl = head.find(b"\n")
        if first_nl < 0:
            continue
        second_nl = head.find(b"\n", first_nl + 1)
        oldest = head[first_nl + 1:second_nl if second_nl >= 0 else len(head)]
        m = _ENDTIME_RE.search(oldest.decode(errors="replace"))
        t = _local_time(m.group(1)) if m else None
        if t is not None and t < since - margin_s:
            return pos + first_nl + 1, end
    return 0, end


def _local_time(text: str) -> float | None:
    """A controller-local timestamp (`2026-12-02T14:16:33`) as epoch seconds; None when empty/unknown."""
    text = text.strip()
    if text in _EMPTY:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()      # naive = local time, as time.mktime reads it
    except ValueError:
        return None


