"""Parsers of what squeue, sinfo and failed Slurm commands print (the command-line backend's reads).

- The queue is read by fixed widths (msched.slurm.cli.tight) or, where that cannot read it, as
  `squeue --json` (parse_squeue): every user-controlled string arrives as its own escaped JSON string,
  so no comment, job name or feature can forge a field or a row (issue 13). Both give the same jobs.
- sinfo is read with `-O field:SEP,...` (an empty width and a suffix: each field unpadded, untruncated,
  followed by SEP); its fields are the administrator's (node names, GRES, features), not users'.
  SLURM_TIME_FORMAT=%s makes every timestamp epoch seconds, so no time zone guessing.
- Error messages are classified here (controller unreachable, job no longer pending, other refusal).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from msched.config import Config
from msched.slurm.base import (
    FINISHED_STATES,
    HOSTLIST_ITEM_RE,
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

NODE_FIELDS = ("NodeList", "StateComplete", "Gres", "GresUsed", "Features", "Partition")
# What the light round's digest reads of every job (`squeue -O`, CliClient.queue_digest): the fields
# job_from_json turns into a SlurmJob, less those Slurm rewrites by itself while nothing happens: the
# reason, and a pending job's expected start and end (backfill's estimates). A running job's start and
# a finished job's end do not move; a job that starts or ends changes its state. Held jobs show as
# priority 0 (Reason is left out), jobs waiting on another by their Dependency. Each is a field of the
# tight read (msched.slurm.cli.tight), in its order: a round that reads the queue tightly has the same
# bytes in hand and hashes them without a second squeue (CliClient.read_digest).
DIGEST_JOB_FIELDS = ("JobID", "State", "UserName", "Partition", "PriorityLong", "SubmitTime", "EligibleTime",
                     "TimeLimit", "NumNodes", "NumTasks", "tres-per-node", "tres-per-job", "tres-per-task",
                     "NodeList", "Nice", "Feature", "Name", "Comment", "admin_comment", "Dependency")

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
# a shard item, typed or not: `shard:8`, `shard:titanxp:8` (how sinfo and scontrol print a node's shards,
# though gres.conf names no type: tests/data/slurm/sinfo_shards.txt), `gres:shard:2` (a job's request)
_SHARD_RE = re.compile(r"(?:^|,)(?:gres[:/])?shard(?::[^:,()]+)?:(\d{1,6})(?=$|[,(])")


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


def parse_shards(text: str) -> int:
    """Shards in a GRES/TRES string: a node's configured `Gres` (`gpu:titanxp:4,shard:titanxp:8` -> 8) or
    a job's request (`gres:shard:2` -> 2); 0 when none. Never given a node's `GresUsed`: Slurm 22.05
    prints fewer shards there than its jobs hold (tests/data/slurm/scontrol_nodes_shards.txt: 2 where
    four jobs hold 6), so what a GPU holds is counted from the jobs (`ShardGpu.held`)."""
    if not text or text.strip() in _EMPTY:
        return 0
    return sum(int(m.group(1)) for m in _SHARD_RE.finditer(text.strip()))


def user_text(value: str) -> str:
    """A job's name, comment or admin comment as both queue reads give it (msched.slurm.cli.tight):
    without trailing spaces, and `(null)` (what `squeue -O` prints for an empty field) as empty."""
    value = value.rstrip(" ")
    return "" if value == "(null)" else value


def _field(value: str) -> str:
    value = value.strip()
    return "" if value in _EMPTY else value


def _int(value: str, default: int = 0) -> int:
    try:
        return int(value.strip())
    except ValueError:
        return default


_NO_VALUE = 0xFFFFFFFE          # Slurm's NO_VAL / INFINITE (0xFFFFFFFF) for 32-bit fields and above


class SqueueFormatError(SlurmError):
    """squeue --json printed something that is not the document it documents (one line)."""


def _json_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _json_int(value: object, default: int = 0) -> int:
    """An integer field of squeue's JSON; a missing, non-integer or NO_VAL/INFINITE value -> default."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _NO_VALUE:
        return default
    return value


def _json_epoch(value: object) -> float | None:
    v = _json_int(value)
    return float(v) if v > 0 else None


def job_from_json(d: Mapping[str, object], config: Config, node_types: Mapping[str, str | None]) -> SlurmJob | None:
    """One job of `squeue --json` (OpenAPI v0.0.38, Slurm 22.05) as a SlurmJob; None for a record with no
    usable job id. Every user-controlled string (name, comment, features) is taken whole from its own
    JSON string: no byte a user types can move it into another field or another job."""
    job_id = _json_int(d.get("job_id"), -1)
    if job_id <= 0:
        return None
    state = _json_str(d.get("job_state")).strip().split(" ")[0].upper()
    num_nodes = max(1, _json_int(d.get("node_count"), 1))
    num_tasks = _json_int(d.get("tasks"), 1) or 1
    per_job, t_job = parse_gpu_tres(_json_str(d.get("tres_per_job")))
    per_node, t_node = parse_gpu_tres(_json_str(d.get("tres_per_node")))
    per_task, t_task = parse_gpu_tres(_json_str(d.get("tres_per_task")))
    num_gpus = per_job + per_node * num_nodes + per_task * num_tasks
    shards = (parse_shards(_json_str(d.get("tres_per_job"))) + parse_shards(_json_str(d.get("tres_per_node"))) * num_nodes
              + parse_shards(_json_str(d.get("tres_per_task"))) * num_tasks)
    typed = t_job or t_node or t_task
    nodes = _field(_json_str(d.get("nodes"))) if state != PENDING else ""
    gpu_type = gpu_type_on(nodes, node_types)
    limit_min = d.get("time_limit")
    limit = _json_int(limit_min, -1)
    priority = _json_int(d.get("priority"))
    return SlurmJob(
        job_id=str(job_id),
        state=state,
        name=user_text(_json_str(d.get("name"))),
        user=_json_str(d.get("user_name")).strip() or str(_json_int(d.get("user_id"), -1)),
        partition=_json_str(d.get("partition")).strip(),
        priority=priority,
        submit_time=_json_epoch(d.get("submit_time")) or 0.0,
        start_time=_json_epoch(d.get("start_time")) if state != PENDING else None,
        end_time=_json_epoch(d.get("end_time")) if state in FINISHED_STATES else None,
        time_limit_s=float(limit) * 60 if limit > 0 else None,
        num_nodes=num_nodes,
        num_gpus=num_gpus,
        gpus_per_node=per_node or None,
        gres_gpu_type=config.canonical_gpu_type(typed) if typed else None,
        features=_field(_json_str(d.get("features"))),
        comment=user_text(_json_str(d.get("comment"))),
        nodes=nodes,
        gpu_type=gpu_type,
        reason=_field(_json_str(d.get("state_reason"))),
        admin_comment=user_text(_json_str(d.get("admin_comment"))),
        nice=_json_signed(d.get("nice")),
        begin_time=_json_epoch(d.get("eligible_time")) if state == PENDING else None,
        gpu_index=parse_gres_index(d.get("gres_detail")) if state != PENDING and shards else (),
        shards=shards,
    )


# One node's GRES allocation in squeue --json's gres_detail (and `scontrol show job -d`'s GRES=), e.g.
# `shard:1(IDX:0)`, `gpu:titanxp:2(IDX:0-1)`, `gpu:a100:3(IDX:0,2-3)` (recorded: tests/data/slurm/squeue_shards.json).
_GRES_IDX_RE = re.compile(r"(?:gpu|shard)(?::[\w.-]{1,64})?:\d{1,4}\(IDX:(\d{1,4}(?:-\d{1,4})?(?:,\d{1,4}(?:-\d{1,4})?){0,63})\)")
MAX_GPU_INDEX = 1023


def parse_gres_index(detail: object) -> tuple[int, ...]:
    """The GPU indices a running job holds on its first node, from squeue --json's `gres_detail` (one
    string per node, written by slurmctld from the allocation: no user text reaches it, and as a JSON
    string no comment or name can spill into it). For a shard job, the GPU whose shards it holds: what
    tells the round which shard jobs share a GPU (msched.rounds.packing.shard_view). Bounded: the first
    node's entry only, a whole-string match of the documented form, at most 64 ranges of indices below
    1024; anything else -> () (unknown, never a guess)."""
    if not isinstance(detail, list) or not detail or not isinstance(detail[0], str) or len(detail[0]) > 512:
        return ()
    m = _GRES_IDX_RE.fullmatch(detail[0])
    if m is None:
        return ()
    out: set[int] = set()
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not 0 <= a <= b <= MAX_GPU_INDEX:
            return ()
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def gpu_type_on(nodes: str, node_types: Mapping[str, str | None]) -> str | None:
    """The GPU type of the first node of a job's node list that has one (None: none known)."""
    return next((node_types[n] for n in expand_hostlist(nodes) if node_types.get(n)), None) if nodes else None


def _json_signed(value: object) -> int:
    """A signed 32-bit field (nice) that squeue --json (22.05) prints as its unsigned bits: -7 is
    4294967289 (measured on the dev cluster; 0 comes as null)."""
    if not isinstance(value, int) or isinstance(value, bool) or not -_NO_VALUE < value < _NO_VALUE:
        return 0
    return value - (1 << 32) if value >= 1 << 31 else value


# The fields `job_from_json` reads: squeue's job records are cut to these as they are decoded (below).
SQUEUE_FIELDS = frozenset((
    "job_id", "job_state", "node_count", "tasks", "tres_per_job", "tres_per_node", "tres_per_task", "nodes",
    "time_limit", "priority", "name", "user_name", "user_id", "partition", "submit_time", "start_time",
    "end_time", "features", "comment", "state_reason", "admin_comment", "nice", "eligible_time", "gres_detail",
))


def _only_job_fields(d: dict) -> dict:
    """json object_hook: a job record (it has a job_id) keeps only SQUEUE_FIELDS. squeue --json prints
    ~100 fields per job; parse_squeue of 10,000 jobs (32 MB) peaked at 125 MB decoded whole and at 92 MB
    cut as they are decoded, and took 0.29 s of CPU instead of 0.38 (measured on the dev cluster's output)."""
    if "job_id" in d:
        return {k: d[k] for k in SQUEUE_FIELDS if k in d}
    return d


def _json_document(raw: bytes | str, command: str, object_hook=None) -> dict:  # noqa: ANN001
    """A `squeue --json` / `sacct --json` document with a list of jobs. Bytes that are not UTF-8 become
    U+FFFD; an error record is SlurmUnavailable (22.05 exits 0 with an empty job list and an error record
    when the controller cannot be reached, recorded: tests/data/slurm/squeue_down.json: an empty list
    must never be believed); anything else malformed is SqueueFormatError."""
    import json

    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    try:
        doc = json.loads(text, object_hook=object_hook)
    except ValueError as exc:
        raise SqueueFormatError(f"{command} --json printed no valid JSON ({exc.msg} at character {exc.pos})") from None
    _check_document(doc, command)
    return doc


def _check_document(doc: object, command: str) -> None:
    """The error records and the list of jobs of a parsed document (`_json_document`)."""
    if not isinstance(doc, dict):
        raise SqueueFormatError(f"{command} --json printed no list of jobs")
    errors = doc.get("errors")
    if errors and all(isinstance(e, dict) and "Nothing found" in f"{e.get('description')} {e.get('error')}"
                      for e in errors):
        errors = None       # sacct --json with no job in the window: an error record "Nothing found"
        doc["jobs"] = doc.get("jobs") or []
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {}
        what = "; ".join(str(first.get(k, "")) for k in ("description", "source", "error") if first.get(k))
        raise SlurmUnavailable(f"{command} --json could not read the jobs from the controller: "
                               f"{_one_line(what) or 'no description'}")
    if not isinstance(doc.get("jobs"), list):
        raise SqueueFormatError(f"{command} --json printed no list of jobs")


_WS = re.compile(r"[ \t\n\r]*")


class _StreamedDocument:
    """A `--json` document read as it arrives, in chunks: the top-level object's members other than
    "jobs" decoded whole (they are small), the "jobs" list one record at a time (`records()`), so the
    document's text is never whole in memory. At 10,000 pending beside 10,000 finished jobs squeue prints
    ~64 MB: read whole, its bytes, their text and the decoded records were alive together (a round's
    process peaked at 223-246 MB, measured on the dev cluster). Each value is decoded by the json
    module's own decoder (`raw_decode`); when a chunk ends inside it, the next chunk is read and the
    value decoded again from its start. Errors as `_json_document`'s, once the document has ended."""

    def __init__(self, chunks: Iterable[bytes | str], command: str, object_hook=None) -> None:  # noqa: ANN001
        import codecs
        import json

        self._chunks = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder = json.JSONDecoder(object_hook=object_hook)
        self._buf = ""
        self._pos = 0
        self._read = 0                  # characters dropped from the front of the buffer
        self._eof = False
        self.command = command
        self.members: dict = {}

    def _more(self) -> bool:
        """Read the next chunk into the buffer (what was consumed is dropped); False at the end."""
        if self._eof:
            return False
        chunk = next(self._chunks, None)
        if chunk is None:
            self._eof = True
            text = self._utf8.decode(b"", final=True)
        else:
            text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        self._read += self._pos
        self._buf = self._buf[self._pos:] + text
        self._pos = 0
        return True

    def _bad(self, what: str) -> SqueueFormatError:
        return SqueueFormatError(f"{self.command} --json printed no valid JSON ({what} at character "
                                 f"{self._read + self._pos})")

    def _peek(self) -> str:
        """The next character that is not white space ("" at the end of the document)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._more():
                return ""

    def _take(self, allowed: str) -> str:
        c = self._peek()
        if not c or c not in allowed:
            raise self._bad(f"Expecting one of {allowed!r}" if c else "Unexpected end of document")
        self._pos += 1
        return c

    def _value(self):  # noqa: ANN202 - any JSON value
        import json

        self._peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._more():
                    continue
                self._pos = exc.pos
                raise self._bad(exc.msg) from None
            if end == len(self._buf) and not isinstance(value, dict | list | str) and self._more():
                continue                # a number the chunk cut may go on in the next one
            self._pos = end
            return value

    def records(self):  # noqa: ANN201 - Iterator of the "jobs" list's items
        """The jobs list's items, in order; then the document is checked (`_check_document`)."""
        self._take("{")
        if self._peek() == "}":
            self._pos += 1
        else:
            while True:
                key = self._value()
                if not isinstance(key, str):
                    raise self._bad("Expecting a member name")
                self._take(":")
                if key == "jobs" and self._peek() == "[":
                    self._pos += 1
                    self.members["jobs"] = []
                    if self._peek() == "]":
                        self._pos += 1
                    else:
                        while True:
                            yield self._value()
                            if self._take(",]") == "]":
                                break
                else:
                    self.members[key] = self._value()
                if self._take(",}") == "}":
                    break
        if self._peek():
            raise self._bad("Extra data")
        _check_document(self.members, self.command)


def parse_squeue(raw: bytes | str | Iterable[bytes], config: Config,
                 node_types: Mapping[str, str | None]) -> list[SlurmJob]:
    """Parse `squeue --json` output, whole or as the chunks in which it arrives (CliClient streams it
    from the pipe: `_StreamedDocument`): every job Slurm still remembers (22.05 ignores `-t` with
    --json, so the caller filters states in code).

    Why JSON: `squeue -o/-O` print a comment raw, newlines and separators included, so a comment could
    forge whole rows (issue 13). In the JSON document every string is escaped. Slurm copies bytes that
    are not UTF-8 through unescaped (measured on 22.05.8): they are decoded as U+FFFD, which cannot
    close a string (only `"` and `\\` can, and Slurm escapes those). A document that does not parse
    raises SqueueFormatError: the round then changes nothing. A record that is not a job is skipped."""
    doc = _StreamedDocument([raw] if isinstance(raw, bytes | str) else raw, "squeue", _only_job_fields)
    del raw             # a whole document passed without a reference kept is freed as it is consumed
    jobs = []
    for d in doc.records():
        if isinstance(d, dict):
            job = job_from_json(d, config, node_types)
            if job is not None:
                jobs.append(job)
    return jobs


def node_names_in(raw_jobs: list[SlurmJob]) -> set[str]:
    return {n for j in raw_jobs for n in expand_hostlist(j.nodes)}


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
        used, _ = parse_gpu_tres(v["GresUsed"])      # its GPUs only: its shards there are undercounted
        features = tuple(f for f in _field(v["Features"]).split(",") if f)
        merged[name] = {
            "name": name,
            "gpu_type": config.canonical_gpu_type(gtype) if gtype else None,
            "gpus": gpus,
            "gpus_alloc": used,
            "shards": parse_shards(v["Gres"]),
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



# ------------------------------------------------------------------------------ a pending job's ExcNodeList
# `squeue -h -t PD -j <ids> -o "%i %x"` (CliClient.excluded_nodes): the job id, one space, the excluded
# nodes as a Slurm host list (`n[1-3]`; empty: none). 22.05's `-O` has no field for it (`ExcNodes` is
# refused: "Invalid job format specification"), and `%Nx` with a width cuts the list (measured on the dev
# cluster), so the read is unpadded lines. What a user can put there is checked by Slurm: `scontrol
# update ExcNodeList=` refuses a name that is not one of the admin's nodes, so the list holds node names
# only (no space, no newline). The line is still matched whole: anything else (a job array's `12_3`, an
# id not asked for, an id printed twice, a range over MAX_LISTED names) leaves that job out: unknown,
# and the round then writes nothing on it.
_EXC_LINE_RE = re.compile(r"(\d{1,12}) ([\w.\-\[\],]{0,8192})", re.ASCII)
MAX_LISTED = 4096          # names one excluded list may expand to


def hostlist_names(text: str, limit: int = MAX_LISTED) -> tuple[str, ...] | None:
    """The sorted, distinct names of a Slurm host list, or None when it would expand to more than
    `limit` names or is not a host list (counted before anything is expanded)."""
    total = 0
    for item in HOSTLIST_ITEM_RE.findall(text):
        count = 1
        for ranges in re.findall(r"\[([^\]]*)\]", item):
            k = 0
            for part in ranges.split(","):
                lo, _, hi = part.partition("-")
                if not (lo.isascii() and lo.isdigit() and len(lo) <= 9) or \
                        (hi and not (hi.isascii() and hi.isdigit() and len(hi) <= 9 and int(hi) >= int(lo))):
                    return None
                k += int(hi) - int(lo) + 1 if hi else 1
            count *= k
            if count > limit:
                return None
        total += count
        if total > limit:
            return None
    return tuple(sorted(set(expand_hostlist(text))))


def parse_excluded(out: str, wanted: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """{job id: its excluded node names} from `squeue -h -o "%i %x"` (above); only the ids in `wanted`,
    each printed exactly once on a line of the documented form."""
    wanted = set(wanted)
    seen: dict[str, tuple[str, ...] | None] = {}
    for line in out.split("\n"):
        m = _EXC_LINE_RE.fullmatch(line.rstrip("\r"))
        if m is None:
            continue
        job_id = str(int(m.group(1)))
        if job_id not in wanted:
            continue
        seen[job_id] = None if job_id in seen else hostlist_names(m.group(2))
    return {k: v for k, v in seen.items() if v is not None}
