"""The command-line Slurm backend: sbatch, squeue, sinfo, scontrol and scancel.

Why the command line: it works against any Slurm the site runs (pyslurm must match the Slurm version
exactly, SLURM-NOTES), and it is the backend CI proves against a real local cluster.

How it reads Slurm:
- The queue is read by the tight read (msched.slurm.cli.tight, config `tight_queue`, on by default):
  `squeue -h -t all -O` with every field at a fixed width in bytes, sliced at fixed offsets, so no byte
  a user types can move a field or a row; a job whose text fills a width is read again wider by id.
  Where that read cannot be used (text longer than even the wide widths, a reason --json would name
  differently, a running shard job, anything malformed) the round reads `squeue --json`
  (msched.slurm.cli.parsers.parse_squeue): a job's comment, name and features are each one escaped JSON
  string, so no byte a user types (newline, 0x1f, ESC...) can forge a field or a row (issue 13, verified
  on 22.05.8 against comments holding every control byte: tests/data/slurm/squeue.json). 22.05 ignores
  `-t` and `-j` with `--json`: states and ids are filtered here. Output is read as bytes; what is not
  UTF-8 becomes U+FFFD (Slurm passes such bytes through raw). Both reads give the same jobs, in job id
  order (tests/test_tight_queue.py).
- SLURM_TIME_FORMAT=%s makes sinfo's timestamps epoch seconds (the JSON reads carry epochs and run
  without it), so no time zone guessing.
- One squeue per `jobs()`, one sinfo per `nodes()`. The GPU type of a running job comes from the
  nodes it runs on: a node -> type map cached from sinfo, refreshed only when an unknown node shows up.
- `finished_jobs()` merges squeue's memory of ended jobs (MinJobAge), `sacct --json` where the cluster
  runs slurmdbd, and the jobcomp/filetxt file where configured (read backwards only as far as needed);
  no finished record overrides a job squeue shows in another state.
- `set_priority` checks the job is pending first (one squeue): scontrol accepts a priority for a
  running job silently, and the round core relies on JobNotPending to skip jobs that started.
- A round's writes go through `update_jobs()`: one `squeue -t PD` for the pending check of every job
  (`squeue --jobs=ID` for each of at most PENDING_BY_ID jobs: the controller reads one job), then one `scontrol` for all feature updates and one for all priority updates (features first: a job is
  retyped before it is raised), each reading one `update JobId=N Field=V` command per line from its
  standard input. Measured on 22.05.8 (tests/data/slurm/scontrol_batch.json): scontrol runs every line
  even after one fails, writes one stderr line `<reason> for job <id>` per failed job and exits 1 if
  any failed, so failures come back per job. A job listed in one command (`JobId=1,2,3`) costs one RPC
  per job all the same, so a line per job is as fast and simpler. A priority and features in one
  command are not atomic (a refused feature still writes the priority), hence two processes. A value
  that could not travel on one line unchanged (whitespace, quotes...) goes through its own argv call.
- Every command is an argv list; nothing is ever passed through a shell. Every child dies with the
  round that started it (PR_SET_PDEATHSIG): a killed round's scontrol batch cannot overlap the next round.
"""


from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from msched.config import Config, load_config
from msched.slurm.base import (
    ACTIVE_STATES,
    FINISHED_STATES,
    PENDING,
    UPDATE_FIELDS,
    JobNotPending,
    JobRequest,
    JobUpdate,
    SchedulerSettings,
    SlurmClient,
    SlurmError,
    SlurmJob,
    SlurmNode,
    SlurmUnavailable,
    UpdateResult,
    check_updates,
    each_job,
)
from msched.slurm.cli.accounting import (
    HISTORY_DEFAULT_S,
    SACCT_STATES,
    jobcomp_tail_lines,
    parse_jobcomp,
    parse_sacct,
)
from msched.slurm.cli.parsers import (
    DIGEST_JOB_FIELDS,
    NODE_FIELDS,
    SEP,
    _one_line,
    classify_error,
    format_time_limit,
    gpu_type_on,
    node_names_in,
    parse_excluded,
    parse_sinfo,
    parse_squeue,
)
from msched.slurm.cli.tight import NARROW, REREAD_MAX, WIDE, parse_tight, tight_format
from msched.slurm.cli.writes import (
    _SCONTROL_KEY,
    parse_scontrol_errors,
    scontrol_job_line,
    scontrol_update_line,
)

log = logging.getLogger(__name__)
EXC_BATCH = 500            # jobs per squeue that reads excluded nodes (excluded_nodes)
# the lines of `sdiag` that `activity` keeps: the job counters (reset daily; "Data since" says from when)
ACTIVITY_LINES = ("Data since", "Jobs submitted:", "Jobs started:", "Jobs completed:", "Jobs canceled:",
                  "Jobs failed:")
QUEUE_REUSE_S = 120.0      # finished_jobs reuses the queue jobs() read this recently (one squeue per round)
FOLLOW_BYTES = 256 * 1024  # a followed read (`_Following`) hands over this much at a time while its command writes
FOLLOW_POLL_S = 0.001      # how often it looks for more
TAGS_AHEAD = 64            # jobs whose tags the tight read parses at a time while it waits (`_TagsAhead`)
PENDING_BY_ID = 3          # a round that writes this many jobs or fewer asks squeue for each by id (`pending_job_ids`)
LOCAL_ZONE = ":/etc/localtime"   # the TZ every Slurm command runs with where none is set (`CliClient._env`)
_GONE = "Invalid job id specified"      # squeue -j of a job the controller no longer knows (exit status 1)


_SPACES_BEFORE_SEP = re.compile(b" +" + SEP.encode())


def _digest_lines(squeue_out: bytes) -> bytes:
    """The digest squeue's output (or the tight read's lines of it) without the spaces before each field
    separator. The tight read pads every value with spaces, so it cannot see a value's own trailing
    spaces; without this, one job named `x ` (pending, or ended within MinJobAge) made the digest a full
    round records of its own read differ from the light round's squeue: one more full round after every
    round that planned, for everybody. What is lost is only what the tight read cannot see either (a
    user's spaces before a separator in their own text), so the plan cannot depend on it."""
    return _SPACES_BEFORE_SEP.sub(SEP.encode(), squeue_out)


def _digest(setup: str, outputs: Iterable[bytes]) -> str:
    """The queue digest: `setup`, then each command's output with its length."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    h.update(setup.encode())
    for stdout in outputs:
        h.update(b"\x1e%d\x1e" % len(stdout))
        h.update(stdout)
    return h.hexdigest()


def die_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn (run in the child between fork and exec) asking Linux to SIGKILL the child when the
    round that started it dies (prctl PR_SET_PDEATHSIG). A round killed with SIGKILL cannot clean up,
    and its scontrol batch must not keep writing into the next round (issue 13: 6 of 10 tries did).
    Where prctl does not exist it does nothing."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None

    def child() -> None:
        if prctl is None:
            return
        prctl(1, 9, 0, 0, 0)               # PR_SET_PDEATHSIG = 1, SIGKILL = 9
        if os.getppid() != parent:         # the round died before prctl took effect
            os._exit(1)

    return child


def _failed(command: str, message: str, default: type[SlurmError] = SlurmError) -> SlurmError:
    """The error a failed Slurm command raises: the class its message means (`classify_error`), the
    message on one line after the command's name. Every read and write reports a failure this one way."""
    line = _one_line(message)
    return classify_error(line, default)(f"{os.path.basename(command)}: {line}")


def _not_found(command: str) -> SlurmUnavailable:
    """A Slurm command that is not installed (every way the client runs one says it alike)."""
    return SlurmUnavailable(f"{command} not found: is the Slurm client installed?")


def _no_answer(command: str, timeout_s: float) -> SlurmUnavailable:
    """A Slurm command killed after `timeout_s` (every way the client runs one says it alike)."""
    return SlurmUnavailable(f"{os.path.basename(command)} did not answer within {timeout_s:g}s")


def _prefetch_key(argv: list[str], env: Mapping[str, str]) -> tuple:
    """What a started read is found by: the same command line in the same environment."""
    return tuple(argv), tuple(sorted(env.items()))


class _Started:
    """A read-only command started in the background, its output going to unnamed files (no pipe to
    drain meanwhile: 15 MB of squeue at 10,000 jobs); `result` waits for it as `CliClient._raw` runs one."""

    def __init__(self, argv: list[str], env: Mapping[str, str], timeout_s: float):
        import tempfile

        self.argv, self.timeout_s = argv, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                argv, stdout=self.out, stderr=self.err, env=env, preexec_fn=die_with_parent(os.getpid()))
        except FileNotFoundError:
            self.proc = None

    def result(self) -> subprocess.CompletedProcess:
        """The finished command, its standard output as bytes."""
        try:
            self._wait()
            self.out.seek(0)
            self.err.seek(0)
            return subprocess.CompletedProcess(self.argv, self.proc.returncode, self.out.read(), self.err.read())
        finally:
            self.out.close()
            self.err.close()

    def follow(self, idle: Callable[[], bool] | None = None) -> _Following:
        """Its standard output read while the command still writes it (`_Following`, `idle` its work while
        it waits)."""
        if self.proc is None:
            self.abandon()
            raise _not_found(self.argv[0])
        return _Following(self, idle)

    def _wait(self) -> None:
        if self.proc is None:
            raise _not_found(self.argv[0])
        try:
            self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.abandon()
            raise _no_answer(self.argv[0], self.timeout_s) from None

    def abandon(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.err.close()


class _Following:
    """A started command's standard output (the unnamed file it writes), read while it still writes it:
    `readinto` waits until FOLLOW_BYTES more are there or the command has exited, so the tight read parses
    squeue's first records while squeue prints the rest. At 10,000 jobs squeue spends most of its ~0.2 s
    printing 15 MB; the round had waited for all of it before parsing any (settle18i). `finish` waits for
    the command to end and gives its exit status and standard error; `close` ends one not finished."""

    def __init__(self, started: _Started, idle: Callable[[], bool] | None = None):
        self.started = started
        self.idle = idle            # work to do while waiting for more (True: it did some, ask again)
        # read at offsets of its own (pread): the file's offset is the command's too (its standard output
        # shares the open file), so a seek or read here would move where the command writes
        self.fd = started.out.fileno()
        self.at = 0
        self.done = False

    def readinto(self, buf: bytearray | memoryview) -> int:
        """Bytes into `buf`, at least FOLLOW_BYTES (or all of `buf`) unless the command has ended; 0 once
        it has ended and all it wrote was read."""
        want = min(len(buf), FOLLOW_BYTES)
        while not self.done:
            if os.fstat(self.fd).st_size - self.at >= want:
                break
            if self.started.proc.poll() is not None:
                self.done = True            # all it wrote is in the file now
                break
            if time.monotonic() > self.started.deadline:
                self.started.abandon()
                raise _no_answer(self.started.argv[0], self.started.timeout_s)
            if self.idle is None or not self.idle():
                time.sleep(FOLLOW_POLL_S)
        n = os.preadv(self.fd, [buf], self.at)
        self.at += n
        return n

    def finish(self) -> subprocess.CompletedProcess:
        """The ended command: its exit status and standard error (its output is what was read)."""
        started = self.started
        started._wait()
        started.err.seek(0)
        return subprocess.CompletedProcess(started.argv, started.proc.returncode, b"", started.err.read())

    def close(self) -> None:
        self.started.abandon()

    def __enter__(self) -> _Following:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _TagsAhead:
    """The tight read's work while it waits for squeue to write more (`_Following`'s `idle`): the tags of
    the jobs read so far, TAGS_AHEAD at a time. A round asks every job's tag (ingestion first, then the
    snapshot), and `SlurmJob.tag`'s parse is cached by the comment's text (`msched.tag.parse_tag`), so
    those parses are done here, in time the round spent waiting (~0.04 s of CPU at 10,000 jobs, settle18i)."""

    def __init__(self, jobs: list[SlurmJob]):
        self.jobs = jobs            # the list the parse appends to
        self.done = 0

    def __call__(self) -> bool:
        batch = self.jobs[self.done:self.done + TAGS_AHEAD]
        for job in batch:
            job.tag                 # noqa: B018 - parsed for its cache
        self.done += len(batch)
        return bool(batch)


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
        # (monotonic time, every job read, the `finished_before` it left out jobs by, their ids)
        self._last_queue: tuple[float, list[SlurmJob], float | None, list[str]] | None = None
        self._ended: tuple[float, list[str]] | None = None     # the last read's jobs left out (`parse_tight`)
        self.last_read = ""                     # how the last queue read read it: "tight" or "json"
        # the last queue read's lines as the digest's squeue prints them, and the last sinfo's output
        # (`read_digest`); None where that read cannot give them (--json, an error printed)
        self._read_lines: bytes | None = None
        self._read_sinfo: bytes | None = None
        self._prefetched: dict[tuple, _Started] = {}      # reads `prefetch` started, by (argv, environment)
        # (monotonic time, since, the node types it typed by, the jobs) of the jobcomp tail read ahead
        self._jobcomp_ahead: tuple[float, float | None, dict[str, str | None], list[SlurmJob]] | None = None

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
        # squeue prints each time through strftime("%s"), which calls mktime; with TZ unset, glibc's mktime
        # stats /etc/localtime again on every call. TZ naming that same file (glibc's default zone) is read
        # once: the same epochs, and at 10,000 jobs ~0.05 s less of squeue's CPU (issue 21, settle18i).
        # A TZ the caller set is kept.
        env.setdefault("TZ", LOCAL_ZONE)
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
            # errors="replace": bytes a user typed that are not UTF-8 must not stop a read
            return subprocess.run(argv, input=input, capture_output=True, text=True, errors="replace",
                                  env=self._env(), timeout=limit, preexec_fn=die_with_parent(os.getpid()))
        except FileNotFoundError:
            raise _not_found(argv[0]) from None
        except subprocess.TimeoutExpired:
            raise _no_answer(argv[0], limit) from None

    def _json_env(self) -> dict[str, str]:
        env = self._env()
        # JSON carries epoch seconds already; with SLURM_TIME_FORMAT=%s, 22.05's sacct --json rejects
        # its own -S/-E ("Invalid time specification") and prints an error record
        env.pop("SLURM_TIME_FORMAT", None)
        return env

    def _stream(self, argv: list[str], chunk: int = 1 << 20) -> Iterator[bytes]:
        """Run a read-only command and yield its standard output as it arrives (squeue --json: parsed
        chunk by chunk, `parse_squeue`, so the tens of MB of a 20,000-job queue are never whole in
        memory). Errors as `_run_bytes`: a missing command or one that does not answer within the
        timeout (killed) is SlurmUnavailable, a failed one is classified by its message, raised when
        its output ends (so the parser never mistakes a failed read for a document)."""
        import tempfile
        import threading

        argv = [self._cmd(argv[0]), *argv[1:]]
        with tempfile.TemporaryFile() as err:   # a file, not a pipe: a chatty stderr cannot block the read
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=self._json_env(),
                                        preexec_fn=die_with_parent(os.getpid()))
            except FileNotFoundError:
                raise _not_found(argv[0]) from None
            killed: list[bool] = []
            timer = threading.Timer(self.timeout_s, lambda: (killed.append(True), proc.kill()))
            timer.start()
            try:
                assert proc.stdout is not None
                while data := proc.stdout.read(chunk):
                    yield data
                rc = proc.wait()
            finally:
                timer.cancel()
                proc.stdout.close()
                if proc.poll() is None:         # the reader stopped early (a parse error): end the command
                    proc.kill()
                    proc.wait()
            if killed:
                raise _no_answer(argv[0], self.timeout_s)
            if rc != 0:
                err.seek(0)
                raise _failed(argv[0], err.read().decode("utf-8", errors="replace"))

    def _raw(self, argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess:
        """Run a read-only command, its output as bytes; a missing or hung command is SlurmUnavailable.
        A command `prefetch` started with the same argv and environment is collected instead (once)."""
        argv = [self._cmd(argv[0]), *argv[1:]]
        started = self._prefetched.pop(_prefetch_key(argv, env), None)
        if started is not None:
            return started.result()
        try:
            return subprocess.run(argv, capture_output=True, env=env, timeout=self.timeout_s,
                                  preexec_fn=die_with_parent(os.getpid()))
        except FileNotFoundError:
            raise _not_found(argv[0]) from None
        except subprocess.TimeoutExpired:
            raise _no_answer(argv[0], self.timeout_s) from None

    def _follow(self, argv: list[str], idle: Callable[[], bool] | None = None) -> _Following:
        """A read-only command's output as it writes it (`_Following`, `idle` its work while it waits): the
        one `prefetch` started with the same argv, else one started now. A missing command is
        SlurmUnavailable."""
        env = self._env()
        argv = [self._cmd(argv[0]), *argv[1:]]
        started = self._prefetched.pop(_prefetch_key(argv, env), None) or _Started(argv, env, self.timeout_s)
        return started.follow(idle)

    def prefetch(self) -> bool:
        """`SlurmClient.prefetch`: start the round's reads now, in the background, each into a file: the
        tight squeue (with `tight_queue`) and the sinfo that `nodes()` runs. The next `jobs()` and `nodes()`
        collect them: the queue's ~0.3 s of squeue and controller time at 10,000 jobs (measured on the dev
        cluster) then overlaps what the round does before it needs the queue (importing the planning
        core, the policy, the estimator). A command not collected is ended by `close`."""
        env = self._env()
        reads = [self._sinfo_argv()]
        if self.config.tight_queue:
            reads.insert(0, ["squeue", "-h", "-t", "all", "-O", tight_format(NARROW)])
        for argv in reads:
            argv = [self._cmd(argv[0]), *argv[1:]]
            key = _prefetch_key(argv, env)
            if key not in self._prefetched:
                self._prefetched[key] = _Started(argv, env, self.timeout_s)
        return True

    def prefetch_activity(self) -> None:
        """`SlurmClient.prefetch_activity`: start the `sdiag` the next `activity()` collects."""
        env = self._env()
        argv = [self._cmd("sdiag")]
        key = _prefetch_key(argv, env)
        if key not in self._prefetched:
            self._prefetched[key] = _Started(argv, env, self.timeout_s)

    def activity(self) -> str | None:
        """`SlurmClient.activity`: `sdiag`'s job counters and the time they count from (one RPC that reads
        the controller's statistics, not its job table: 0-40 ms of wall and no measurable CPU at 10,000
        jobs on the dev cluster). None when sdiag fails, prints an error or lacks a counter."""
        try:
            proc = self._raw(["sdiag"], self._env())
        except SlurmError:
            return None
        if proc.returncode != 0 or proc.stderr.strip():
            return None
        found = [line.strip() for line in proc.stdout.decode("utf-8", errors="replace").splitlines()
                 if line.strip().startswith(ACTIVITY_LINES)]
        return "\n".join(found) if len(found) == len(ACTIVITY_LINES) else None

    def close(self) -> None:
        """End the reads `prefetch` started that no read collected."""
        while self._prefetched:
            self._prefetched.popitem()[1].abandon()

    def _run_bytes(self, argv: list[str]) -> bytes:
        """Run a read-only command and return its raw standard output (sacct --json: decoded by its parser)."""
        proc = self._raw(argv, self._json_env())
        if proc.returncode != 0:
            raise _failed(argv[0], proc.stderr.decode("utf-8", errors="replace"))
        return proc.stdout

    def _run(self, argv: list[str], *, input: str | None = None,
             error: type[SlurmError] = SlurmError) -> str:
        proc = self._exec(argv, input=input)
        if proc.returncode != 0:
            raise _failed(self._cmd(argv[0]), proc.stderr or proc.stdout, error)
        return proc.stdout

    @staticmethod
    def _format(fields: Iterable[str]) -> str:
        return ",".join(f"{f}:{SEP}" for f in fields)

    def _sinfo_argv(self) -> list[str]:
        """The one sinfo every node read runs (`nodes`, the digest, `prefetch`: a started one is collected
        only by the same command line)."""
        return ["sinfo", "-h", "-N", "-O", self._format(NODE_FIELDS)]

    # -- reads --------------------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def jobs(self, states: tuple[str, ...] = ACTIVE_STATES) -> list[SlurmJob]:
        """One read of every job Slurm remembers (`_queue`: the tight read or `squeue --json`), states
        filtered here."""
        wanted = {s.upper() for s in states}
        queue = self._queue(self.finished_before)
        before, ended = self._ended or (None, [])
        self._last_queue = (time.monotonic(), queue, before, ended)
        return [j for j in queue if j.state in wanted or "ALL" in wanted]

    def _queue_for_completions(self, since: float | None) -> tuple[list[SlurmJob], list[str]]:
        """The queue as `jobs()` read it up to QUEUE_REUSE_S ago, else a fresh read. A round reads
        the queue, plans, writes, then records completions: reading a 10,000-job queue again costs a
        second `squeue --json` (32 MB at 10,000 jobs, seconds of squeue and controller time, measured
        on the dev cluster). A job that ends after the round's read is found by the next round (its
        completion window overlaps the last one, and squeue keeps finished jobs for MinJobAge).
        With it, the ids of the jobs that read left out (ended before `finished_before`): it is used only
        for a `since` at or after that time, whose answer cannot hold them."""
        last = self._last_queue
        self._last_queue = None                 # once: a later call reads afresh
        if last is not None and time.monotonic() - last[0] <= QUEUE_REUSE_S and \
                (last[2] is None or (since is not None and since >= last[2])):
            return last[1], last[3]
        return self._queue(), []

    def _queue(self, ended_before: float | None = None) -> list[SlurmJob]:
        """Every job Slurm remembers, in job id order: the tight read (msched.slurm.cli.tight) where the
        configuration has it on and it can read this queue, else `squeue --json`. `last_read` says which.
        `ended_before`: the tight read may leave out the jobs that ended before it (`_ended` holds their
        ids; `parse_tight`)."""
        self._read_lines = None
        self._ended = None if ended_before is None else (ended_before, [])
        jobs = self._tight_queue() if self.config.tight_queue else None
        if jobs is None:
            self._ended = None
        self.last_read = "tight" if jobs is not None else "json"
        if jobs is None:
            # parsed as it arrives from the pipe: at 10,000 jobs (32 MB of JSON) the text is never whole
            jobs = parse_squeue(self._stream(["squeue", "--json"]), self.config, self._node_types)
        jobs.sort(key=lambda j: int(j.job_id))
        if node_names_in(jobs) - set(self._node_types):      # a node not seen yet: learn types, type again
            self._refresh_node_types()
            jobs = [dataclasses.replace(j, gpu_type=gpu_type_on(j.nodes, self._node_types)) if j.nodes else j
                    for j in jobs]
        return jobs

    def _tight_queue(self) -> list[SlurmJob] | None:
        """The queue by `squeue -h -t all -O <fixed widths>` (msched.slurm.cli.tight), the jobs with a
        field longer than its width read again wider by id; None where that cannot read it (the caller
        reads --json). An unreachable controller raises SlurmUnavailable as every read does."""
        # the digest's lines are made as the records are read (~5 us per job): keeping the read's bytes
        # to make them later, only for a round that wrote nothing, cost a round 15-28 MB more at its peak
        # (10,000 jobs, measured on the dev cluster, ninth pass)
        lines: list[tuple[int, bytes]] | None = [] if self.digest_wanted else None
        first = self._tight_read(["-t", "all"], NARROW, lines)
        if first is None:
            return None
        jobs, cut = first
        if cut:
            known = len(self._ended[1]) if self._ended is not None else 0
            again = self._tight_read(["-t", "all", "-j", ",".join(cut)], WIDE, lines) \
                if len(cut) <= REREAD_MAX else None
            left_out = self._ended[1][known:] if self._ended is not None else []
            if again is None or again[1] or sorted([j.job_id for j in again[0]] + left_out) != sorted(cut):
                log.info("queue: %d jobs with text longer than the tight read's widths: read by squeue --json",
                         len(cut))
                return None
            jobs.extend(again[0])
        if lines is not None:
            lines.sort()                    # the digest's squeue sorts by job id (-S i)
            self._read_lines = b"".join([line for _, line in lines])
        return jobs

    def _tight_read(self, selection: list[str], widths: tuple[int, ...],
                    lines: list[tuple[int, bytes]] | None = None) -> tuple[list[SlurmJob], list[str]] | None:
        # parsed from the file squeue writes, a chunk at a time as squeue writes it: its 15 MB at 10,000 jobs
        # (1.5 KB a job, finished ones within MinJobAge too) are never whole in memory (tenth pass), and the
        # parse runs beside squeue's printing (`_Following`); what squeue's exit says is checked after
        argv = ["squeue", "-h", *selection, "-O", tight_format(widths)]
        why: list[str] = []
        jobs: list[SlurmJob] = []
        with self._follow(argv, _TagsAhead(jobs)) as stdout:
            out = parse_tight(stdout, self.config, self._node_types, widths, why, lines, self._ended, into=jobs)
            message = self._unclean(argv, stdout.finish())
        if message is not None:
            log.info("queue: squeue -O printed an error (%s): read by squeue --json", message)
            return None
        if out is None:
            log.info("queue: the tight read cannot read this queue (%s): read by squeue --json",
                     _one_line("; ".join(why) or "no reason"))
        return out

    def queue_digest(self, setup: str = "") -> str | None:
        """`SlurmClient.queue_digest`: one `squeue -h -t all -S i -O <DIGEST_JOB_FIELDS>` and one sinfo
        (the one `nodes()` runs), hashed as they come with `setup`. At 10,000 jobs the squeue is a
        fraction of `squeue --json`'s output (no JSON, no ~100 fields per job) and nothing is parsed.
        None when either command prints an error (a field this Slurm does not know: squeue says so on
        stderr and exits 0) or fails other than by the controller being unreachable, which raises
        SlurmUnavailable as every read does. A user can forge nothing with it: a comment holding the
        separator or a newline only changes the bytes hashed (what it cannot tell apart is a user
        moving text between two of their own text fields; the README says so)."""
        outputs = []
        for argv in (["squeue", "-h", "-t", "all", "-S", "i", "-O", self._format(DIGEST_JOB_FIELDS)],
                     self._sinfo_argv()):
            stdout, _ = self._clean_read(argv)
            if stdout is None:
                return None
            outputs.append(stdout)
        return _digest(setup, [_digest_lines(outputs[0]), outputs[1]])

    @property
    def digest_of_read(self) -> bool:       # the tight read's records give the digest's lines
        return bool(self.config.tight_queue)

    def read_digest(self, setup: str = "") -> str | None:
        """`SlurmClient.read_digest`: the digest `queue_digest` would give of the last `jobs()` and
        `nodes()` reads, from their own bytes: the tight read's records give each job's line of the
        digest's squeue (`msched.slurm.cli.tight.digest_line`, sorted by job id as -S i does), and the
        sinfo is the same command. None when the queue was read by --json or either command printed
        an error. A round that reads the queue anyway records this instead of running the digest's squeue
        as well; a later light round compares its own `queue_digest` with it."""
        return self.read_digest_later(setup)()

    def read_digest_later(self, setup: str = "") -> Callable[[], str | None]:
        """`SlurmClient.read_digest_later`: the digest of the reads made so far, hashed when called."""
        lines, sinfo = self._read_lines, self._read_sinfo
        if lines is None or sinfo is None:
            return lambda: None
        return lambda: _digest(setup, [_digest_lines(lines), sinfo])

    def _clean_read(self, argv: list[str]) -> tuple[bytes | None, str]:
        """(standard output, "") of a read-only command that exited 0 and printed nothing on stderr, else
        (None, its one-line error): squeue -O names an unknown field on stderr and still exits 0, so a
        read that must be whole treats any error text as a failed read. An unreachable controller raises
        SlurmUnavailable, as every read does."""
        proc = self._raw(argv, self._env())
        message = self._unclean(argv, proc)
        return (proc.stdout, "") if message is None else (None, message)

    @staticmethod
    def _unclean(argv: list[str], proc: subprocess.CompletedProcess) -> str | None:
        """None for a read-only command that exited 0 and printed nothing on stderr, else its one-line
        error (`_clean_read`); an unreachable controller raises SlurmUnavailable."""
        if proc.returncode == 0 and not proc.stderr.strip():
            return None
        message = _one_line(proc.stderr.decode("utf-8", errors="replace"))
        if proc.returncode != 0 and classify_error(message) is SlurmUnavailable:
            raise SlurmUnavailable(f"{os.path.basename(argv[0])}: {message}")
        return message

    def _refresh_node_types(self) -> None:
        self._node_types = {n.name: n.gpu_type for n in self.nodes()}

    def nodes(self) -> list[SlurmNode]:
        argv = self._sinfo_argv()
        proc = self._raw(argv, self._env())
        err = proc.stderr.decode("utf-8", errors="replace")
        # as `_run` reads it (text mode: invalid UTF-8 replaced, universal newlines)
        out = proc.stdout.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
        if proc.returncode != 0:        # as `_run`
            raise _failed(self._cmd(argv[0]), err or out)
        self._read_sinfo = proc.stdout if not err.strip() else None
        nodes = parse_sinfo(out, self.config)
        self._node_types = {n.name: n.gpu_type for n in nodes}
        return nodes

    def job(self, job_id: str) -> SlurmJob | None:
        """One job by id, in any state Slurm still remembers (None when it has forgotten it)."""
        return next((j for j in self._queue() if j.job_id == str(job_id)), None)

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


    def scheduler(self) -> SchedulerSettings:
        """SchedulerType and SchedulerParameters from `scontrol show config` (read once per client)."""
        conf = self.slurm_config()
        return SchedulerSettings.parse(conf.get("SchedulerType"), conf.get("SchedulerParameters"))
    def finished_jobs(self, since: float | None = None) -> list[SlurmJob]:
        """Finished jobs: squeue's memory (MinJobAge, full detail), then the accounting database
        (sacct, where slurmdbd runs; `since=None` looks back HISTORY_DEFAULT_S), then the
        jobcomp/filetxt file. A job found in several sources comes from the first: squeue keeps the
        comment (the tag) and GPU request; sacct keeps them only with AccountingStoreFlags=job_comment
        and gres/gpu in AccountingStorageTRES; the jobcomp file keeps neither.
        squeue is read last (or its read is reused, `_queue_for_completions`; the jobcomp file may have
        been read ahead, `prefetch_finished`): a job squeue shows in another state is not finished here,
        and one it shows finished comes from squeue, with its tag, rather than from the file without it.
        """
        found: dict[str, SlurmJob] = {}
        conf = self.slurm_config()
        if not self._node_types:
            self._refresh_node_types()
        if conf.get("AccountingStorageType", "").endswith("slurmdbd"):
            start = since if since is not None else self.now() - HISTORY_DEFAULT_S
            out = self._run_bytes([
                "sacct", "--json", "-X", "-a",
                "-S", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)), "-E", "now",
                f"--state={SACCT_STATES}",
            ])
            for job in parse_sacct(out, self.config, self._node_types):
                found.setdefault(job.job_id, job)
        ahead, self._jobcomp_ahead = self._jobcomp_ahead, None
        if ahead is not None and ahead[1] == since and ahead[2] == self._node_types and \
                time.monotonic() - ahead[0] <= QUEUE_REUSE_S:
            jobcomp = ahead[3]
        else:
            jobcomp = self._jobcomp_jobs(since)
        for job in jobcomp:
            found.setdefault(job.job_id, job)
        queue, ended = self._queue_for_completions(since)
        # a job squeue shows in any other state is not finished, whatever a forged sacct or jobcomp line says
        for j in queue:
            found.pop(j.job_id, None)
        for job_id in ended:        # ended before `since`: none of them is kept below
            found.pop(job_id, None)
        found.update((j.job_id, j) for j in queue if j.state in FINISHED_STATES)
        jobs = [j for j in found.values() if j.state in FINISHED_STATES]
        if since is not None:
            jobs = [j for j in jobs if (j.end_time or 0.0) >= since]
        return sorted(jobs, key=lambda j: (j.end_time or 0.0, j.job_id))

    def _jobcomp_jobs(self, since: float | None) -> list[SlurmJob]:
        """The jobs of the jobcomp/filetxt file's tail ending at or after `since` (all of it for None),
        where the cluster keeps one; [] where it does not or it cannot be read."""
        conf = self.slurm_config()
        loc = conf.get("JobCompLoc", "")
        if not (conf.get("JobCompType", "").endswith("filetxt") and loc and os.path.isfile(loc)):
            return []
        if not self._node_types:
            self._refresh_node_types()
        try:       # read a line at a time: the tail is never whole in memory (tenth pass)
            return parse_jobcomp(jobcomp_tail_lines(Path(loc), since), self.config, self._node_types, since=since)
        except OSError:
            return []

    def prefetch_finished(self, since: float | None) -> None:
        """`SlurmClient.prefetch_finished`: the jobcomp file's tail for `finished_jobs(since)`, read now
        (a round calls it while the queue's squeue runs: ~0.1 s of CPU at 10,000-30,000 lines in the
        tail's window, measured on the dev cluster). `finished_jobs` uses it once, for the same `since`
        within QUEUE_REUSE_S. Its answer is the same whichever is read first: a job squeue shows in any
        state but a finished one is not finished whatever the file says, and one that ended before
        squeue's read is taken from squeue (with its tag) in either order."""
        try:
            jobs = self._jobcomp_jobs(since)
        except SlurmError:          # `finished_jobs` reads it again, and reports what failed
            return
        self._jobcomp_ahead = (time.monotonic(), since, dict(self._node_types), jobs)

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

    def set_nice(self, job_id: str, nice: int) -> None:
        self._require_pending(job_id)
        self._run(["scontrol", "update", f"jobid={job_id}", f"nice={int(nice)}"], error=JobNotPending)

    def set_features(self, job_id: str, features: str) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"Features={features}"], error=JobNotPending)

    def set_partition(self, job_id: str, partition: str) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"Partition={partition}"], error=JobNotPending)

    def update_jobs(self, updates: Sequence[JobUpdate]) -> list[UpdateResult]:
        """A round's writes in a few processes: one squeue (which jobs are pending; one a job for a few
        jobs, `pending_job_ids`), one scontrol for every feature update, one for every partition update,
        one for every priority update (see the module docstring)."""
        updates = check_updates(updates)
        if not updates:
            return []
        errors: dict[str, SlurmError] = {}
        applied: dict[str, list[str]] = {u.job_id: [] for u in updates}
        pending = self.pending_job_ids([u.job_id for u in updates])
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
                text = str(int(value)) if name in ("priority", "nice") else str(value)
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

    def pending_job_ids(self, among: Sequence[str] | None = None) -> set[str]:
        """The ids of the pending jobs (held ones included): every one, in one squeue; or, given `among`
        (at most PENDING_BY_ID plain job ids), those of them that are pending, one squeue -j each. squeue -j with
        one id asks the controller for that job alone, where the whole pending list has it pack its whole
        job table: 0.15-0.2 s of wall against 0.02 s at 10,000 jobs on the dev cluster, in every round
        that writes (issue 21, sixteenth pass); squeue -j with several ids reads the whole table, hence
        one squeue each. A job Slurm no longer knows is not pending."""
        fmt = self._format(("JobID",))
        if among is None or len(set(among)) > PENDING_BY_ID or not all(j.isascii() and j.isdigit() for j in among):
            out = self._run(["squeue", "-h", "-t", PENDING, "-O", fmt])
            every = {line.split(SEP)[0].strip() for line in out.splitlines() if line.split(SEP)[0].strip()}
            return every if among is None else every & set(among)
        pending: set[str] = set()
        for job_id in dict.fromkeys(among):
            proc = self._exec(["squeue", "-h", "-t", PENDING, f"--jobs={job_id}", "-O", fmt])
            if proc.returncode != 0:
                if _GONE in proc.stderr:
                    continue            # purged from the controller's memory: ended long ago
                raise _failed(self._cmd("squeue"), proc.stderr or proc.stdout)
            if any(line.split(SEP)[0].strip() == job_id for line in proc.stdout.splitlines()):
                pending.add(job_id)
        return pending

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

    def set_begin_time(self, job_id: str, when: float | None) -> None:
        value = "now" if when is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))
        self._run(["scontrol", "update", f"jobid={job_id}", f"StartTime={value}"], error=JobNotPending)

    def set_exc_nodes(self, job_id: str, nodes: str) -> None:
        self._run(["scontrol", "update", f"jobid={job_id}", f"ExcNodeList={nodes}"], error=JobNotPending)

    def excluded_nodes(self, job_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """One squeue per EXC_BATCH jobs: `-t PD -j <ids> -o "%i %x"` (parsers.parse_excluded)."""
        ids = sorted({str(int(j)) for j in job_ids if str(j).isascii() and str(j).isdigit()}, key=int)
        out: dict[str, tuple[str, ...]] = {}
        for at in range(0, len(ids), EXC_BATCH):
            chunk = ids[at:at + EXC_BATCH]
            proc = self._exec(["squeue", "-h", "-t", PENDING, "-j", ",".join(chunk), "-o", "%i %x"])
            if proc.returncode != 0:
                err = _failed(self._cmd("squeue"), proc.stderr or proc.stdout, JobNotPending)
                if isinstance(err, JobNotPending):
                    continue            # none of them is known any more ("Invalid job id specified")
                raise err
            out.update(parse_excluded(proc.stdout, chunk))
        return out

    def hold(self, job_id: str) -> None:
        self._run(["scontrol", "hold", str(job_id)], error=JobNotPending)

    def release(self, job_id: str) -> None:
        self._run(["scontrol", "release", str(job_id)], error=JobNotPending)

    def hold_many(self, job_ids: Sequence[str]) -> dict[str, SlurmError]:
        return self._hold_or_release_many("hold", job_ids)

    def release_many(self, job_ids: Sequence[str]) -> dict[str, SlurmError]:
        return self._hold_or_release_many("release", job_ids)

    def _hold_or_release_many(self, command: str, job_ids: Sequence[str]) -> dict[str, SlurmError]:
        """One scontrol reading `hold N` / `release N` lines (measured on 22.05.8: it runs every line,
        a refused one writes `<reason> for job N` on stderr), so a pass over a thousand jobs takes a
        second of RPCs instead of a process per job; an id that cannot travel on a line gets its own argv."""
        lines = {job_id: line for job_id in job_ids if (line := scontrol_job_line(command, job_id)) is not None}
        errors = each_job(self.hold if command == "hold" else self.release,
                          [job_id for job_id in job_ids if job_id not in lines])
        if lines:
            errors.update(self._scontrol_batch(lines))
        return errors

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", str(job_id)])


