"""The stores of each backend wired as the server wires them (the task and checkpoint stores check
fences against the lease store): one set in memory, one on the real Redis under a prefix of its
own, one on a real Redis Cluster, one on PostgreSQL (tests/postgres_stores.py). The `backend` fixture
(tests/unit/conftest.py) runs a test on each."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from stores.base import CheckpointStore, LeaseStore, MessageStore, TaskStore
from stores.memory import InMemoryStores
from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.leases import RedisLeaseStore
from stores.redis.messages import RedisMessageStore
from stores.redis.tasks import RedisTaskStore
from stores.sqlite.factory import SQLiteStores, create_sqlite_stores
from tests.postgres_stores import postgres_stores
from tests.redis_cluster import cluster_stores_client

REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Backend:
    tasks: TaskStore
    messages: MessageStore
    checkpoints: CheckpointStore
    leases: LeaseStore
    redis: Redis | None = None
    prefix: str = ""
    postgres: Any = None  # the PostgresStores, for a test that reads its rows


@contextlib.asynccontextmanager
async def memory_backend() -> AsyncIterator[Backend]:
    stores = InMemoryStores.create(ttl_s=3600)
    yield Backend(stores.tasks, stores.messages, stores.checkpoints, stores.leases)


@contextlib.asynccontextmanager
async def redis_backend(*, cluster: bool = False) -> AsyncIterator[Backend]:
    """On the one Redis, or (`cluster`) on the test cluster (tests/redis_cluster.py)."""
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    if cluster:
        client: Any = cluster_stores_client()
        reader: Any = cluster_stores_client(socket_timeout=None)
    else:
        client = Redis.from_url(REDIS_URL)
        reader = Redis.from_url(REDIS_URL, socket_timeout=None)
    try:
        yield Backend(
            RedisTaskStore(client, prefix=prefix, ttl_s=3600, read_client=reader),
            RedisMessageStore(client, prefix=prefix, ttl_s=3600),
            RedisCheckpointStore(client, prefix=prefix, ttl_s=3600),
            RedisLeaseStore(client, prefix=prefix, ttl_s=3600),
            redis=client,
            prefix=prefix,
        )
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await reader.aclose()
        await client.aclose()


@contextlib.asynccontextmanager
async def sqlite_stores(**options: Any) -> AsyncIterator[SQLiteStores]:
    """Every store on a SQLite file of its own, in a directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="a2a-sqlite-") as directory:
        stores = create_sqlite_stores(f"{directory}/a2a.db", **{"ttl_s": 3600, **options})
        try:
            yield stores
        finally:
            await stores.aclose()


@contextlib.asynccontextmanager
async def sqlite_backend() -> AsyncIterator[Backend]:
    async with sqlite_stores() as stores:
        yield Backend(stores.tasks, stores.messages, stores.checkpoints, stores.leases)


@contextlib.asynccontextmanager
async def postgres_backend() -> AsyncIterator[Backend]:
    """On the test process's PostgreSQL database, emptied first (tests/postgres_stores.py)."""
    async with postgres_stores() as stores:
        yield Backend(
            stores.tasks, stores.messages, stores.checkpoints, stores.leases, postgres=stores
        )
