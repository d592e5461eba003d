"""The stores of each backend wired as the server wires them (the task and checkpoint stores check
fences against the lease store): one set in memory, one on the real Redis under a prefix of its
own. The `backend` fixture (tests/unit/conftest.py) runs a test on both."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from redis.asyncio import Redis

from stores.base import CheckpointStore, LeaseStore, MessageStore, TaskStore
from stores.memory import InMemoryStores
from stores.redis_stores import (
    RedisCheckpointStore,
    RedisLeaseStore,
    RedisMessageStore,
    RedisTaskStore,
)

REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Backend:
    tasks: TaskStore
    messages: MessageStore
    checkpoints: CheckpointStore
    leases: LeaseStore
    redis: Redis | None = None
    prefix: str = ""


@contextlib.asynccontextmanager
async def memory_backend() -> AsyncIterator[Backend]:
    stores = InMemoryStores.create(ttl_s=3600)
    yield Backend(stores.tasks, stores.messages, stores.checkpoints, stores.leases)


@contextlib.asynccontextmanager
async def redis_backend() -> AsyncIterator[Backend]:
    prefix = f"a2a-test-{uuid.uuid4().hex}"
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
