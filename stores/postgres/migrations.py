"""Bringing a database's schema to this version: forward only, one migrator at a time.

`migrate(url)` is what `a2a-server migrate` runs; the stores also run it on their first
connection, so a server started on an empty database just works. Concurrent migrators (replicas
starting together) queue on a session advisory lock; each applies, in its own transaction, the
migrations the database lacks (`schema_version` has a row per version applied), so all of them
end at one version. A database already at a later version (a newer replica migrated it during a
rolling deploy) is left alone: migrations only add, so this version still works on it.
"""

from __future__ import annotations

import logging

import asyncpg

from stores.postgres.errors import postgres_available
from stores.postgres.schema import LATEST_VERSION, MIGRATIONS

logger = logging.getLogger(__name__)

MIGRATION_LOCK = 0x51A2A0
"""The advisory lock key migrators take (any fixed number no other lock of ours uses)."""

CONNECT_TIMEOUT_S = 10.0


async def migrate(url: str) -> int:
    """Apply the migrations the database at `url` lacks; its schema version afterwards.

    Raises StoreUnavailable if the database cannot be reached."""
    with postgres_available():
        connection = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_S)
        try:
            return await apply_migrations(connection)
        finally:
            await connection.close()


async def apply_migrations(connection: asyncpg.Connection) -> int:
    """`migrate` on an open connection (the stores' own first one). A database already at this
    version (every start but the first) is answered without the lock."""
    if await connection.fetchval("SELECT to_regclass('schema_version') IS NOT NULL"):
        current = await schema_version(connection)
        if current >= LATEST_VERSION:
            return current
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await connection.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = await schema_version(connection)
        for version in range(current + 1, LATEST_VERSION + 1):
            async with connection.transaction():
                await connection.execute(MIGRATIONS[version - 1])
                await connection.execute(
                    "INSERT INTO schema_version (version) VALUES ($1)", version
                )
            logger.info("version=<%d> | database schema migrated", version)
        return max(current, LATEST_VERSION)
    finally:
        await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)


async def schema_version(connection: asyncpg.Connection) -> int:
    """The latest version applied (0: none)."""
    version = await connection.fetchval("SELECT coalesce(max(version), 0) FROM schema_version")
    return int(version)
