"""The pool's connections between callers: a release sends nothing to the server (asyncpg's
default reset query is a round trip at every release, for session state no store leaves), and
a connection released inside a transaction still comes back out of it."""

from __future__ import annotations

import asyncpg

from .conftest import Replicas


async def _last_queries(url: str, database: str) -> list[str]:
    """The latest query of every other session on the database (pg_stat_activity)."""
    watcher = await asyncpg.connect(url, timeout=10)
    try:
        rows = await watcher.fetch(
            "SELECT query FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'",
            database,
        )
    finally:
        await watcher.close()
    return [str(row["query"]) for row in rows]


async def test_a_released_connection_was_sent_no_reset_query(
    replicas: Replicas, database: str
) -> None:
    stores = replicas(pool_size=1)
    assert await stores.tasks.get("t1", owner="alice") is None
    connection = await (await stores.database.pool()).acquire()
    database_name = await connection.fetchval("SELECT current_database()")
    await connection.fetchval("SELECT 'the last statement'")
    await (await stores.database.pool()).release(connection)
    queries = await _last_queries(database, database_name)
    assert "SELECT 'the last statement'" in queries
    assert not any("pg_advisory_unlock_all" in query for query in queries)


async def test_a_connection_released_in_a_transaction_is_rolled_back(
    replicas: Replicas, database: str
) -> None:
    stores = replicas(pool_size=1)
    async with stores.database.connection() as connection:
        await connection.execute("BEGIN")
        await connection.execute(
            "INSERT INTO processes (process, expires_at) VALUES ('abandoned', now())"
        )
    async with stores.database.connection() as connection:
        assert not connection.is_in_transaction()
        assert await connection.fetchval("SELECT count(*) FROM processes") == 0
