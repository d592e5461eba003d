"""PostgreSQL databases of the tests' own: each made fresh on the machine's server (127.0.0.1:5432,
trust auth; `.ci/run` starts it) and dropped afterwards, so tests never share rows or schemas.

`A2A_TEST_POSTGRES` names another server (a URL without a database name's meaning: the tests
connect to its `test` database to create and drop theirs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

ADMIN_URL = os.environ.get("A2A_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(ADMIN_URL, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_database() -> str:
    """A new empty database; its URL."""
    name = f"a2a_test_{uuid.uuid4().hex[:16]}"
    await _admin(f'CREATE DATABASE "{name}"')
    return _with_database(ADMIN_URL, name)


async def drop_database(url: str) -> None:
    """Drop a database made by `create_database`, closing whatever still uses it."""
    name = urlsplit(url).path.lstrip("/")
    assert name.startswith("a2a_test_"), name
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh database for the block (from synchronous code: a fixture of a module's servers)."""
    url = asyncio.run(create_database())
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))
