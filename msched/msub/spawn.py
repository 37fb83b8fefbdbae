"""Spawning the real sbatch: msub's submission, run so that sbatch's output and exit code are msub's.

Light path: `os.posix_spawn` and in-memory files instead of `subprocess` (see `spawn_and_wait`).
"""

from __future__ import annotations

import os
import sys

from msched.util.record import record

PROG = "msub"
INVALID_FEATURE = b"Invalid feature specification"


def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


@record
class Submission:
    """What msub will run: sbatch's argv and, where needed, the script bytes to feed on stdin."""

    argv: list[str]
    stdin_data: bytes | None = None        # None = inherit stdin (sbatch reads the script file itself)
    added: tuple[str, ...] = ()
    original_script: str | None = None
    edited_script: str | None = None
    managed: bool = False
    fallback_argv: list[str] | None = None  # the same submission without msched's constraint
    dry_run: bool = False
    help: bool = False



def run_sbatch(sub: Submission, *, allow_exec: bool = True) -> int:
    """Run the real sbatch; its stdout, stderr and exit code become msub's.

    Without script bytes to feed, msub *becomes* sbatch (exec): signals, `--wait` and the terminal
    behave exactly as with sbatch. Output is captured only when msched added a constraint, to fall back
    without it if the cluster rejects the feature names (then sbatch's output is replayed verbatim).
    """
    argv = sub.argv
    capture = sub.fallback_argv is not None and not any(w in ("--wait", "-W") for w in argv)
    sys.stdout.flush()
    sys.stderr.flush()
    if allow_exec and sub.stdin_data is None and not capture:
        try:
            os.execv(argv[0], argv)
        except OSError as exc:
            print(f"{PROG}: error: cannot run sbatch {argv[0]}: {exc.strerror}", file=sys.stderr)
            return 127
    try:
        status, out, err = spawn_and_wait(argv, sub.stdin_data, capture)
    except OSError as exc:
        print(f"{PROG}: error: cannot run sbatch {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    if capture:
        if status != 0 and INVALID_FEATURE in err and b"Submitted batch job" not in out:
            # a GPU type msched named is no node feature here: the job goes in without msched's constraint
            warn("the cluster rejected msched's GPU-type constraint; submitting without it")
            return run_sbatch(sub._replace(argv=sub.fallback_argv, fallback_argv=None), allow_exec=allow_exec)
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
    return status


def spawn_and_wait(argv: list[str], stdin_data: bytes | None, capture: bool) -> tuple[int, bytes, bytes]:
    """Run argv to its end: (exit status as a shell reports it, stdout, stderr; b"" when not captured).

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
        outputs = [_scratch_file(), _scratch_file()] if capture else []
        own += outputs
        if capture:
            actions += [(os.POSIX_SPAWN_DUP2, outputs[0], 1), (os.POSIX_SPAWN_DUP2, outputs[1], 2)]
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
        out, err = [_read_from_start(fd) for fd in outputs] if capture else [b"", b""]
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
