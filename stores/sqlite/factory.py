"""The SQLite stores of one server, built from a file path (`sqlite_path` reads it from a URL).

    sqlite:///relative/path.db    -> relative/path.db   (from the server's working directory)
    sqlite:////absolute/path.db   -> /absolute/path.db

The rate limiter stays in memory (`InMemoryRateLimiter`): one process serves the file, so its
buckets are exact there, and a bucket on disk would cost a synced transaction per request for
state that losing at a restart only refills.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from stores.base import DEFAULT_TASK_TTL_S
from stores.rate_limit import InMemoryRateLimiter, RateLimit, RateLimiter
from stores.sqlite.checkpoints import SQLiteCheckpointStore
from stores.sqlite.database import Database, open_database
from stores.sqlite.expiry import SWEEP_INTERVAL_S, Sweeper
from stores.sqlite.leases import SQLiteLeaseStore
from stores.sqlite.messages import SQLiteMessageStore
from stores.sqlite.push import SQLitePushConfigStore
from stores.sqlite.tasks import SQLiteTaskStore

__all__ = ["SQLiteStores", "create_sqlite_stores", "sqlite_path"]

_SCHEME = "sqlite:///"


def sqlite_path(url: str) -> str:
    """The file path of a `sqlite:///<path>` URL; ValueError (one line) for anything else."""
    if not url.startswith(_SCHEME):
        raise ValueError(
            "a SQLite URL is sqlite:///relative/path.db or sqlite:////absolute/path.db"
            f" (got {url.split('//')[0]!r}...)"
            if url.startswith("sqlite:")
            else "a SQLite URL starts with sqlite:///"
        )
    path = url[len(_SCHEME) :]
    if not path or path == "/":
        raise ValueError(f"SQLite URL {url!r} names no file (sqlite:///path/to/file.db)")
    if ":memory:" in path or path.startswith("file:"):
        raise ValueError(
            "an in-memory SQLite database is lost when the server stops: leave DATABASE_URL"
            " unset for the in-memory stores, or name a file (sqlite:///path/to/file.db)"
        )
    if "?" in path or "#" in path:
        raise ValueError(f"SQLite URL {url!r}: query parameters are not supported")
    if path.endswith("/"):
        raise ValueError(f"SQLite URL {url!r} names a directory, not a file")
    return path


@dataclass(frozen=True, kw_only=True)
class SQLiteStores:
    """Every store on one SQLite file (the StoreSet of `stores.base`)."""

    tasks: SQLiteTaskStore
    messages: SQLiteMessageStore
    checkpoints: SQLiteCheckpointStore
    leases: SQLiteLeaseStore
    pushes: SQLitePushConfigStore
    database: Database
    sweeper: Sweeper

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        """In memory: see the module docstring."""
        return InMemoryRateLimiter(limit)

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the file answers a read."""
        await self.database.ping()

    async def aclose(self) -> None:
        """Stop the sweep, close the file and release its lock."""
        await self.database.aclose()


def create_sqlite_stores(
    path: str,
    *,
    ttl_s: float = DEFAULT_TASK_TTL_S,
    max_tasks: int | None = None,
    sweep_interval_s: float = SWEEP_INTERVAL_S,
    clock: Callable[[], float] = time.time,
) -> SQLiteStores:
    """Open (or create) the database at `path` for this server alone.

    Raises StoreLocked if another server has the file, ValueError if its directory does not
    exist, StoreUnavailable if it cannot be opened (permissions, not a database), StoreError
    if a newer server wrote it. `clock` (wall-clock seconds) is what every expiry is measured
    by; tests move it.
    """
    database = open_database(path, clock=clock)
    sweeper = Sweeper(database, interval_s=sweep_interval_s)
    database.on_first_use(sweeper.start)
    return SQLiteStores(
        tasks=SQLiteTaskStore(database, ttl_s=ttl_s, max_tasks=max_tasks),
        messages=SQLiteMessageStore(database, ttl_s=ttl_s),
        checkpoints=SQLiteCheckpointStore(database, ttl_s=ttl_s),
        leases=SQLiteLeaseStore(database, ttl_s=ttl_s),
        pushes=SQLitePushConfigStore(database, ttl_s=ttl_s),
        database=database,
        sweeper=sweeper,
    )
