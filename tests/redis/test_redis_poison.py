"""RedisTaskStore reads around a task it cannot load: `list` leaves it out (logged once, no
traceback), `get` raises TaskUnreadable; the other tasks read as before."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from stores.base import TaskQuery, TaskUnreadable
from stores.models import Message, Part, Role, Task, TaskState, TaskStatus
from stores.redis.keys import RedisKeys
from stores.redis.tasks import RedisTaskStore

pytestmark = pytest.mark.redis

OWNER = "owner-1"


def make_task(task_id: str, data: object) -> Task:
    return Task(
        id=task_id,
        context_id="ctx",
        status=TaskStatus(state=TaskState.COMPLETED, timestamp=datetime(2026, 1, 1, tzinfo=UTC)),
        history=[Message(message_id="m", role=Role.USER, parts=[Part(data=data)])],
    )


async def test_list_leaves_out_unloadable_tasks_and_get_says_unreadable(
    tasks: RedisTaskStore, client: Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    keys = RedisKeys(prefix)
    await tasks.create(make_task("good", {"a": [1]}), owner=OWNER)
    for task_id, raw in (("deep", "[" * 250 + "]" * 250), ("garbage", "{not json")):
        await tasks.create(make_task(task_id, "fine"), owner=OWNER)
        await client.hset(keys.task(OWNER, task_id), "task", raw)  # corrupted after the fact

    with caplog.at_level(logging.WARNING):
        page = await tasks.list(TaskQuery(), owner=OWNER)
        by_context = await tasks.list(TaskQuery(context_id="ctx"), owner=OWNER)
    assert [task.id for task in page.tasks] == ["good"]
    assert [task.id for task in by_context.tasks] == ["good"]
    for task_id in ("deep", "garbage"):
        logged = [r for r in caplog.records if task_id in r.getMessage()]
        assert len(logged) == 2, caplog.text
        assert all(r.levelno == logging.WARNING and r.exc_info is None for r in logged)
        with pytest.raises(TaskUnreadable) as raised:
            await tasks.get(task_id, owner=OWNER)
        assert raised.value.task_id == task_id
    good = await tasks.get("good", owner=OWNER)
    assert good is not None and good.task.history[0].parts[0].data == {"a": [1]}


async def test_list_leaves_out_a_task_whose_listing_fields_are_broken(
    tasks: RedisTaskStore, client: Redis, prefix: str
) -> None:
    await tasks.create(make_task("good", 1), owner=OWNER)
    await tasks.create(make_task("broken", 2), owner=OWNER)
    await client.hset(RedisKeys(prefix).task(OWNER, "broken"), "ms", "soon")
    page = await tasks.list(TaskQuery(), owner=OWNER)
    assert [task.id for task in page.tasks] == ["good"]
