"""Lease epochs, fenced writes and the context claim's compare-and-set: one contract, both backends.

A backend here is the set of stores wired as the server wires them (the task and checkpoint stores
check fences against the lease store). Every test uses a fresh owner, so a shared Redis is fine.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from stores.base import (
    ClaimHolder,
    Fence,
    JournalWrite,
    LeaseLost,
    LeaseStatus,
    LeaseStore,
    TaskRef,
)
from stores.codec import dump_event
from stores.models import Task, TaskState
from stores.redis.keys import RedisKeys

from .backends import Backend, redis_backend
from .test_store_contract import chunk_event, make_task, status_event, with_state


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:10]}"


async def _lease(leases: LeaseStore, task_id: str, owner: str, holder: str) -> Fence:
    epoch = await leases.acquire(task_id, owner=owner, holder=holder, ttl_s=30)
    assert epoch, f"{holder} could not take the lease"
    return Fence(holder, epoch)


async def _take_over(
    leases: LeaseStore, task_id: str, owner: str, old: Fence, *, new: str
) -> Fence:
    """`old`'s holder stopped renewing (its lease expires now); `new` takes the lease over."""
    await leases.hand_over(task_id, owner=owner, holder=old.holder)
    fence = await _lease(leases, task_id, owner, new)
    assert fence.epoch > old.epoch, "a takeover kept the epoch"
    return fence


async def _chunk(backend: Backend, task: Task, owner: str, fence: Fence, text: str) -> int:
    """Publish one answer chunk as the holder of `fence`."""
    return await backend.tasks.publish(
        task.id, JournalWrite(chunk_event(task, text), fence=fence), owner=owner
    )


# --- epochs ------------------------------------------------------------------------------------


async def test_epochs_grow_with_every_new_holder_and_survive_a_release(
    backend: Backend, owner: str
) -> None:
    leases = backend.leases
    first = await _lease(leases, "t1", owner, "a")
    assert first.epoch >= 1
    assert await leases.acquire("t1", owner=owner, holder="a", ttl_s=30) == first.epoch, (
        "re-entrant"
    )
    assert await leases.acquire("t1", owner=owner, holder="b", ttl_s=30) == 0, "held by a"
    await leases.release("t1", owner=owner, holder="a")
    second = await _lease(leases, "t1", owner, "a")
    assert second.epoch > first.epoch, "an epoch came back after a release"
    await _take_over(leases, "t1", owner, second, new="b")


async def test_is_held_follows_holder_and_expiry(backend: Backend, owner: str) -> None:
    leases = backend.leases
    assert not await leases.is_held("t1", owner=owner)
    fence = await _lease(leases, "t1", owner, "a")
    assert await leases.is_held("t1", owner=owner)
    assert not await leases.is_held("t1", owner=f"{owner}-other")
    await leases.hand_over("t1", owner=owner, holder=fence.holder)  # expires now
    assert not await leases.is_held("t1", owner=owner), "an expired lease counts as held"
    await _lease(leases, "t1", owner, "a")
    await leases.release("t1", owner=owner, holder="a")
    assert not await leases.is_held("t1", owner=owner), "a released lease counts as held"


async def test_renew_many_answers_each_lease_in_order(backend: Backend, owner: str) -> None:
    leases = backend.leases
    await _lease(leases, "mine", owner, "a")
    await _lease(leases, "theirs", owner, "b")
    await _lease(leases, "cancel", owner, "a")
    await leases.request_cancel("cancel", owner=owner)
    held = [(TaskRef(owner, name), "a") for name in ("mine", "theirs", "cancel")]
    assert await leases.renew_many(held, ttl_s=30) == [
        LeaseStatus.HELD,
        LeaseStatus.LOST,
        LeaseStatus.CANCEL_REQUESTED,
    ]
    assert await leases.renew_many([], ttl_s=30) == []


async def test_a_cancel_request_on_a_released_lease_is_not_kept(
    backend: Backend, owner: str
) -> None:
    leases = backend.leases
    await _lease(leases, "t1", owner, "a")
    await leases.release("t1", owner=owner, holder="a")
    await leases.request_cancel("t1", owner=owner)
    await _lease(leases, "t1", owner, "b")
    assert await leases.renew("t1", owner=owner, holder="b", ttl_s=30) is LeaseStatus.HELD


# --- fenced writes -----------------------------------------------------------------------------


async def test_a_fenced_publish_after_a_takeover_writes_nothing(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    old = await _lease(backend.leases, task.id, owner, "old")
    await backend.tasks.create(task, owner=owner)
    assert await _chunk(backend, task, owner, old, "a") == 2
    new = await _take_over(backend.leases, task.id, owner, old, new="new")

    with pytest.raises(LeaseLost):
        await _chunk(backend, task, owner, old, "late")
    with pytest.raises(LeaseLost):
        await backend.tasks.publish(
            task.id,
            JournalWrite(
                status_event(task, TaskState.COMPLETED),
                snapshot=with_state(task, TaskState.COMPLETED),
                fence=old,
            ),
            owner=owner,
        )
    assert await _chunk(backend, task, owner, new, "b") == 3
    entries = await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1, 2, 3], "the stale writer was journaled"
    record = await backend.tasks.get(task.id, owner=owner)
    assert record is not None and record.task.status.state == TaskState.SUBMITTED


@pytest.mark.parametrize("how", ["released", "another holder at the same epoch"])
async def test_a_fence_that_no_longer_holds_writes_nothing(
    backend: Backend, owner: str, how: str
) -> None:
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    await backend.tasks.create(task, owner=owner)
    if how == "released":
        await backend.leases.release(task.id, owner=owner, holder="a")
    else:
        fence = Fence("b", fence.epoch)
    with pytest.raises(LeaseLost):
        await _chunk(backend, task, owner, fence, "x")
    assert len(await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)) == 1


async def test_a_fenced_checkpoint_save_after_a_takeover_keeps_the_new_holders(
    backend: Backend, owner: str
) -> None:
    old = await _lease(backend.leases, "t1", owner, "old")
    await backend.checkpoints.save("t1", "old-1", owner=owner, fence=old)
    new = await _take_over(backend.leases, "t1", owner, old, new="new")
    await backend.checkpoints.save("t1", "new-1", owner=owner, fence=new)
    with pytest.raises(LeaseLost):
        await backend.checkpoints.save("t1", "old-2", owner=owner, fence=old)
    assert await backend.checkpoints.load("t1", owner=owner) == "new-1"


async def test_a_retried_fenced_publish_is_journaled_once_even_after_losing_the_lease(
    backend: Backend, owner: str
) -> None:
    """The first attempt was written under the lease; its retry must not fail or add anything."""
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    await backend.tasks.create(task, owner=owner)
    write = JournalWrite(chunk_event(task, "x"), fence=fence, event_id="e1")
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2
    await backend.leases.release(task.id, owner=owner, holder="a")
    assert await backend.tasks.publish(task.id, write, owner=owner) == 2


@pytest.mark.redis
async def test_fenced_journal_entries_carry_the_writers_epoch(owner: str) -> None:
    """What an outside check reads to find double writers: epochs never go down in a journal."""
    async with redis_backend() as backend:
        task = make_task()
        first = await _lease(backend.leases, task.id, owner, "a")
        await backend.tasks.create(task, owner=owner)
        await _chunk(backend, task, owner, first, "1")
        second = await _take_over(backend.leases, task.id, owner, first, new="b")
        await _chunk(backend, task, owner, second, "2")
        assert backend.redis is not None
        journal = RedisKeys(backend.prefix).journal(owner, task.id)
        entries = await backend.redis.xrange(journal)
        epochs = [fields.get(b"epoch") for _, fields in entries]
        assert epochs == [None, str(first.epoch).encode(), str(second.epoch).encode()]


# --- the context claim -------------------------------------------------------------------------


async def test_replace_claim_only_from_the_holder_it_names(backend: Backend, owner: str) -> None:
    messages = backend.messages
    assert await messages.claim("ctx", "stale", owner=owner) is None
    assert not await messages.replace_claim("ctx", "someone-else", "t2", owner=owner)
    assert await messages.claim("ctx", "t2", owner=owner) == ClaimHolder("stale", fenced=False)
    assert await messages.replace_claim("ctx", "stale", "t2", owner=owner)
    assert await messages.claim("ctx", "t3", owner=owner) == ClaimHolder("t2", fenced=False)
    assert not await messages.replace_claim("ctx", "stale", "t3", owner=owner), "replaced twice"


async def test_of_many_replacing_one_stale_claim_one_wins(backend: Backend, owner: str) -> None:
    messages = backend.messages
    assert await messages.claim("ctx", "stale", owner=owner) is None
    results = await asyncio.gather(
        *(messages.replace_claim("ctx", "stale", f"t{i}", owner=owner) for i in range(10))
    )
    assert results.count(True) == 1
    winner = f"t{results.index(True)}"
    assert await messages.claim("ctx", "probe", owner=owner) == ClaimHolder(winner, fenced=False)


async def test_a_fenced_chunk_batch_after_a_takeover_writes_nothing(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    old = await _lease(backend.leases, task.id, owner, "old")
    await backend.tasks.create(task, owner=owner)
    batch = [dump_event(chunk_event(task, text)) for text in ("a", "b")]
    assert await backend.tasks.publish_chunks(task.id, batch, owner=owner, fence=old) == 3
    new = await _take_over(backend.leases, task.id, owner, old, new="new")
    with pytest.raises(LeaseLost):
        await backend.tasks.publish_chunks(task.id, batch, owner=owner, fence=old)
    assert await backend.tasks.publish_chunks(task.id, batch[:1], owner=owner, fence=new) == 4
    entries = await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1, 2, 3, 4], "the stale writer was journaled"


# --- a turn's chunk sink (TaskStore.chunk_sink) --------------------------------------------------


async def _no_retry(write: Callable[[], Awaitable[int]]) -> int:
    return await write()


async def test_a_chunk_sink_keeps_the_turns_order_with_its_next_event(
    backend: Backend, owner: str
) -> None:
    """Whatever the store's way of writing chunks, a turn's chunks and its next event are
    journaled in the order the turn made them, at consecutive positions."""
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    await backend.tasks.create(task, owner=owner)
    sink = backend.tasks.chunk_sink(task.id, owner=owner, fence=fence, retry=_no_retry)
    for text in ("a", "b", "c"):
        await sink.send(dump_event(chunk_event(task, text)))
    taken = sink.take()
    await sink.written()
    done = status_event(task, TaskState.COMPLETED)
    write = JournalWrite(done, chunks=taken, fence=fence)
    assert await backend.tasks.publish(task.id, write, owner=owner) == 5
    entries = await backend.tasks.read(task.id, owner=owner, after=1, timeout_s=0)
    assert [entry.position for entry in entries] == [2, 3, 4, 5]
    texts = [e.event.artifact.parts[0].text for e in entries[:3]]  # type: ignore[union-attr]
    assert texts == ["a", "b", "c"]
    assert entries[-1].event == done


async def test_a_chunk_sink_of_a_lost_lease_raises_and_writes_nothing(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    old = await _lease(backend.leases, task.id, owner, "old")
    await backend.tasks.create(task, owner=owner)
    sink = backend.tasks.chunk_sink(task.id, owner=owner, fence=old, retry=_no_retry)
    await _take_over(backend.leases, task.id, owner, old, new="new")
    await sink.send(dump_event(chunk_event(task, "late")))
    with pytest.raises(LeaseLost):
        await sink.written()
    entries = await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1], "the stale writer was journaled"


async def test_a_stopped_chunk_sink_leaves_what_it_had_not_written(
    backend: Backend, owner: str
) -> None:
    """A turn stopped without ending (shutdown): its unwritten chunks are left, as a crash would
    leave them, and nothing is written after the stop."""
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    await backend.tasks.create(task, owner=owner)
    sink = backend.tasks.chunk_sink(task.id, owner=owner, fence=fence, retry=_no_retry)
    await sink.send(dump_event(chunk_event(task, "never")))
    await sink.stop()
    await asyncio.sleep(0.05)  # a write scheduled for later would have run by now
    entries = await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1]
