"""The SQLite file of one server: its lock, two connections on threads of their own, transactions.

    write(step) --> writer thread: BEGIN IMMEDIATE; step(Step); COMMIT --> step's after_commit
    read(step)  --> reader thread: BEGIN; step(Step); COMMIT        (WAL: never waits for writes)

A step is a plain function run whole on its connection's thread, not a coroutine awaiting each
statement (as aiosqlite would have it): a transaction costs one hop to the thread, not one per
statement, and a caller cancelled while it runs cannot leave it half done on a shared connection
(it commits, or rolls back, all in the thread; the caller just no longer hears which). This is
what makes each store operation as atomic as the Redis script it stands for: every write is
one `BEGIN IMMEDIATE` transaction, and there is one writer, so they never interleave.

What a step wakes (a journal's readers, the cancel listeners) is called on the event loop after
COMMIT returned, so a woken reader always finds what woke it.

Durability: WAL with `synchronous=FULL` syncs the WAL at every commit, so a committed write
survives a crash of the process and of the machine (NORMAL would lose the last commits at a
power cut). Every sqlite3 error becomes StoreUnavailable (its message, one line): a full disk, an
I/O error, or "database is locked" past the busy timeout (another program holding the file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from stores.errors import StoreUnavailable
from stores.sqlite.lock import FileLock
from stores.sqlite.schema import migrate

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0
"""How long a statement waits for a lock another program holds on the file (a backup tool, the
sqlite3 shell) before it fails with StoreUnavailable."""


@dataclass(slots=True)
class Step:
    """What a transaction's function is given: its connection, the time it runs at (wall-clock
    ms, the clock every stored expiry is on) and what to call once it committed."""

    connection: sqlite3.Connection
    now_ms: int
    committed: list[Callable[[], None]] = field(default_factory=list)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call `callback` on the event loop once this transaction committed (never if not)."""
        self.committed.append(callback)


@contextlib.contextmanager
def sqlite_available(path: str) -> Iterator[None]:
    """sqlite3's errors as StoreUnavailable: no sqlite exception leaves the stores."""
    try:
        yield
    except sqlite3.Error as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise StoreUnavailable(f"SQLite {path}: {message}") from exc


class Database:
    """One server's SQLite file (see the module docstring); `open_database` builds it."""

    def __init__(
        self,
        path: str,
        *,
        lock: FileLock,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self._lock = lock
        self._writer = writer
        self._reader = reader
        self._clock = clock
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer")
        self._read_thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-reader")
        self._background: list[asyncio.Task[None]] = []
        self._first_use: Callable[[], None] | None = None
        self._closed = False

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def on_first_use(self, start: Callable[[], None]) -> None:
        """Call `start` (on the event loop) at the first write: where the sweep begins."""
        self._first_use = start

    def keep(self, task: asyncio.Task[None]) -> None:
        """A background task of the stores, cancelled by `aclose`."""
        self._background.append(task)

    async def write(self, step: Callable[[Step], T]) -> T:
        """Run `step` in one `BEGIN IMMEDIATE` transaction on the writer connection."""
        start, self._first_use = self._first_use, None
        if start is not None:
            start()
        return await self._run(self._write_thread, self._writer, "BEGIN IMMEDIATE", step)

    async def read(self, step: Callable[[Step], T]) -> T:
        """Run `step` in one read transaction (one consistent snapshot) on the reader."""
        return await self._run(self._read_thread, self._reader, "BEGIN", step)

    async def _run(
        self,
        thread: ThreadPoolExecutor,
        connection: sqlite3.Connection,
        begin: str,
        step: Callable[[Step], T],
    ) -> T:
        if self._closed:
            raise StoreUnavailable(f"SQLite {self.path}: the stores are closed")
        loop = asyncio.get_running_loop()
        try:
            done = loop.run_in_executor(thread, self._transaction, loop, connection, begin, step)
        except RuntimeError as exc:  # the thread was shut down under it (aclose)
            raise StoreUnavailable(f"SQLite {self.path}: the stores are closed") from exc
        return await done

    def _transaction(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: sqlite3.Connection,
        begin: str,
        step: Callable[[Step], T],
    ) -> T:
        """On the connection's thread: the whole transaction, committed or rolled back."""
        context = Step(connection, self.now_ms())
        with sqlite_available(self.path):
            connection.execute(begin)
            try:
                result = step(context)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    with contextlib.suppress(sqlite3.Error):  # the error raised says it all
                        connection.execute("ROLLBACK")
                raise
        try:
            for callback in context.committed:
                loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop closed meanwhile: no one is left to wake
            logger.debug("a committed write found the event loop closed")
        return result

    async def ping(self) -> None:
        await self.read(lambda step: step.connection.execute("SELECT 1").fetchone())

    async def aclose(self) -> None:
        """Stop the background tasks, close both connections (each on its thread) and release
        the file to the next server."""
        if self._closed:
            return
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for thread, connection in (
            (self._write_thread, self._writer),
            (self._read_thread, self._reader),
        ):
            with contextlib.suppress(sqlite3.Error):
                await loop.run_in_executor(thread, connection.close)
            thread.shutdown(wait=False)
        self._closed = True
        self._lock.release()


def open_database(path: str, *, clock: Callable[[], float] = time.time) -> Database:
    """Lock the file (StoreLocked if another server has it), open it, take its schema forward.

    A directory that does not exist is an error (ValueError), not created: a typo in the path
    must not start a server on an empty store beside the one meant."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"SQLite database {path}: directory {directory} does not exist")
    lock = FileLock(path)
    opened: list[sqlite3.Connection] = []
    try:
        with sqlite_available(path):
            opened.append(writer := _connect(path))
            migrate(writer, path)
            opened.append(reader := _connect(path))
            reader.execute("PRAGMA query_only = ON")
    except BaseException:
        for connection in opened:
            connection.close()
        lock.release()
        raise
    return Database(path, lock=lock, writer=writer, reader=reader, clock=clock)


def _connect(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), used from one thread at a
    time: the one its Database gives it."""
    connection = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":  # e.g. a file system without shared memory
        connection.close()
        raise sqlite3.OperationalError(f"WAL mode is not available here (journal mode {mode})")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")  # a task's journal goes with it
    return connection
