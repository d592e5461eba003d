"""PostgreSQL stores for tests that run on every backend: one database per test process, made
on first use (and migrated), emptied before each use, dropped when the process exits. A database
per test would cost a CREATE DATABASE each; the contract tests reuse ids ("t1", "alice"), so
each use starts from empty tables instead."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
from collections.abc import AsyncIterator

from tests.databases import create_database, drop_database

_TABLES = (
    "tasks, journal, leases, processes, conversations, messages, message_units, claims,"
    " checkpoints, push_configs, push_cursors, rate_buckets, sweeps"
)

_url: str | None = None


async def shared_database() -> str:
    """This process's test database (migrated), made on first use."""
    global _url
    if _url is None:
        from stores.postgres.migrations import migrate

        url = await create_database()
        atexit.register(lambda: asyncio.run(drop_database(url)))
        await migrate(url)
        _url = url
    return _url


async def empty_database() -> str:
    """The shared database, every store table emptied."""
    import asyncpg

    url = await shared_database()
    connection = await asyncpg.connect(url, timeout=10)
    try:
        # DELETE, not TRUNCATE: a few rows go faster so than a TRUNCATE's new files.
        await connection.execute(
            ";".join(f"DELETE FROM {table}" for table in _TABLES.replace(" ", "").split(","))
        )
    finally:
        await connection.close()
    return url


@contextlib.asynccontextmanager
async def postgres_stores(**options: object) -> AsyncIterator[object]:
    """`create_postgres_stores` on the emptied shared database, closed afterwards."""
    from stores.postgres.factory import create_postgres_stores

    url = await empty_database()
    stores = create_postgres_stores(url, **{"ttl_s": 3600, "pool_size": 4, **options})  # type: ignore[arg-type]
    try:
        yield stores
    finally:
        await stores.aclose()
