"""The in-memory task store is bounded (A2A_MEMORY_MAX_TASKS): ended tasks make room, oldest first;
when every task is active, a new one is refused as an overload instead of growing the process."""

from __future__ import annotations

import pytest

from app.errors import OverloadedError, as_a2a_error
from stores import memory
from stores.base import StoreFull
from stores.memory import InMemoryTaskStore
from stores.models import StatusUpdate, Task, TaskState, TaskStatus


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(memory.time, "monotonic", fake)
    return fake


def task(task_id: str, state: TaskState = TaskState.WORKING) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state))


async def finish(store: InMemoryTaskStore, task_id: str, owner: str = "o") -> None:
    done = task(task_id, TaskState.COMPLETED)
    update = StatusUpdate(task_id=task_id, context_id="c", status=done.status)
    await store.publish(task_id, update, owner=owner, snapshot=done)


async def test_the_oldest_ended_tasks_make_room_with_their_journals() -> None:
    store = InMemoryTaskStore(max_tasks=3)
    for name in ("a", "b", "c"):
        await store.create(task(name), owner="o")
    await finish(store, "b")  # ended first: the oldest ended task
    await finish(store, "a")
    await store.create(task("d"), owner="o")
    assert await store.get("b", owner="o") is None
    assert await store.read("b", owner="o", after=0, timeout_s=0) == []  # journal gone too
    for kept in ("a", "c", "d"):
        assert await store.get(kept, owner="o") is not None, kept
    await store.create(task("e"), owner="p")  # another owner's task: the next ended one goes
    assert await store.get("a", owner="o") is None
    assert await store.get("c", owner="o") is not None  # still working: never dropped


async def test_a_store_full_of_active_tasks_refuses_a_new_one() -> None:
    store = InMemoryTaskStore(max_tasks=2)
    await store.create(task("a"), owner="o")
    await store.create(task("b"), owner="p")
    with pytest.raises(StoreFull):
        await store.create(task("c"), owner="o")
    assert await store.get("c", owner="o") is None
    assert await store.get("a", owner="o") is not None
    assert await store.get("b", owner="p") is not None
    error = as_a2a_error(StoreFull("full"), where="test")
    assert isinstance(error, OverloadedError) and error.http_status == 503
    assert error.http_headers() == {"Retry-After": "5"}
    await finish(store, "a")
    await store.create(task("c"), owner="o")  # room again once one has ended
    assert await store.get("c", owner="o") is not None
