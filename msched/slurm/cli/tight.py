"""The tight queue read: `squeue -h -t all -O <field:width,...>`, every field at a fixed width, parsed by
byte offsets (CliClient.jobs with config `tight_queue`, the default).

Why: at 10,000 pending jobs `squeue --json` costs Slurm's squeue 1.2-1.4 s of CPU and 465 MB of memory,
and msched another second decoding its ~100 fields per job (BENCHMARKS, "Rounds that settle, fifth
pass"). This read asks for the fields `job_from_json` uses, nothing else.

Why it cannot be forged (squeue 22.05.8, src/squeue/print.c `_print_str`, and measured on the dev
cluster: tests/data/slurm/squeue_tight.bin): a left-justified field of width W is printed with
`printf("%.Ws")` and then padded with spaces to W, so it takes exactly W BYTES whatever it holds; a
longer value is cut at W bytes (in the middle of a UTF-8 character if it falls there). Every record is
the fields' widths plus one newline, so the parser slices the raw bytes at fixed offsets and never
looks for a newline or a separator: a comment holding newlines, separators, spaces or any UTF-8 stays
inside its own slice. The read is refused (None: the caller reads `squeue --json` instead) when:
- the output is not a whole number of records, or a record does not end in its newline;
- any field's slice does not end in a space: its value may have been cut (a value exactly as long as
  its width counts as cut too). The widths bound what this read accepts: msched's tag is at most
  TAG_MAX_LEN characters, so a comment of msub's fits; a user's longer name or comment only sends the
  round back to `squeue --json`, which reads it whole;
- a number does not parse, a reason is not one of Slurm's reason names (`squeue -O Reason` prints the
  controller's longer description where it has one; --json prints the name), or a job that is not
  pending asks for shards (which GPU it holds is only in --json's gres_detail).

What the two reads cannot tell apart, and both therefore read the same way (`user_text`): a text
field's trailing spaces (padding), and the literal text `(null)` (squeue's print of an empty field).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from typing import BinaryIO, NamedTuple

from msched.config import Config
from msched.slurm.base import FINISHED_STATES, PENDING, SlurmJob, job_of
from msched.slurm.cli.parsers import (
    DIGEST_JOB_FIELDS,
    SEP,
    _field,
    gpu_type_on,
    parse_epoch,
    parse_gpu_tres,
    parse_shards,
    user_text,
)
from msched.tag import TAG_MAX_LEN

# (squeue -O field, width in bytes, width when read again). Text a user types: Name, Comment, Feature
# (and admin_comment, root's). The first read's widths hold what msub writes (its tag is ~100-400
# bytes); a job with a longer value is read once more on its own (`-j`) at the second width, and only
# what overflows that too sends the round to --json.
TIGHT_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("JobID", 12, 12),
    ("State", 16, 16),
    ("UserName", 32, 256),
    ("UserID", 12, 12),
    ("Partition", 48, 1024),
    ("PriorityLong", 12, 12),
    ("SubmitTime", 14, 14),
    ("StartTime", 14, 14),
    ("EndTime", 14, 14),
    ("EligibleTime", 14, 14),
    ("TimeLimit", 16, 16),
    ("NumNodes", 8, 8),
    ("NumTasks", 12, 12),
    ("tres-per-node", 40, 1024),
    ("tres-per-job", 40, 1024),
    ("tres-per-task", 40, 1024),
    ("NodeList", 40, 8192),
    ("Nice", 12, 12),
    ("Reason", 32, 32),
    ("Feature", 128, 4096),
    ("Name", 96, 4096),
    ("Comment", 512, 4 * TAG_MAX_LEN),
    ("admin_comment", 256, 4 * TAG_MAX_LEN),
    ("Dependency", 64, 4096),       # not parsed: read for the queue's digest (DIGEST_JOB_FIELDS)
)
NARROW = tuple(w for _, w, _ in TIGHT_FIELDS)
WIDE = tuple(w for _, _, w in TIGHT_FIELDS)
RECORD_BYTES = sum(NARROW) + 1          # one record of the first read: its fields and a newline
CHUNK_BYTES = 1 << 20      # a file's records parsed this many bytes at a time (`parse_tight`)
REREAD_MAX = 200            # jobs read again at WIDE widths at most; more: the round reads --json
# the digest's fields (DIGEST_JOB_FIELDS) among a record's, in the digest's order
_DIGEST_PICK = operator.itemgetter(*(tuple(f for f, _, _ in TIGHT_FIELDS).index(name) for name in DIGEST_JOB_FIELDS))
_SEP = SEP.encode()
_DIGEST_END = _SEP + b"\n"

# Slurm 22.05's job reason names (job_reason_string, src/common/slurm_protocol_defs.c) that a round can
# meet; another text in the Reason column is the controller's description, which --json does not print.
REASONS = frozenset((
    "None", "Priority", "Dependency", "Resources", "PartitionNodeLimit", "PartitionTimeLimit",
    "PartitionDown", "PartitionInactive", "JobHeldAdmin", "JobHeldUser", "BeginTime", "Licenses",
    "AssociationJobLimit", "AssociationResourceLimit", "AssociationTimeLimit", "Reservation",
    "ReqNodeNotAvail", "FrontEndDown", "NodeDown", "BadConstraints", "SystemFailure", "JobLaunchFailure",
    "NonZeroExitCode", "TimeLimit", "InactiveLimit", "InvalidAccount", "InvalidQOS", "QOSUsageThreshold",
    "QOSJobLimit", "QOSResourceLimit", "QOSTimeLimit", "BlockMaxError", "BlockFreeAction", "Cleaning",
    "Prolog", "QOSNotAllowed", "AccountNotAllowed", "DependencyNeverSatisfied", "QOSGrpCpuLimit",
    "QOSGrpNodeLimit", "QOSGrpMemLimit", "QOSGrpGRES", "QOSMaxGRESPerJob", "QOSMaxGRESPerNode",
    "QOSMaxGRESPerUser", "AssocGrpGRES", "AssocMaxGRESPerJob", "AssocMaxJobsLimit", "AssocGrpJobsLimit",
    "AssocGrpSubmitJobsLimit", "QOSMaxJobsPerUserLimit", "QOSGrpJobsLimit", "QOSGrpSubmitJobsLimit",
    "MaxCpuPerAccount", "PartitionConfig", "DeadLine", "OutOfMemory", "FedJobLock", "BurstBufferResources",
    "BurstBufferStageIn", "BurstBufferOperation", "WaitingForScheduling", "SchedDefer", "NodeFailure",
    "ReqNodeNotAvail, Reserved for maintenance", "Reason: none", "PowerDown",
))


class _Refused(Exception):
    """This output cannot be read by offsets (the caller reads --json)."""


def tight_format(widths: tuple[int, ...] = NARROW) -> str:
    return ",".join(f"{name}:{w}" for (name, _, _), w in zip(TIGHT_FIELDS, widths, strict=True))


def _number(field: bytes) -> int:
    """A whole number squeue printed (ASCII digits, a leading minus for nice)."""
    field = field.strip()
    digits = field[1:] if field.startswith(b"-") else field
    if not digits.isdigit():            # bytes.isdigit: ASCII digits only
        raise _Refused(f"{field[:24]!r} is not a number")
    return int(field)


def _text(field: bytes) -> str:
    """A field's text without its padding (trailing spaces dropped before decoding: the same text)."""
    return field.rstrip(b" ").decode("utf-8", errors="replace")


def _limit_s(text: str) -> float | None:
    """squeue's time limit ([D-]H:MM:SS, M:SS, UNLIMITED, NOT_SET) in seconds; None when there is none."""
    text = text.strip()
    if text in ("UNLIMITED", "NOT_SET", "INVALID", "N/A"):
        return None
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts) or \
            (days and not (days.isascii() and days.isdigit())):
        raise _Refused(f"time limit {text[:24]!r}")
    secs = 0
    for p in parts:
        secs = secs * 60 + int(p)
    secs += int(days or 0) * 86400
    return float(secs) if secs > 0 else None


def parse_tight(raw: bytes | BinaryIO, config: Config, node_types: Mapping[str, str | None],
                widths: tuple[int, ...] = NARROW, why: list[str] | None = None,
                digest: list[tuple[int, bytes]] | None = None,
                ended: tuple[float, list[str]] | None = None,
                into: list[SlurmJob] | None = None) -> tuple[list[SlurmJob], list[str]] | None:
    """(the jobs, the ids of jobs with a field that filled its width) of `squeue -h -O
    <tight_format(widths)>` output, each job as `parse_squeue` reads it from `squeue --json`; a job with
    a full field is left out (the caller reads it again wider). None when this output cannot be read
    so (see the module docstring); then `why`, when given, receives the reason (one line, for the log).

    `digest`, when given, receives (job id, line) for each job read: the line `squeue -h -O
    <DIGEST_JOB_FIELDS, each Field:SEP>` prints for it (`digest_line`), so that the caller can hash the
    queue as CliClient.queue_digest reads it without running that squeue too.

    `raw` may be the open file squeue wrote (from its current position to its end): it is then read
    CHUNK_BYTES at a time (whole records), so the output is never whole in memory. Each chunk is checked
    as the whole output was (a record's fields are told full by its own bytes, so a chunk's `full` marks
    the same records); the jobs are the same, and only which reason `why` gives first may differ.

    `ended`, (a time, a list): a job that had ended before that time (a finished state and an end time
    before it) is not read into a SlurmJob (nor checked field by field): its id goes to the list, its
    digest line is made as any job's. A round wants such jobs by id only (`SlurmClient.finished_before`):
    at 10,000 pending they were half the records (the finished ones squeue keeps for MinJobAge), and
    half of the parse's CPU and ~1 KB each through the round.

    `into`: the list the jobs are appended to as they are read (and returned), for a caller that works on
    them while the rest of a followed read arrives (msched.slurm.cli.client._TagsAhead)."""
    why = [] if why is None else why
    size = sum(widths) + 1
    if isinstance(raw, bytes) and len(raw) % size:
        why.append(f"{len(raw)} bytes are not whole records of {size}")
        return None
    record = _record(widths)
    jobs: list[SlurmJob] = [] if into is None else into
    cut: list[str] = []
    seen = _Seen()
    read = [0]
    try:
        for chunk in _chunks(raw, size, read):
            if bytes(chunk[size - 1::size]).strip(b"\n"):
                why.append(f"{read[0]} bytes are not whole records of {size}")
                return None
            full = _full_fields(chunk, widths)
            if full[0]:
                why.append("a job id filled its width")
                return None
            for values in record.iter_unpack(chunk):
                if any(full) and any(f and v[-1] != 0x20 for f, v in zip(full, values, strict=True)):
                    cut.append(str(_number(values[0])))
                    continue
                if ended is not None and _ended_before(values, ended[0], seen):
                    number = _number(values[0])
                    if number <= 0:
                        raise _Refused("not a job id")
                    ended[1].append(str(number))
                    if digest is not None:
                        digest.append((number, digest_line(values)))
                    continue
                number, job, shape = _job(values, config, node_types, seen)
                jobs.append(job)
                if digest is not None:      # digest_line's bytes, the repeated fields joined once per shape
                    digest.append((number, b"".join((
                        values[0].rstrip(b" "), _SEP, shape.digest_head, values[5].rstrip(b" "), _SEP,
                        values[6].rstrip(b" "), _SEP, values[9].rstrip(b" "), _SEP, shape.digest_body,
                        values[20].rstrip(b" "), _SEP, values[21].rstrip(b" "), _SEP, values[22].rstrip(b" "),
                        _SEP, values[23].rstrip(b" "), _DIGEST_END))))
    except _Refused as exc:
        why.append(f"job {_text(values[0]).strip()[:12]}: {exc}")
        return None
    if read[0] % size:                  # a file's last record cut short
        why.append(f"{read[0]} bytes are not whole records of {size}")
        return None
    return jobs, cut


def _ended_before(values: tuple[bytes, ...], before: float, seen: _Seen) -> bool:
    """Whether a record is of a job in a finished state that ended before `before` (as `_job` reads them)."""
    if _state(values[1], seen) not in FINISHED_STATES:
        return False
    end = seen.epoch(values[8])
    return end is not None and end < before


def _state(field: bytes, seen: _Seen) -> str:
    """A State field as `_job` reads it (the first word, upper case), once per distinct field."""
    state = seen.states.get(field)
    if state is None:
        state = seen.states[field] = _text(field).strip().split(" ")[0].upper()
    return state


def _chunks(raw: bytes | BinaryIO, size: int, read: list[int]) -> Iterator[bytes | memoryview]:
    """`raw` whole (bytes), or a file's records from its position to its end (an open file, or squeue's
    output as squeue writes it: `msched.slurm.cli.client._Following`) in chunks of whole records, as they
    come, at most CHUNK_BYTES. `read[0]` counts the bytes read; a last record cut short stays unread (the
    caller refuses `read[0]` not a multiple of `size`). A file's chunks are views of one buffer used again
    for every chunk (the caller is done with a chunk when it asks for the next): a new 1 MB object per chunk
    came from the heap once glibc had raised its mmap threshold, and its pieces stayed, between the jobs'
    small objects, through the round (~11 MB more after the read at 20,000 jobs, measured on the dev
    cluster)."""
    if isinstance(raw, bytes):
        read[0] = len(raw)
        yield raw
        return
    buf = bytearray(max(1, CHUNK_BYTES // size) * size)
    view = memoryview(buf)
    have = 0
    while n := raw.readinto(view[have:]):
        have += n
        read[0] += n
        whole = have - have % size
        if whole:
            yield view[:whole]
            buf[:have - whole] = buf[whole:have]        # a record squeue has not finished: to the front
            have -= whole


def _full_fields(raw: bytes | memoryview, widths: tuple[int, ...]) -> list[bool]:
    """Which fields filled their width in some record (their last byte is not padding), all records at once."""
    size = sum(widths) + 1
    ends, at = [], 0
    for w in widths:
        at += w
        ends.append(at - 1)
    return [bool(bytes(raw[e::size]).strip(b" ")) for e in ends]


def _record(widths: tuple[int, ...]):  # noqa: ANN202 - a struct.Struct
    import struct

    return struct.Struct("".join(f"{w}s" for w in widths) + "x")


def digest_line(values: tuple[bytes, ...]) -> bytes:
    """A record's line as `squeue -h -O <DIGEST_JOB_FIELDS, each Field:SEP>` prints it: each field's value
    (`_print_str` with no width prints it whole) followed by SEP, then a newline. The tight read pads a
    value with spaces, so a value that itself ends in spaces comes back without them: both sides of the
    digest drop the spaces before each separator (`msched.slurm.cli.client._digest_lines`)."""
    return _SEP.join([v.rstrip(b" ") for v in _DIGEST_PICK(values)]) + _DIGEST_END


# the fields of a record that repeat across a queue (`_Shape`): State, UserName, UserID, Partition, TimeLimit,
# NumNodes, NumTasks, the three TRES, NodeList, Nice, Reason, Feature
_SHAPE_OF = operator.itemgetter(1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)


class _Shape(NamedTuple):
    """What a record's repeated fields (`_SHAPE_OF`) make of its job, worked out once per read for each
    distinct combination: the job's fields that come from them, and the digest line's runs of them."""

    fields: dict[str, object]       # SlurmJob's fields these bytes decide
    pending: bool
    finished: bool
    digest_head: bytes              # `digest_line`'s State, UserName, Partition, each with its SEP
    digest_body: bytes              # its TimeLimit ... Nice and Feature, each with its SEP


class _Seen:
    """What one read has parsed already, by the bytes squeue printed. Most fields repeat across a queue:
    at 10,000 pending (the bench's queue) 26 distinct combinations of the `_SHAPE_OF` fields, 122 submit
    times, 6 priorities, one admin comment. Each distinct value is parsed and checked once per read (the
    same checks, so the same refusals); what is unique to a job (its id, name, comment) is read for each.
    The parse's CPU at 10,000 jobs: 0.176 -> 0.100 s (settle18i)."""

    __slots__ = ("shapes", "states", "epochs", "numbers", "admin", "tres")

    def __init__(self) -> None:
        self.shapes: dict[tuple[bytes, ...], _Shape] = {}
        self.states: dict[bytes, str] = {}
        self.epochs: dict[bytes, float | None] = {}
        self.numbers: dict[bytes, int] = {}
        self.admin: dict[bytes, str] = {}
        self.tres: dict[bytes, tuple[tuple[int, str | None], int]] = {}

    def epoch(self, field: bytes) -> float | None:
        try:
            return self.epochs[field]
        except KeyError:
            out = self.epochs[field] = parse_epoch(_text(field))
            return out

    def number(self, field: bytes) -> int:
        out = self.numbers.get(field)
        if out is None:
            out = self.numbers[field] = _number(field)
        return out


def _job(values: tuple[bytes, ...], config: Config, node_types: Mapping[str, str | None],
         seen: _Seen) -> tuple[int, SlurmJob, _Shape]:
    """(the job's number, the job, its shape) of one record."""
    job_number = _number(values[0])
    key = _SHAPE_OF(values)
    shape = seen.shapes.get(key)
    if shape is None:
        shape = seen.shapes[key] = _shape(key, config, node_types, seen)
    if job_number <= 0:
        raise _Refused("not a job id")
    prio = seen.number(values[5])
    pending = shape.pending
    admin = seen.admin.get(values[22])
    if admin is None:
        admin = seen.admin[values[22]] = user_text(_text(values[22]))
    return job_number, job_of({
        **shape.fields,
        "job_id": str(job_number),
        "name": user_text(_text(values[20])),
        "priority": prio if 0 <= prio < 0xFFFFFFFE else 0,
        "submit_time": seen.epoch(values[6]) or 0.0,
        "start_time": seen.epoch(values[7]) if not pending else None,
        "end_time": seen.epoch(values[8]) if shape.finished else None,
        "comment": user_text(_text(values[21])),
        "admin_comment": admin,
        "begin_time": seen.epoch(values[9]) if pending else None,
    }), shape


def _shape(key: tuple[bytes, ...], config: Config, node_types: Mapping[str, str | None], seen: _Seen) -> _Shape:
    """The `_Shape` of a record's `_SHAPE_OF` fields, checked as `_job` checks a record."""
    (state_f, user, uid, partition, limit, num_nodes, num_tasks, per_node_t, per_job_t, per_task_t, nodes, nice,
     reason, features) = key
    state = _state(state_f, seen)
    reason = _text(reason).strip()
    if reason not in REASONS:
        raise _Refused(f"its reason {reason[:60]!r} is not one of Slurm's reason names (--json names it)")
    n_nodes = max(1, _number(num_nodes))
    n_tasks = _number(num_tasks) or 1
    (per_job, t_job), job_shards = _tres(per_job_t, seen.tres)
    (per_node, t_node), node_shards = _tres(per_node_t, seen.tres)
    (per_task, t_task), task_shards = _tres(per_task_t, seen.tres)
    shards = job_shards + node_shards * n_nodes + task_shards * n_tasks
    if shards and state != PENDING:
        raise _Refused("a running shard job: which GPU it holds is only in --json's gres_detail")
    typed = t_job or t_node or t_task
    node_list = _field(_text(nodes)) if state != PENDING else ""
    fields = {
        "state": state,
        "user": _text(user).strip() or str(_number(uid)),
        "partition": _text(partition).strip(),
        "time_limit_s": _limit_s(_text(limit)),
        "num_nodes": n_nodes,
        "num_gpus": per_job + per_node * n_nodes + per_task * n_tasks,
        "gpus_per_node": per_node or None,
        "gres_gpu_type": config.canonical_gpu_type(typed) if typed else None,
        "features": _field(_text(features)),
        "nodes": node_list,
        "gpu_type": gpu_type_on(node_list, node_types),
        "reason": _field(reason),
        "nice": _number(nice),
        "gpu_index": (),
        "shards": shards,
        "exc_nodes": "",
    }
    head = _SEP.join([v.rstrip(b" ") for v in (state_f, user, partition)]) + _SEP
    body = _SEP.join([v.rstrip(b" ") for v in (limit, num_nodes, num_tasks, per_node_t, per_job_t, per_task_t,
                                               nodes, nice, features)]) + _SEP
    return _Shape(fields, state == PENDING, state in FINISHED_STATES, head, body)


def _tres(field: bytes, seen: dict) -> tuple[tuple[int, str | None], int]:
    """((GPUs, type), shards) of a TRES field, each distinct text parsed once per read."""
    out = seen.get(field)
    if out is None:
        text = _text(field)
        out = seen[field] = (parse_gpu_tres(text), parse_shards(text))
    return out
