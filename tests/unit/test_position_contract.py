"""`JournalWrite.if_position`: a publish made only while the task's journal ends at a position
(what A2A 1.1's `ifGenerationMatch` is checked with). One contract, every backend (memory, Redis,
Redis Cluster), wired as the server wires them (fences checked against the lease store).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from stores.base import (
    Fence,
    JournalWrite,
    LeaseLost,
    PositionConflict,
    StateConflict,
    TaskQuery,
)
from stores.codec import dump_event
from stores.models import TaskState

from .backends import Backend
from .test_store_contract import chunk_event, make_task, status_event, with_state


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:10]}"


async def test_a_write_at_the_expected_position_is_made(backend: Backend, owner: str) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    working = with_state(task, TaskState.WORKING)
    write = JournalWrite(status_event(task, TaskState.WORKING), snapshot=working, if_position=1)
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2
    record = await backend.tasks.get(task.id, owner=owner)
    assert record is not None
    assert record.position == 2
    assert record.task.status.state == TaskState.WORKING


async def test_a_write_at_another_position_is_refused_and_writes_nothing(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    await backend.tasks.publish(task.id, JournalWrite(chunk_event(task, "a")), owner=owner)
    await backend.tasks.publish(task.id, JournalWrite(chunk_event(task, "b")), owner=owner)
    working = with_state(task, TaskState.WORKING)
    for expected in (1, 2, 4):
        write = JournalWrite(
            status_event(task, TaskState.WORKING), snapshot=working, if_position=expected
        )
        with pytest.raises(PositionConflict) as refused:
            await backend.tasks.publish(task.id, write, owner=owner)
        assert (refused.value.expected, refused.value.current) == (expected, 3)
    # Nothing was written: the journal still ends at 3, the snapshot is the task's first.
    entries = await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1, 2, 3]
    record = await backend.tasks.get(task.id, owner=owner)
    assert record is not None
    assert (record.position, record.task.status.state) == (1, TaskState.SUBMITTED)


async def test_chunks_count_and_the_position_is_checked_before_they_are_written(
    backend: Backend, owner: str
) -> None:
    """Chunks published without a snapshot move the journal (the position a client last saw in
    a stream); chunks riding with a refused write are not written either."""
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    await backend.tasks.publish_chunks(
        task.id, [dump_event(chunk_event(task, "x"))] * 3, owner=owner
    )
    done = with_state(task, TaskState.COMPLETED)
    stale = JournalWrite(
        status_event(task, TaskState.COMPLETED),
        snapshot=done,
        if_position=1,
        chunks=[dump_event(chunk_event(task, "y"))],
    )
    with pytest.raises(PositionConflict) as refused:
        await backend.tasks.publish(task.id, stale, owner=owner)
    assert refused.value.current == 4
    fresh = JournalWrite(status_event(task, TaskState.COMPLETED), snapshot=done, if_position=4)
    assert await backend.tasks.publish(task.id, fresh, owner=owner) == 5


async def test_without_a_snapshot_too(backend: Backend, owner: str) -> None:
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    with pytest.raises(PositionConflict):
        await backend.tasks.publish(
            task.id, JournalWrite(chunk_event(task, "a"), if_position=2), owner=owner
        )
    write = JournalWrite(chunk_event(task, "a"), if_position=1)
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2


async def test_a_retry_of_a_write_that_was_made_returns_its_position(
    backend: Backend, owner: str
) -> None:
    """The event id is checked first: a retry (its reply was lost) is not a conflict, though the
    journal has moved past the position it expected."""
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    working = with_state(task, TaskState.WORKING)
    write = JournalWrite(
        status_event(task, TaskState.WORKING), snapshot=working, if_position=1, event_id="e-1"
    )
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2


async def test_the_fence_is_checked_before_the_position(backend: Backend, owner: str) -> None:
    task = make_task()
    epoch = await backend.leases.acquire(task.id, owner=owner, holder="a", ttl_s=30)
    await backend.tasks.create(task, owner=owner, fence=Fence("a", epoch))
    stale = Fence("a", epoch + 7)
    write = JournalWrite(chunk_event(task, "a"), if_position=5, fence=stale)
    with pytest.raises(LeaseLost):
        await backend.tasks.publish(task.id, write, owner=owner)


async def test_the_position_is_checked_before_the_state(backend: Backend, owner: str) -> None:
    """Both stale: the position's error, which says where the journal is."""
    task = make_task()
    await backend.tasks.create(task, owner=owner)
    working = with_state(task, TaskState.WORKING)
    await backend.tasks.publish(
        task.id, JournalWrite(status_event(task, TaskState.WORKING), snapshot=working), owner=owner
    )
    write = JournalWrite(
        status_event(task, TaskState.COMPLETED),
        snapshot=with_state(task, TaskState.COMPLETED),
        if_state=TaskState.SUBMITTED,
        if_position=1,
    )
    with pytest.raises(PositionConflict) as refused:
        await backend.tasks.publish(task.id, write, owner=owner)
    assert refused.value.current == 2
    write = JournalWrite(
        status_event(task, TaskState.COMPLETED),
        snapshot=with_state(task, TaskState.COMPLETED),
        if_state=TaskState.SUBMITTED,
        if_position=2,
    )
    with pytest.raises(StateConflict):
        await backend.tasks.publish(task.id, write, owner=owner)


async def test_of_writers_expecting_the_same_position_exactly_one_wins(
    backend: Backend, owner: str
) -> None:
    task = make_task(state=TaskState.INPUT_REQUIRED)
    await backend.tasks.create(task, owner=owner)

    async def answer(n: int) -> int | PositionConflict:
        write = JournalWrite(
            status_event(task, TaskState.SUBMITTED),
            snapshot=with_state(task, TaskState.SUBMITTED),
            if_position=1,
            event_id=f"answer-{n}",
        )
        try:
            return await backend.tasks.publish(task.id, write, owner=owner)
        except PositionConflict as exc:
            return exc

    outcomes = await asyncio.gather(*(answer(n) for n in range(8)))
    assert sorted(o for o in outcomes if isinstance(o, int)) == [2]
    refused = [o for o in outcomes if isinstance(o, PositionConflict)]
    assert len(refused) == 7
    assert {exc.current for exc in refused} == {2}


async def test_a_list_gives_each_task_the_position_its_snapshot_reflects(
    backend: Backend, owner: str
) -> None:
    """ListTasks' generations: the same positions `get` gives."""
    first, second = make_task(), make_task()
    for task in (first, second):
        await backend.tasks.create(task, owner=owner)
    await backend.tasks.publish(first.id, JournalWrite(chunk_event(first, "a")), owner=owner)
    working = with_state(first, TaskState.WORKING)
    await backend.tasks.publish(
        first.id,
        JournalWrite(status_event(first, TaskState.WORKING), snapshot=working),
        owner=owner,
    )
    await backend.tasks.publish(first.id, JournalWrite(chunk_event(first, "b")), owner=owner)
    page = await backend.tasks.list(TaskQuery(), owner=owner)
    listed = dict(zip([task.id for task in page.tasks], page.positions, strict=True))
    assert listed == {first.id: 3, second.id: 1}
