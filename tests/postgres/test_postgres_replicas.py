"""Two replicas on one database: a journal write or a cancel on one reaches the other's waiters
by LISTEN/NOTIFY, at once and without polling; buckets and fences are shared."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from stores.base import Fence, JournalWrite, TaskRef
from stores.postgres.database import Database
from stores.rate_limit import RateLimit
from tests.unit.test_store_contract import chunk_event, make_task

from .conftest import Replicas


class _CountingDatabase:
    """Counts the pooled connections a replica takes (each store call takes one)."""

    def __init__(self, database: Database) -> None:
        self.taken = 0
        self._connection = database.connection

        @contextlib.asynccontextmanager
        async def connection() -> AsyncIterator[asyncpg.Connection]:
            self.taken += 1
            async with self._connection() as taken:
                yield taken

        database.connection = connection  # type: ignore[method-assign]


async def test_a_read_waiting_on_one_replica_wakes_at_anothers_publish(
    replicas: Replicas,
) -> None:
    writer, reader = replicas(), replicas()
    task = make_task()
    await writer.tasks.create(task, owner="alice")
    counting = _CountingDatabase(reader.database)
    reading = asyncio.create_task(reader.tasks.read(task.id, owner="alice", after=1, timeout_s=30))
    await asyncio.sleep(1.5)  # the reader waits (a poller would read again meanwhile)
    waited_with = counting.taken
    started = time.monotonic()
    await writer.tasks.publish(task.id, JournalWrite(chunk_event(task, "hi")), owner="alice")
    entries = await asyncio.wait_for(reading, 5)
    assert time.monotonic() - started < 0.5, "the read did not wake at the publish"
    assert [entry.position for entry in entries] == [2]
    assert waited_with <= 2, f"the reader polled: {waited_with} store calls while it waited"


async def test_a_publish_just_before_its_replica_closes_still_wakes_anothers_reader(
    replicas: Replicas,
) -> None:
    """The notification goes after the write commits: closing the writer sends what it has
    not sent yet, rather than leave the reader to its read's timeout."""
    writer, reader = replicas(), replicas()
    task = make_task()
    await writer.tasks.create(task, owner="alice")
    reading = asyncio.create_task(reader.tasks.read(task.id, owner="alice", after=1, timeout_s=60))
    await asyncio.sleep(0.5)  # the reader listens and waits
    await writer.tasks.publish(task.id, JournalWrite(chunk_event(task, "last")), owner="alice")
    await writer.aclose()
    entries = await asyncio.wait_for(reading, 10)
    assert [entry.position for entry in entries] == [2]


async def test_a_retried_publish_announces_what_its_first_call_did_not(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish that committed but lost its reply (and so its announcement) is retried with the
    same event id: journaled once, and the retry wakes the other replica's reader."""
    writer, reader = replicas(), replicas()
    task = make_task()
    await writer.tasks.create(task, owner="alice")
    reading = asyncio.create_task(reader.tasks.read(task.id, owner="alice", after=1, timeout_s=60))
    await asyncio.sleep(0.5)  # the reader listens and waits
    write = JournalWrite(chunk_event(task, "once"), event_id="e-1")
    with monkeypatch.context() as patched:
        patched.setattr(writer.tasks.announcements, "announce", lambda payload: None)
        assert await writer.tasks.publish(task.id, write, owner="alice") == 2
    await asyncio.sleep(1.0)
    assert not reading.done(), "woken with no announcement"
    assert await writer.tasks.publish(task.id, write, owner="alice") == 2  # the retry
    entries = await asyncio.wait_for(reading, 10)
    assert [entry.position for entry in entries] == [2]


async def test_every_reader_of_a_replica_shares_its_one_listening_connection(
    replicas: Replicas, database: str
) -> None:
    writer, reader = replicas(), replicas()
    tasks = [make_task() for _ in range(20)]
    for task in tasks:
        await writer.tasks.create(task, owner="alice")
    reads = [
        asyncio.create_task(reader.tasks.read(task.id, owner="alice", after=1, timeout_s=30))
        for task in tasks
    ]
    await asyncio.sleep(0.5)
    admin = await asyncpg.connect(database)
    try:
        listening = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE 'LISTEN%'"
        )
    finally:
        await admin.close()
    for task in tasks:
        await writer.tasks.publish(task.id, JournalWrite(chunk_event(task, "x")), owner="alice")
    results = await asyncio.wait_for(asyncio.gather(*reads), 5)
    assert all([entry.position for entry in result] == [2] for result in results)
    assert listening <= 2, f"{listening} listening connections for two replicas"


async def test_a_cancel_on_one_replica_reaches_the_holder_on_another(replicas: Replicas) -> None:
    holder, other = replicas(), replicas()
    assert await holder.leases.acquire("t1", owner="alice", holder="p1/1", ttl_s=30)
    requests = holder.leases.cancel_requests()
    first = asyncio.ensure_future(anext(requests))
    await asyncio.sleep(0.5)  # listening
    started = time.monotonic()
    await other.leases.request_cancel("t1", owner="alice")
    assert await asyncio.wait_for(first, 5) == TaskRef("alice", "t1")
    assert time.monotonic() - started < 0.5
    await requests.aclose()


async def test_a_takeover_on_one_replica_fences_the_other(replicas: Replicas) -> None:
    old, new = replicas(), replicas()
    task = make_task()
    epoch = await old.leases.acquire(task.id, owner="alice", holder="p1/1", ttl_s=30)
    await old.tasks.create(task, owner="alice", fence=Fence("p1/1", epoch))
    await old.leases.hand_over(task.id, owner="alice", holder="p1/1")
    taken = await new.leases.acquire(task.id, owner="alice", holder="p2/1", ttl_s=30)
    assert taken > epoch
    write = JournalWrite(chunk_event(task, "late"), fence=Fence("p1/1", epoch))
    try:
        await old.tasks.publish(task.id, write, owner="alice")
        raise AssertionError("the stale holder wrote")
    except Exception as exc:
        assert type(exc).__name__ == "LeaseLost"
    ours = JournalWrite(chunk_event(task, "mine"), fence=Fence("p2/1", taken))
    assert await new.tasks.publish(task.id, ours, owner="alice") == 2


async def test_fenced_journal_entries_carry_the_writers_epoch(
    replicas: Replicas, database: str
) -> None:
    """What an outside check reads to find double writers: epochs never go down in a journal."""
    stores = replicas()
    task = make_task()
    first = await stores.leases.acquire(task.id, owner="alice", holder="a", ttl_s=30)
    await stores.tasks.create(task, owner="alice")
    await stores.tasks.publish(
        task.id, JournalWrite(chunk_event(task, "1"), fence=Fence("a", first)), owner="alice"
    )
    await stores.leases.hand_over(task.id, owner="alice", holder="a")
    second = await stores.leases.acquire(task.id, owner="alice", holder="b", ttl_s=30)
    await stores.tasks.publish(
        task.id, JournalWrite(chunk_event(task, "2"), fence=Fence("b", second)), owner="alice"
    )
    admin = await asyncpg.connect(database)
    try:
        rows = await admin.fetch(
            "SELECT epoch FROM journal WHERE owner = 'alice' AND task_id = $1 ORDER BY position",
            task.id,
        )
    finally:
        await admin.close()
    assert [row["epoch"] for row in rows] == [None, first, second]


async def test_the_rate_limit_is_shared_by_the_replicas(replicas: Replicas) -> None:
    limit = RateLimit(requests=3, period_s=60)
    one, two = replicas().rate_limiter(limit), replicas().rate_limiter(limit)
    decisions = [await one.acquire("bob"), await two.acquire("bob"), await one.acquire("bob")]
    assert all(decision.allowed for decision in decisions)
    refused = await two.acquire("bob")
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 20, refused  # one token per 20 s
    assert (await two.acquire("carol")).allowed, "another key shares the bucket"
