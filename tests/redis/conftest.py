"""Fixtures for the Redis store tests: a real Redis on loopback, one key prefix per test.

Every test gets its own prefix (`a2a-test-<uuid>`), so tests never see each other's keys (or
anyone else's on the same server), and its keys are deleted at teardown (SCAN MATCH on the
prefix: fine in tests, never in the product).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.leases import RedisLeaseStore
from stores.redis.messages import RedisMessageStore
from stores.redis.tasks import RedisTaskStore
from tests.e2e.harness import free_port

REDIS_URL = os.environ.get("A2A_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TTL_S = 3600


async def _connect(**kwargs: object) -> Redis:
    client = Redis.from_url(REDIS_URL, **kwargs)  # type: ignore[arg-type]
    try:
        await client.ping()
    except RedisConnectionError as exc:
        await client.aclose()
        pytest.fail(f"these tests need a Redis at {REDIS_URL} ({exc})")
    return client


async def delete_prefix(client: Redis, prefix: str) -> None:
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
    if keys:
        await client.delete(*keys)


async def keys_with_prefix(client: Redis, prefix: str) -> list[str]:
    return sorted([key.decode() async for key in client.scan_iter(match=f"{prefix}:*", count=1000)])


@pytest.fixture
def prefix() -> str:
    return f"a2a-test-{uuid.uuid4().hex}"


@pytest.fixture
async def client(prefix: str) -> AsyncIterator[Redis]:
    redis = await _connect()
    try:
        yield redis
    finally:
        await delete_prefix(redis, prefix)
        await redis.aclose()


@pytest.fixture
async def read_client() -> AsyncIterator[Redis]:
    """For blocking reads: no socket timeout (a read may block longer than the default 5 s)."""
    redis = await _connect(socket_timeout=None)
    yield redis
    await redis.aclose()


@pytest.fixture
async def other_client() -> AsyncIterator[Redis]:
    """A second, independent client: "another process"."""
    redis = await _connect()
    yield redis
    await redis.aclose()


@pytest.fixture
def tasks(client: Redis, read_client: Redis, prefix: str) -> RedisTaskStore:
    return RedisTaskStore(client, prefix=prefix, ttl_s=TTL_S, read_client=read_client)


@pytest.fixture
def messages(client: Redis, prefix: str) -> RedisMessageStore:
    return RedisMessageStore(client, prefix=prefix, ttl_s=TTL_S)


@pytest.fixture
def checkpoints(client: Redis, prefix: str) -> RedisCheckpointStore:
    return RedisCheckpointStore(client, prefix=prefix, ttl_s=TTL_S)


@pytest.fixture
def leases(client: Redis, prefix: str) -> RedisLeaseStore:
    return RedisLeaseStore(client, prefix=prefix, ttl_s=TTL_S)


@pytest.fixture
def dead_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()
