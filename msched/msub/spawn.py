"""Spawning the real sbatch: msub's submission, run so that sbatch's output and exit code are msub's.

Light path: `os.posix_spawn` and in-memory files instead of `subprocess` (see `spawn_and_wait`).
"""

from __future__ import annotations

import os
import sys

from msched.util.record import record

PROG = "msub"

# What Slurm refuses because of something msched added, as sbatch 22.05 words it (each line was seen on
# the dev cluster), and what it names: the only refusals after which msub submits again. Any other
# failure (a timeout, an unreachable controller, an unknown error) is final: the first job may be queued.
SUBMISSION_FAILED = b"sbatch: error: Batch job submission failed: "
REFUSALS = {
    b"Requested node configuration is not available": "constraint",   # msched's types cannot hold the shape
    b"Invalid feature specification": "constraint",                   # a type msched named is no node feature
    b"Invalid partition name specified": "constraint",   # msched's partition lever (config type_lever)
    b"Invalid generic resource (gres) specification": "constraint",   # msched's shard request (packing)
    b"Pathname of a file, directory or other parameter too long": "comment",   # the comment passed the limit
}
# Slurm's limit on a job's comment, in bytes (found by trying: 1024 bytes are accepted, 1025 refused with
# the message above, whatever the characters); msub checks it before adding its tag
SLURM_COMMENT_MAX_BYTES = 1024


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


@record
class Fallback:
    """Another way to submit the same job, without some of what msched added."""

    argv: list[str]
    drops: tuple[str, ...]          # what it leaves out: "constraint" (msched's --constraint or --partition
                                    # that steers the job to its GPU types), "comment" (msched's tag)
    warning: str                    # said once when the job goes in this way


@record
class Submission:
    """What msub will run: sbatch's argv, the script bytes to feed on stdin where sbatch would have read
    them from msub's own stdin, and the fallbacks to try when Slurm refuses what msched added."""

    argv: list[str]
    stdin_data: bytes | None = None        # None = inherit stdin (sbatch reads the script file itself)
    added: tuple[str, ...] = ()
    managed: bool = False
    fallbacks: tuple[Fallback, ...] = ()   # in order; the last is the submission exactly as typed
    dry_run: bool = False
    help: bool = False


def refusal(status: int, err: bytes) -> tuple[str, str]:
    """(what msched added that sbatch's refusal names, the message) or ("", "") for any other outcome."""
    if status == 0:
        return "", ""
    for line in err.splitlines():
        if line.startswith(SUBMISSION_FAILED):
            message = line[len(SUBMISSION_FAILED):].strip()
            if message in REFUSALS:
                return REFUSALS[message], message.decode()
    return "", ""


def run_sbatch(sub: Submission, *, allow_exec: bool = True) -> int:
    """Run the real sbatch; its stdout, stderr and exit code become msub's.

    Without fallbacks and script bytes to feed, msub *becomes* sbatch (exec): signals, `--wait` and
    the terminal behave exactly as with sbatch. With fallbacks, sbatch's stderr is held back: when it
    says Slurm refused what msched added (REFUSALS), msub submits again without it (the next fallback
    that drops it, at worst exactly as the user typed) and warns once, if that succeeds; if the job
    cannot go in either way, only the last sbatch's own output is shown, exactly as plain sbatch's.
    stdout passes through as it comes (a refused sbatch prints nothing there).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if allow_exec and sub.stdin_data is None and not sub.fallbacks:
        try:
            os.execv(sub.argv[0], sub.argv)
        except OSError as exc:
            print(f"{PROG}: error: cannot run sbatch {sub.argv[0]}: {exc.strerror}", file=sys.stderr)
            return 127
    argv, drops, remaining, said = sub.argv, (), list(sub.fallbacks), ""
    while True:
        try:
            status, _, err = spawn_and_wait(argv, sub.stdin_data, bool(sub.fallbacks), capture_stdout=False)
        except OSError as exc:
            print(f"{PROG}: error: cannot run sbatch {argv[0]}: {exc.strerror}", file=sys.stderr)
            return 127
        named, message = refusal(status, err) if remaining else ("", "")
        nxt = next((f for f in remaining if named in f.drops and set(drops) <= set(f.drops)), None) if named else None
        if nxt is None:
            break
        remaining = remaining[remaining.index(nxt) + 1:]
        argv, drops = nxt.argv, nxt.drops
        said = said or f"sbatch refused what msched added ({message}); {nxt.warning}"
    if said and status == 0:
        warn(said)
    if sub.fallbacks:
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
    return status


def spawn_and_wait(argv: list[str], stdin_data: bytes | None, capture: bool, *,
                   capture_stdout: bool = True) -> tuple[int, bytes, bytes]:
    """Run argv to its end: (exit status as a shell reports it, stdout, stderr; b"" when not captured).
    With `capture_stdout=False`, only stderr is captured.

    `os.posix_spawn` rather than `subprocess`: importing subprocess (threading, selectors, signal) costs
    ~10 ms of msub's budget. Captured output goes to anonymous in-memory files rather than pipes: sbatch
    prints a line or two, and a file, unlike a pipe, never fills up while the script is being written
    to its standard input. A SIGINT reaches sbatch too (same process group); msub keeps waiting, so
    sbatch decides what an interrupt means, as it would alone.
    """
    own: list[int] = []                        # descriptors to close here, whatever happens
    actions: list[tuple] = []
    try:
        if stdin_data is not None:
            read_end, write_end = os.pipe()
            own += [read_end, write_end]
            actions.append((os.POSIX_SPAWN_DUP2, read_end, 0))
        streams = ((1, 2) if capture_stdout else (2,)) if capture else ()
        outputs = [_scratch_file() for _ in streams]
        own += outputs
        actions += [(os.POSIX_SPAWN_DUP2, fd, stream) for fd, stream in zip(outputs, streams, strict=True)]
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
        if stdin_data is not None:
            os.close(read_end)
            own.remove(read_end)
            try:
                _write_all(write_end, stdin_data)
            except BrokenPipeError:
                pass                           # sbatch exited without reading; its status says why
            os.close(write_end)
            own.remove(write_end)
        while True:
            try:
                _, wait_status = os.waitpid(pid, 0)
                break
            except KeyboardInterrupt:
                continue
        code = os.waitstatus_to_exitcode(wait_status)
        captured = dict(zip(streams, [_read_from_start(fd) for fd in outputs], strict=True))
        out, err = captured.get(1, b""), captured.get(2, b"")
        return (code if code >= 0 else 128 - code), out, err
    finally:
        for fd in own:
            os.close(fd)


def _scratch_file() -> int:
    if hasattr(os, "memfd_create"):
        return os.memfd_create("msub-sbatch-output")
    import tempfile

    fd, path = tempfile.mkstemp(prefix="msub-")
    os.unlink(path)
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_from_start(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)
