"""One server per SQLite file: an exclusive OS lock on `<path>.lock`, held while the stores live.

`flock` is released by the kernel when the process dies however it dies (kill -9 included), so a
crashed server never leaves a stale lock behind, and a second server on the same file (a replica
started by mistake, a second container on the same volume) fails at once instead of corrupting
what the first one believes (its in-process waits and signals see only its own writes).
"""

from __future__ import annotations

import fcntl
import os

from stores.errors import StoreLocked


class FileLock:
    """The lock on `<path>.lock`, taken at construction; `release` gives it up (idempotent)."""

    def __init__(self, database_path: str) -> None:
        self.path = f"{database_path}.lock"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(
                f"{database_path} is used by another a2a-server (SQLite serves one server;"
                " replicas need PostgreSQL or Redis)"
            ) from None
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock
