"""The resident decider: the cli_filter's fast path, one process per user and host.

Why: the filter's budget is +50 ms per sbatch, and a Python interpreter that starts and imports msched's
decision costs 100-450 ms on a loaded submit host (bench/bench_plugin.py). So the one-shot decision of
a user's first submission (`python -m msched.plugin.filter`, started by cli_filter.lua), once it has
answered, stays on in the background as that user's decider (never for root), and later submissions
ask it over a Unix socket: the interpreter and msched's tables are already loaded, and a fork per
request costs a millisecond or two.

The decision is the one-shot entry point's, unchanged (`msched.plugin.filter.respond`): each request is
answered in a child forked for it (the stdlib's ForkingMixIn), which first takes the environment and the
working directory of the sbatch that asked (read from /proc/<pid>, the pid the kernel gives for the
socket's peer), so MSCHED_MODEL, MSCHED_CONFIG, SLURM_CONF and relative script paths mean what they
mean for the one-shot path. A child that hangs is killed at the deadline; the resident process
itself runs no decision, so one bad request never stalls the next.

Protocol (cli_filter.lua with LuaSocket's socket.unix): the client connects to
`<user cache dir>/filter-<host>.sock`, sends `msched-filter-request 1 KIND GENERATION TIMEOUT\\n` and
Slurm's option JSON, shuts down its sending side, and reads the filter's line protocol back under its
hard timeout. GENERATION names the cli_filter.lua that asks (msched.plugin.generate): a request from
another generation gets `msched-filter-stale` and this process exits, so a reinstalled plugin or an
upgraded msched never talks to an old decider. Any doubt (no LuaSocket, no socket yet, a stale or
silent decider) sends the filter back to the one-shot path, which fails open as before.

Trust: the socket lives in the user's own cache directory (refused unless owned by the user and
writable by no one else); the decider answers only peers of its own uid (SO_PEERCRED) and exits after
IDLE_S without a request, or when msched's own source files change under it.
"""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import stat
import struct
import sys
import time

REQUEST_HEADER = b"msched-filter-request 1 "
STALE = "msched-filter-stale\n"
IDLE_S = 600.0                 # a decider nobody asked for ten minutes exits
MAX_REQUEST_BYTES = 4 << 20    # Slurm's option JSON is a few KB; more is not a request
POLL_S = 0.5


def socket_path(environ=None, host: str | None = None) -> str:
    """Where a user's decider listens: the user's msched cache (msched.config.user_cache_dir's rule,
    which cli_filter.lua repeats), one socket per host (home directories are often shared)."""
    env = os.environ if environ is None else environ
    base = env.get("MSCHED_CACHE_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache"), "msched")
    if host is None:
        with open("/proc/sys/kernel/hostname", encoding="utf-8") as fh:
            host = fh.read().strip()
    return os.path.join(base, f"filter-{host}.sock")


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


class _Handler(socketserver.BaseRequestHandler):
    """One request, in the child forked for it."""

    def handle(self) -> None:
        server: Decider = self.server  # type: ignore[assignment]
        conn: socket.socket = self.request
        pid, uid = _peer(conn)
        if uid != os.geteuid():
            return                                     # only the user's own clients are answered
        data = _read_request(conn, server.timeout_s)
        header, _, body = data.partition(b"\n")
        words = header[len(REQUEST_HEADER):].decode("ascii", "replace").split()
        if not header.startswith(REQUEST_HEADER) or len(words) != 3:
            return
        kind, generation, timeout = words
        if generation != server.generation:
            conn.sendall(STALE.encode())
            os.kill(os.getppid(), signal.SIGTERM)      # an older decider: let a new one take over
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        env, cwd = _peer_environment(pid)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        from msched.plugin.filter import respond

        conn.sendall(respond(kind, body, float(timeout)).encode("utf-8"))


class Decider(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    block_on_close = False
    max_children = 64

    def __init__(self, path: str, generation: str, timeout_s: float) -> None:
        self.generation = generation
        self.timeout_s = timeout_s
        self.last_request = time.monotonic()
        super().__init__(path, _Handler)

    def process_request(self, request, client_address) -> None:  # noqa: ANN001 - socketserver's signature
        self.last_request = time.monotonic()
        super().process_request(request, client_address)


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


def _warm(timeout_s: float) -> None:
    """Import and fill what every decision needs, so each forked child inherits it: the modules, their
    compiled patterns, the shipped model list, the classification tables and the user's cached node
    list. One GPU job's decision, with the environment of the sbatch that started this process, under
    the same deadline as any request."""
    from msched.plugin.filter import respond

    respond("sbatch", b'{"gres":"gres:gpu:1","wrap":"python train.py --arch resnet50"}', timeout_s)


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
    """Serve on `path` (holding `lock_fd`, from claim) until idle for `idle_s`, stale, or SIGTERM."""
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())
    try:
        os.unlink(path)                                   # a dead decider's socket
    except FileNotFoundError:
        pass
    old_umask = os.umask(0o177)
    try:
        server = Decider(path, generation, timeout_s)
    finally:
        os.umask(old_umask)
    ours = os.stat(path).st_ino                           # removed at exit only if still this socket
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        _warm(timeout_s)
        mtimes = _source_mtimes()
        server.timeout = POLL_S
        while True:
            server.handle_request()
            server.collect_children()
            if time.monotonic() - server.last_request > idle_s or _changed(mtimes):
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
        server.server_close()
        os.close(lock_fd)
    return 0


def stop(path: str) -> bool:
    """Stop the decider serving `path` (tests, benchmarks, an admin's cleanup); True if one was running."""
    try:
        with open(path + ".lock", encoding="ascii") as fh:
            pid = int(fh.read().strip() or 0)
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if b"msched.plugin.resident" not in fh.read():
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
