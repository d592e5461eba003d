"""The schema is migrated forward, once, whoever migrates first: `migrate(url)` (what
`a2a-server migrate` runs) and the stores' own first connection."""

from __future__ import annotations

import asyncio
import hashlib

import asyncpg

from stores.models import Task, TaskState, TaskStatus
from stores.postgres.factory import create_postgres_stores
from stores.postgres.migrations import migrate
from stores.postgres.schema import LATEST_VERSION, MIGRATIONS
from tests.databases import create_database, drop_database


async def _versions(url: str) -> list[int]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT version FROM schema_version ORDER BY version")
    finally:
        await connection.close()
    return [row["version"] for row in rows]


async def test_migrate_is_idempotent() -> None:
    url = await create_database()
    try:
        assert await migrate(url) == LATEST_VERSION
        assert await migrate(url) == LATEST_VERSION
        assert await _versions(url) == list(range(1, LATEST_VERSION + 1))
    finally:
        await drop_database(url)


async def test_concurrent_migrations_end_at_one_version() -> None:
    url = await create_database()
    try:
        results = await asyncio.gather(*(migrate(url) for _ in range(6)))
        assert results == [LATEST_VERSION] * 6
        assert await _versions(url) == list(range(1, LATEST_VERSION + 1)), "applied twice"
    finally:
        await drop_database(url)


async def test_the_stores_migrate_an_empty_database_on_first_use() -> None:
    url = await create_database()
    stores = create_postgres_stores(url, pool_size=2)
    try:
        task = Task(id="t1", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))
        await stores.tasks.create(task, owner="alice")
        assert (await stores.tasks.get("t1", owner="alice")) is not None
        assert await _versions(url) == list(range(1, LATEST_VERSION + 1))
    finally:
        await stores.aclose()
        await drop_database(url)


# A released migration has run on databases in use: changing its text changes nothing there
# (its version is recorded) and leaves new databases different from old ones. A new behaviour is
# a new migration; these are the released ones' SHA-256, appended to, never edited.
RELEASED = (
    "4259579fb1db666235560b7eab6ed5ebe0953339774367175400547e9e3ad86c",  # 1: the tables
    "84e2128d99ca02a6d2e561adf435ec5734d7862765103c360f50723df6d381d7",  # 2: the write functions
)


def test_a_released_migration_never_changes() -> None:
    released = [hashlib.sha256(sql.encode()).hexdigest() for sql in MIGRATIONS[: len(RELEASED)]]
    assert released == list(RELEASED), "a released migration was edited: add a new one instead"
    assert len(MIGRATIONS) >= len(RELEASED)
