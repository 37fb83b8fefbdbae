"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Why one helper: msub's caches, the site-config cache, the free-time file the reorderer publishes for
msub and the calibrated performance table are all read while they may be rewritten. Standard library
only: msub imports it on every submission.
"""

from __future__ import annotations

import os


def write_atomically(path: str | os.PathLike, data: str | bytes, *, mode: int = 0o600,
                     keep_mode: bool = False) -> None:
    """Write `data` beside `path` under a name of this process's own, then rename it over `path`.

    `mode` is the new file's permission bits; `keep_mode` keeps an existing file's bits instead. The
    temporary file is removed on any failure, and the failure (OSError) is raised to the caller."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    if keep_mode:
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            pass
    raw = data.encode("utf-8") if isinstance(data, str) else data
    for attempt in range(100):
        tmp = os.path.join(directory, f".{name}.{os.getpid()}.{attempt}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"cannot create a temporary file beside {path}")
    try:
        with open(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, mode)                      # whatever the umask took away
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
