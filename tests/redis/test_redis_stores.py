"""Conversations, checkpoints, TTLs on every key, StoreUnavailable, and the factory."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from stores.base import JournalWrite, StoreUnavailable, TaskQuery
from stores.models import ChatMessage, StatusUpdate, Task, TaskState, TaskStatus
from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.factory import create_redis_stores
from stores.redis.keys import RedisKeys
from stores.redis.leases import RedisLeaseStore
from stores.redis.messages import RedisMessageStore
from stores.redis.tasks import RedisTaskStore
from tests.redis.conftest import REDIS_URL, TTL_S, keys_with_prefix

pytestmark = pytest.mark.redis

OWNER = "o:{1}"


def chat(*contents: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=content) for content in contents]


async def test_append_once_per_unit_and_window_reads_the_tail(
    messages: RedisMessageStore, client: Redis, prefix: str
) -> None:
    assert await messages.append("ctx", chat("a", "b", "c"), owner=OWNER, unit_id="u1")
    assert not await messages.append("ctx", chat("a", "b", "c"), owner=OWNER, unit_id="u1")
    assert await messages.append("ctx", [], owner=OWNER, unit_id="u2")
    assert not await messages.append("ctx", chat("late"), owner=OWNER, unit_id="u2")
    key = RedisKeys(prefix).conversation(OWNER, "ctx")
    assert await client.llen(key) == 3
    assert [m.content for m in await messages.window("ctx", owner=OWNER, limit=2)] == ["b", "c"]
    assert await messages.window("ctx", owner=OWNER, limit=-1) == []


async def test_a_large_unit_is_appended_whole(messages: RedisMessageStore) -> None:
    unit = chat(*(str(i) for i in range(2500)))
    assert await messages.append("ctx", unit, owner=OWNER, unit_id="big")
    window = await messages.window("ctx", owner=OWNER, limit=3000)
    assert [m.content for m in window] == [str(i) for i in range(2500)]


async def test_claim_key_has_the_ttl(
    messages: RedisMessageStore, client: Redis, prefix: str
) -> None:
    assert await messages.claim("ctx", "t1", owner=OWNER) is None
    assert 0 < await client.ttl(RedisKeys(prefix).claim(OWNER, "ctx")) <= TTL_S


async def test_every_key_the_stores_write_has_a_ttl(
    tasks: RedisTaskStore,
    messages: RedisMessageStore,
    checkpoints: RedisCheckpointStore,
    leases: RedisLeaseStore,
    client: Redis,
    prefix: str,
) -> None:
    task = Task(id="t:1", context_id="c:1", status=TaskStatus(state=TaskState.SUBMITTED))
    await tasks.create(task, owner=OWNER)
    task.status = TaskStatus(state=TaskState.WORKING)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=task.status)
    await tasks.publish(task.id, JournalWrite(update), owner=OWNER)
    await tasks.publish(task.id, JournalWrite(update, snapshot=task), owner=OWNER)
    await messages.append(task.context_id, chat("hi"), owner=OWNER, unit_id="u")
    await messages.claim(task.context_id, task.id, owner=OWNER)
    await checkpoints.save(task.id, '{"step": 1}', owner=OWNER)
    await leases.acquire(task.id, owner=OWNER, holder="h", ttl_s=5)
    await leases.request_cancel(task.id, owner=OWNER)
    await leases.renew(task.id, owner=OWNER, holder="h", ttl_s=5)

    keys = await keys_with_prefix(client, prefix)
    kinds = {key.split(":")[1] for key in keys}
    assert kinds == {
        "task",
        "journal",
        "tasks",
        "tasks-by-state",
        "context-tasks",
        "context-tasks-by-state",
        "conversation",
        "units",
        "claim",
        "checkpoint",
        "lease",
        "cancel",
        "leases",
    }
    for key in keys:
        assert 0 < await client.ttl(key) <= 2 * TTL_S, key


async def test_checkpoint_has_the_ttl(
    checkpoints: RedisCheckpointStore, client: Redis, prefix: str
) -> None:
    await checkpoints.save("t", "{}", owner=OWNER)
    assert 0 < await client.ttl(RedisKeys(prefix).checkpoint(OWNER, "t")) <= TTL_S
    assert await checkpoints.load("t", owner=OWNER) == "{}"


# --- Redis unreachable -----------------------------------------------------------------------


def every_store_call(
    tasks: RedisTaskStore,
    messages: RedisMessageStore,
    checkpoints: RedisCheckpointStore,
    leases: RedisLeaseStore,
) -> dict[str, Callable[[], Awaitable[Any]]]:
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))
    update = StatusUpdate(task_id="t", context_id="c", status=task.status)
    return {
        "tasks.create": lambda: tasks.create(task, owner=OWNER),
        "tasks.get": lambda: tasks.get("t", owner=OWNER),
        "tasks.list": lambda: tasks.list(TaskQuery(), owner=OWNER),
        "tasks.publish chunk": lambda: tasks.publish("t", JournalWrite(update), owner=OWNER),
        "tasks.publish snapshot": lambda: tasks.publish(
            "t", JournalWrite(update, snapshot=task), owner=OWNER
        ),
        "tasks.read": lambda: tasks.read("t", owner=OWNER, after=0, timeout_s=1),
        "messages.window": lambda: messages.window("c", owner=OWNER, limit=5),
        "messages.append": lambda: messages.append("c", chat("x"), owner=OWNER, unit_id="u"),
        "messages.claim": lambda: messages.claim("c", "t", owner=OWNER),
        "messages.release": lambda: messages.release("c", "t", owner=OWNER),
        "checkpoints.save": lambda: checkpoints.save("t", "{}", owner=OWNER),
        "checkpoints.load": lambda: checkpoints.load("t", owner=OWNER),
        "checkpoints.delete": lambda: checkpoints.delete("t", owner=OWNER),
        "leases.acquire": lambda: leases.acquire("t", owner=OWNER, holder="h", ttl_s=5),
        "leases.renew": lambda: leases.renew("t", owner=OWNER, holder="h", ttl_s=5),
        "leases.release": lambda: leases.release("t", owner=OWNER, holder="h"),
        "leases.request_cancel": lambda: leases.request_cancel("t", owner=OWNER),
        "leases.expired": lambda: leases.expired(),
    }


async def test_an_unreachable_redis_raises_store_unavailable(dead_port: int) -> None:
    dead = Redis(host="127.0.0.1", port=dead_port, retry=Retry(NoBackoff(), 0))
    calls = every_store_call(
        RedisTaskStore(dead, read_client=dead),
        RedisMessageStore(dead),
        RedisCheckpointStore(dead),
        RedisLeaseStore(dead),
    )
    try:
        for call in calls.values():
            with pytest.raises(StoreUnavailable):  # not a raw redis exception
                await call()
    finally:
        await dead.aclose()


async def test_the_factory_reports_an_unreachable_redis(dead_port: int) -> None:
    stores = create_redis_stores(
        f"redis://127.0.0.1:{dead_port}/0",
        prefix="a2a-test",
        ttl_s=60,
        max_running_turns=64,
        max_streams=1000,
    )
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable):
            await stores.ping()
        with pytest.raises(StoreUnavailable):
            await stores.tasks.read("t", owner=OWNER, after=0, timeout_s=1)
    finally:
        await stores.aclose()
    assert time.monotonic() - started < 5


# --- the factory -----------------------------------------------------------------------------


async def test_the_factory_builds_working_stores(prefix: str, client: Redis) -> None:
    stores = create_redis_stores(
        REDIS_URL, prefix=prefix, ttl_s=TTL_S, max_running_turns=64, max_streams=1000
    )
    try:
        await stores.ping()
        task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))
        await stores.tasks.create(task, owner=OWNER)
        assert (await stores.tasks.read("t", owner=OWNER, after=1, timeout_s=0.05)) == []
        await stores.checkpoints.save("t", "{}", owner=OWNER)
        assert await stores.leases.acquire("t", owner=OWNER, holder="h", ttl_s=5)
        assert await stores.messages.claim("c", "t", owner=OWNER) is None
    finally:
        await stores.aclose()


async def test_the_factory_accepts_redis_and_rediss_only() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6380/0"):
        stores = create_redis_stores(
            url, prefix="a2a", ttl_s=60, max_running_turns=64, max_streams=1000
        )  # connects on first use
        await stores.aclose()
    with pytest.raises(ValueError, match="redis://"):
        create_redis_stores(
            "http://127.0.0.1:6379", prefix="a2a", ttl_s=60, max_running_turns=64, max_streams=1000
        )
    with pytest.raises(ValueError, match="prefix"):
        create_redis_stores(
            "redis://127.0.0.1:6379",
            prefix="a{b}",
            ttl_s=60,
            max_running_turns=64,
            max_streams=1000,
        )
