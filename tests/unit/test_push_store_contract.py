"""The push-config store's contract, on both backends: configs per task and owner, idempotent
delete, a cursor that only moves forward; on Redis, in the task's slot and with a TTL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from stores.base import PushConfigStore
from stores.memory import InMemoryPushConfigStore
from stores.models import PushAuthentication, PushConfig
from stores.redis.push import RedisPushConfigStore
from tests.postgres_stores import postgres_stores
from tests.redis_cluster import cluster_stores_client

from .backends import sqlite_stores

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def pushes(request) -> AsyncIterator[PushConfigStore]:
    if request.param == "memory":
        yield InMemoryPushConfigStore()
        return
    if request.param == "sqlite":
        async with sqlite_stores() as stores:
            yield stores.pushes
        return
    if request.param == "postgres":
        async with postgres_stores(ttl_s=60) as stores:
            yield stores.pushes
        return
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    client = (
        cluster_stores_client() if request.param == "redis-cluster" else Redis.from_url(REDIS_URL)
    )
    try:
        yield RedisPushConfigStore(client, prefix=prefix, ttl_s=60)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def config(task_id: str, config_id: str, **fields: object) -> PushConfig:
    return PushConfig(
        id=config_id, task_id=task_id, url=f"https://hooks.example/{config_id}", **fields
    )


async def test_put_get_list_delete(pushes: PushConfigStore) -> None:
    first = config("t1", "a", token="tok", authentication=PushAuthentication(scheme="Bearer"))
    await pushes.put(first, owner="alice")
    await pushes.put(config("t1", "b", generation="0.3"), owner="alice")
    assert await pushes.get("t1", "a", owner="alice") == first
    assert sorted(c.id for c in await pushes.list("t1", owner="alice")) == ["a", "b"]
    assert (await pushes.get("t1", "b", owner="alice")).generation == "0.3"

    replaced = config("t1", "a", token="tok-2")
    await pushes.put(replaced, owner="alice")
    assert await pushes.get("t1", "a", owner="alice") == replaced

    assert await pushes.delete("t1", "a", owner="alice") is True
    assert await pushes.delete("t1", "a", owner="alice") is False
    assert await pushes.get("t1", "a", owner="alice") is None
    assert [c.id for c in await pushes.list("t1", owner="alice")] == ["b"]


async def test_scoped_by_owner_and_task(pushes: PushConfigStore) -> None:
    await pushes.put(config("t1", "a"), owner="alice")
    assert await pushes.get("t1", "a", owner="bob") is None
    assert await pushes.list("t1", owner="bob") == []
    assert await pushes.list("t2", owner="alice") == []
    assert await pushes.delete("t1", "a", owner="bob") is False
    assert await pushes.get("t1", "a", owner="alice") is not None


async def test_the_cursor_only_moves_forward(pushes: PushConfigStore) -> None:
    assert await pushes.cursor("t1", owner="alice") == 0
    await pushes.advance("t1", 5, owner="alice")
    await pushes.advance("t1", 3, owner="alice")  # a slower delivery finishing late
    assert await pushes.cursor("t1", owner="alice") == 5
    assert await pushes.cursor("t1", owner="bob") == 0


@pytest.mark.redis
async def test_redis_keys_share_the_tasks_slot_and_expire() -> None:
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    client = Redis.from_url(REDIS_URL)
    try:
        store = RedisPushConfigStore(client, prefix=prefix, ttl_s=60)
        await store.put(config("t{1}", "a"), owner="alice")
        await store.advance("t{1}", 2, owner="alice")
        keys = [key.decode() async for key in client.scan_iter(match=f"{prefix}:*")]
        assert len(keys) == 2
        tags = {key.split("{", 1)[1].split("}", 1)[0] for key in keys}
        assert tags == {"t%7B1%7D"}, keys  # one hash tag, the task's: one cluster slot
        for key in keys:
            assert 0 < await client.pttl(key) <= 60_000
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_memory_keeps_configs_of_the_latest_tasks_only() -> None:
    store = InMemoryPushConfigStore(max_tasks=2)
    for task_id in ("t1", "t2", "t3"):
        await store.put(config(task_id, "a"), owner="alice")
    assert await store.list("t1", owner="alice") == []
    assert len(await store.list("t3", owner="alice")) == 1
