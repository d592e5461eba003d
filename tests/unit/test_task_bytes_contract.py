"""`TaskStore.get_bytes`: the task as stored (its wire form) and its position, what an unshaped
GetTask writes out. One contract, every backend: the same task `get` reads, the latest snapshot
after every write, scoped to the owner; in memory, a snapshot changed behind the store's back is
checked (loaded) before it is handed out."""

from __future__ import annotations

import uuid

import pytest

from stores.base import JournalWrite, TaskUnreadable
from stores.codec import load_task
from stores.memory import InMemoryTaskStore
from stores.models import TaskState
from stores.tenants import tenant_owner

from .backends import Backend
from .test_store_contract import chunk_event, make_task, status_event, with_state


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:10]}"


async def test_the_bytes_are_the_task_get_reads_at_its_position(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    found = await backend.tasks.get_bytes(task.id, owner=owner)
    assert found is not None
    assert load_task(found.stored) == task
    assert found.position == 1


async def test_the_bytes_follow_every_write(backend: Backend, owner: str) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    await backend.tasks.get_bytes(task.id, owner=owner)  # read once before the writes
    working = with_state(task, TaskState.WORKING)
    write = JournalWrite(status_event(task, TaskState.WORKING), snapshot=working)
    await backend.tasks.publish(task.id, write, owner=owner)
    await backend.tasks.publish(task.id, JournalWrite(chunk_event(task, "a")), owner=owner)
    found = await backend.tasks.get_bytes(task.id, owner=owner)
    record = await backend.tasks.get(task.id, owner=owner)
    assert found is not None and record is not None
    assert load_task(found.stored).status.state == TaskState.WORKING
    assert load_task(found.stored) == record.task
    assert found.position == record.position == 2  # the snapshot's, not the chunk's


async def test_the_bytes_are_the_owners_only(backend: Backend, owner: str) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    for other in (f"other-{uuid.uuid4().hex[:10]}", tenant_owner("acme", owner)):
        assert await backend.tasks.get_bytes(task.id, owner=other) is None
    assert await backend.tasks.get_bytes("no-such-task", owner=owner) is None


async def test_a_snapshot_changed_behind_the_memory_store_is_checked_first(owner: str) -> None:
    store = InMemoryTaskStore()
    task = make_task()
    await store.create(task, owner=owner)
    kept = store._tasks[(owner, task.id)]
    kept.snapshot = b'{"id":' + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(TaskUnreadable):
        await store.get_bytes(task.id, owner=owner)
