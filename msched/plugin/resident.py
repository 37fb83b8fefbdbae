"""The resident decider: the cli_filter's fast path, one process per user and host.

Why: the filter's budget is +50 ms per sbatch, and a Python interpreter that starts and imports msched's
decision costs 100-450 ms on a loaded submit host (bench/bench_plugin.py). So the one-shot decision of
a user's first submission (`python -m msched.plugin.filter`, started by cli_filter.lua), once it has
answered, stays on in the background as that user's decider (never for root), and later submissions
ask it over a Unix socket: the interpreter and msched's tables are already loaded, and a request costs
its decision alone (2-3 ms of CPU; bench/bench_plugin.py and BENCHMARKS.md).

The decision is the one-shot entry point's, unchanged (`msched.plugin.filter.respond`): each request is
answered by a child forked for it, which first takes the environment and the working directory of
the sbatch that asked (read from /proc/<pid>, the pid the kernel gives for the socket's peer), so
MSCHED_MODEL, MSCHED_CONFIG, SLURM_CONF and relative script paths mean what they mean for the one-shot
path. The child is forked before the request comes (SPARES "spares" wait on the socket, each having run
a decision of its own so that the fork's copy-on-write faults are behind it); a used one is replaced
once submissions pause, at once when none is left. A child that hangs is killed at the deadline; the
resident process itself runs no decision, so one bad request never stalls the next.

Protocol (cli_filter.lua with LuaSocket's socket.unix): the client connects to
`<user cache dir>/filter-<host>.sock`, sends `msched-filter-request 1 KIND GENERATION TIMEOUT\\n` and
Slurm's option JSON, shuts down its sending side, and reads the filter's line protocol back under its
hard timeout. GENERATION names the cli_filter.lua that asks (msched.plugin.generate): a request from
another generation gets `msched-filter-stale` and this process exits, so a reinstalled plugin or an
upgraded msched never talks to an old decider. No LuaSocket, no socket yet, or a stale decider send
the filter to the one-shot path; a decider that does not answer in time makes it submit the job
unchanged with one line, as any failure does.

Trust: the socket lives in the user's own cache directory (refused unless owned by the user and
writable by no one else); the decider answers only peers of its own uid (SO_PEERCRED) and exits after
IDLE_S without a request, or when msched's own source files change under it.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import struct
import sys
import time

REQUEST_HEADER = b"msched-filter-request 1 "
STALE = "msched-filter-stale\n"
IDLE_S = 600.0                 # a decider nobody asked for ten minutes exits
MAX_REQUEST_BYTES = 4 << 20    # Slurm's option JSON is a few KB; more is not a request
POLL_S = 0.5
CHECK_S = 5.0                  # how often the decider checks its socket and msched's source files
SPARES = 2                     # children waiting on the socket, warmed up
REFILL_PAUSE_S = 0.2           # a used spare is replaced once submissions pause this long
SPARE_FAILED = 3               # a spare's exit status when it could not even wait for a request


def socket_path(environ=None, host: str | None = None) -> str:
    """Where a user's decider listens: the user's msched cache (msched.config.user_cache_dir's rule,
    which cli_filter.lua repeats), one socket per host (home directories are often shared)."""
    from msched.config import user_cache_dir

    if host is None:
        with open("/proc/sys/kernel/hostname", encoding="utf-8") as fh:
            host = fh.read().strip()
    return os.path.join(user_cache_dir(environ), f"filter-{host}.sock")


def _private_dir(path: str) -> str | None:
    """Why the socket's directory cannot be trusted, or None: it must be ours and writable by no one else."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        return f"{path} is not a directory of uid {os.geteuid()} that only it can write"
    return None


def _peer(conn: socket.socket) -> tuple[int, int]:
    pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def _peer_environment(pid: int) -> tuple[dict[str, str], str]:
    """The asking process's environment and working directory, as the one-shot child would inherit them."""
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw = fh.read()
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env, os.readlink(f"/proc/{pid}/cwd")


def _read_request(conn: socket.socket, timeout_s: float) -> bytes:
    conn.settimeout(timeout_s)
    chunks, size = [], 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise ValueError("request too large")


def _answer(conn: socket.socket, generation: str, timeout_s: float) -> bool:
    """Answer one request on `conn` (in a spare child); False when it came from another generation."""
    pid, uid = _peer(conn)
    if uid != os.geteuid():
        return True                                    # only the user's own clients are answered
    data = _read_request(conn, timeout_s)
    header, _, body = data.partition(b"\n")
    words = header[len(REQUEST_HEADER):].decode("ascii", "replace").split()
    if not header.startswith(REQUEST_HEADER) or len(words) != 3:
        return True
    kind, asked_generation, timeout = words
    if asked_generation != generation:
        conn.sendall(STALE.encode())
        return False
    env, cwd = _peer_environment(pid)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    from msched.plugin.filter import respond

    conn.sendall(respond(kind, body, float(timeout)).encode("utf-8"))
    return True


def _spare(listener: socket.socket, notify: int, parent: int, generation: str, timeout_s: float) -> None:
    """A forked child that waits for one request, answers it and exits. It is forked before the request
    comes and first runs a decision of its own, so the copy-on-write faults of a fresh fork are paid
    while nobody waits: a request then costs only its own decision. It tells the decider `a` when it
    takes a request, `d` when done, `s` when the request came from another generation."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _prefault()
        listener.settimeout(POLL_S)
        while True:
            try:
                conn, _ = listener.accept()
                break
            except TimeoutError:
                if os.getppid() != parent:             # the decider is gone: nobody will ask
                    os._exit(0)
    except BaseException:  # noqa: BLE001 - a spare that cannot wait is replaced (a few times at most)
        os._exit(SPARE_FAILED)
    status = 0
    try:
        os.write(notify, b"a")
        if not _answer(conn, generation, timeout_s):
            os.write(notify, b"s")
    except BaseException:  # noqa: BLE001 - a broken request is the client's to time out
        status = 1
    finally:
        try:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        except OSError:
            pass
        os.write(notify, b"d")
    os._exit(status)


def _source_mtimes() -> dict[str, int]:
    """msched's loaded source files and their modification times: a changed file ends the decider."""
    out = {}
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if path and mod.__name__.startswith("msched"):
            try:
                out[path] = os.stat(path).st_mtime_ns
            except OSError:
                out[path] = -1
    return out


def _changed(mtimes: dict[str, int]) -> bool:
    for path, mtime in mtimes.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


def _still_ours(path: str, inode: int) -> bool:
    """Whether `path` is still this decider's socket (not removed, not taken over by another)."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _still_ours(path: str, inode: int) -> bool:
    """Whether `path` is still this decider's socket (not removed, not taken over by another)."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _warm(timeout_s: float) -> None:
    """Import and fill what every decision needs, so each forked child inherits it: the modules, their
    compiled patterns, the shipped model list, the classification tables and the user's cached node
    list. One GPU job's decision, with the environment of the sbatch that started this process, under
    the same deadline as any request."""
    from msched.plugin.filter import respond

    respond("sbatch", b'{"gres":"gres:gpu:1","wrap":"python train.py --arch resnet50"}', timeout_s)


def _prefault() -> None:
    """A decision that starts no process (no GPUs asked), touching what a real one touches."""
    from msched.msub.gpu_request import gpu_request
    from msched.plugin.filter import decide, request_from_options

    try:
        decide("sbatch", {"wrap": "python train.py --arch resnet50"}, environ={})
        gpu_request(request_from_options({"gres": "gres:gpu:1", "time": "10"}))
    except Exception:  # noqa: BLE001 - best effort; the request reports its own errors
        pass


class _Stop(Exception):
    """SIGTERM: leave the serving loop now."""


def _raise_stop(signum, frame) -> None:  # noqa: ANN001 - a signal handler's signature
    raise _Stop


def claim(path: str) -> int | None:
    """The decider's lock for `path` (a file descriptor), or None when this process should not serve:
    root (root's submissions take the one-shot path), a socket directory others could write, or
    another decider already serving this user and host."""
    import fcntl

    if os.geteuid() == 0 or len(os.fsencode(path)) > 107 or _private_dir(os.path.dirname(path)) is not None:
        return None
    try:
        lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_fd)
        return None
    return lock_fd


def detach_and_serve(path: str, generation: str, timeout_s: float) -> None:
    """Called by the one-shot entry point after it answered: become the user's decider in the
    background (a new session, standard streams on /dev/null) when none serves yet; the calling
    process returns at once, so the sbatch that started it is not kept waiting."""
    lock_fd = claim(path)
    if lock_fd is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() != 0:
        os.close(lock_fd)                                 # the child keeps the lock
        return
    try:
        os.setsid()                                       # no terminal's signals, not the sbatch's group
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, lock_fd)                         # nothing of the sbatch that started us
        os.closerange(lock_fd + 1, 1024)
        os.chdir("/")
        status = serve(path, generation, timeout_s, lock_fd,
                       float(os.environ.get("MSCHED_FILTER_IDLE_S") or IDLE_S))
    except BaseException:  # noqa: BLE001 - a detached process has nobody to tell
        status = 1
    os._exit(status)

def serve(path: str, generation: str, timeout_s: float, lock_fd: int, idle_s: float = IDLE_S) -> int:
    """Serve on `path` (holding `lock_fd`, from claim) until idle for `idle_s`, stale, or SIGTERM.

    SPARES children wait on the socket, warmed up; each tells this process (a byte on a pipe) when it
    takes a request and when it is done. A used spare is replaced once submissions pause, so its fork
    does not compete for the CPU with the sbatch just answered, and at once when none is left waiting,
    so a burst of submissions in parallel is answered in parallel."""
    import gc
    import select

    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())
    try:
        os.unlink(path)                                   # a dead decider's socket
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old_umask)
    ours = os.stat(path).st_ino                           # removed at exit only if still this socket
    listener.listen(128)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    notify_r, notify_w = os.pipe()
    me = os.getpid()
    live: set[int] = set()                                # spares, waiting or answering
    answering = failed = 0

    def fork_spare() -> None:
        pid = os.fork()
        if pid == 0:
            os.close(notify_r)
            os.close(lock_fd)                             # the lock is the decider's alone: it ends with it
            _spare(listener, notify_w, me, generation, timeout_s)
        live.add(pid)

    try:
        _warm(timeout_s)
        gc.collect()
        gc.freeze()                                       # children's collections leave these pages alone
        mtimes = _source_mtimes()
        last = checked = time.monotonic()
        while True:
            waiting = len(live) - answering
            # replace a used spare once submissions pause (its fork and warm-up would compete for the
            # CPU with the submission just answered), at once when none is left waiting
            if waiting < 1 or (waiting < SPARES and time.monotonic() - last > REFILL_PAUSE_S):
                fork_spare()
                continue
            ready, _, _ = select.select([notify_r], [], [], REFILL_PAUSE_S if waiting < SPARES else POLL_S)
            if ready:
                events = os.read(notify_r, 64)
                if b"s" in events:
                    break                                 # a newer filter asked: make way
                answering += events.count(b"a") - events.count(b"d")
                if b"a" in events:
                    last = time.monotonic()
                    failed = 0
            while live:                                   # reap the spares that answered
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                live.discard(pid)
                if os.WIFEXITED(status) and os.WEXITSTATUS(status) == SPARE_FAILED:
                    failed += 1
                    if failed > 5:
                        raise _Stop                       # something is wrong here: the one-shot path decides
            now = time.monotonic()
            if now - last > idle_s:
                break
            if now - checked > CHECK_S:                   # a few hundred stat calls: not at every tick
                checked = now
                if _changed(mtimes) or not _still_ours(path, ours):
                    break
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            if os.stat(path).st_ino == ours:
                os.unlink(path)
        except OSError:
            pass
        listener.close()
        # the spares: one answering finishes, one waiting sees its parent gone within POLL_S and exits
        os.close(lock_fd)
    return 0


def stop(path: str) -> bool:
    """Stop the decider serving `path` (tests, benchmarks, an admin's cleanup); True if one was running."""
    try:
        with open(path + ".lock", encoding="ascii") as fh:
            pid = int(fh.read().strip() or 0)
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if b"msched.plugin." not in fh.read():        # started as msched.plugin.filter (the one-shot path)
                return False
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return False
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.02)
    return True


def main(argv: list[str] | None = None) -> int:
    """`python -m msched.plugin.resident stop [SOCKET]`: stop the calling user's decider on this host
    (or the one on SOCKET); exit status 1 when none was running."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "stop" or len(argv) > 2:
        print("usage: python -m msched.plugin.resident stop [SOCKET]", file=sys.stderr)
        return 2
    return 0 if stop(argv[1] if len(argv) == 2 else socket_path()) else 1


if __name__ == "__main__":
    sys.exit(main())
