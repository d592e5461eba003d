"""JournalMux: every reader of a shared read gets exactly the positions after its own.

Issue 48's first defect: a reader that joined a journal while the shard's read of it was in
flight from a later position was handed what that read returned (the entries after the other
reader's position), skipping everything in between. The mux's reads go to a real Redis here; the
read client only holds a reply back until the test lets it through, so that a reader joins at
the exact moment the bug needed (Redis has answered the read, the shard has not delivered it).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
from redis.asyncio import Redis

from stores.base import JournalWrite
from stores.redis.journal_mux import JournalMux
from stores.redis.keys import RedisKeys
from stores.redis.tasks import RedisTaskStore
from tests.redis.conftest import TTL_S
from tests.redis.test_redis_tasks import OWNER, chunk, make_task

pytestmark = pytest.mark.redis


class HeldReads:
    """A read client whose next blocking read's reply the test holds until it lets it through
    (`hold()` ... `answered` ... `release()`); every other read answers as Redis does."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._gate = asyncio.Event()
        self._holding = False  # the next reply waits at `_gate`
        self.answered = asyncio.Event()  # Redis has answered the held read
        self.reads: list[dict[str, str]] = []  # what each read asked for (journal -> from id)

    def hold(self) -> None:
        self._gate, self.answered, self._holding = asyncio.Event(), asyncio.Event(), True

    def release(self) -> None:
        self._gate.set()

    async def xread(self, streams: dict[Any, Any], **kwargs: Any) -> Any:
        self.reads.append({str(key): str(start) for key, start in streams.items()})
        reply = await self._redis.xread(streams, **kwargs)
        if self._holding:
            self._holding = False
            self.answered.set()
            await self._gate.wait()
        return reply


@pytest.fixture
async def store(client: Redis, read_client: Redis, prefix: str) -> RedisTaskStore:
    return RedisTaskStore(client, prefix=prefix, ttl_s=TTL_S, read_client=read_client)


@pytest.fixture
async def held(
    client: Redis, read_client: Redis, prefix: str
) -> AsyncIterator[tuple[JournalMux, HeldReads]]:
    reads = HeldReads(read_client)
    wake = partial(RedisKeys(prefix).wake, uuid.uuid4().hex)
    mux = JournalMux(reads, client, wake_key=wake)  # type: ignore[arg-type]
    yield mux, reads
    await mux.aclose()


async def _publish(store: RedisTaskStore, task_id: str, texts: list[str]) -> None:
    task = make_task(task_id)
    for text in texts:
        await store.publish(task_id, JournalWrite(chunk(task, text)), owner=OWNER)


async def _until(condition: Any, what: str) -> None:
    """Until `condition()` holds; the yields of a loop, not a clock (a slow machine waits)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


async def test_a_reader_joining_behind_a_read_in_flight_gets_the_entries_after_its_own(
    store: RedisTaskStore, held: tuple[JournalMux, HeldReads], prefix: str
) -> None:
    """Reader A waits at 7 (the shared read reads after 7); Redis answers with 8; before the
    shard hands that out, reader B joins at 2. B must get 3..8, not 8 (positions 3 to 7 lost)."""
    mux, reads = held
    task = make_task()
    await store.create(task, owner=OWNER)  # position 1
    await _publish(store, task.id, [f"c{n}" for n in range(2, 8)])  # positions 2..7
    journal = RedisKeys(prefix).journal(OWNER, task.id)

    reads.hold()
    reader_a = asyncio.create_task(mux.read(journal, 7, 30))
    await _until(lambda: reads.reads, "the shared read of A's journal is in flight")
    assert reads.reads[0][journal] == "7-1"
    await _publish(store, task.id, ["c8"])  # Redis answers the read in flight: position 8
    await reads.answered.wait()
    reader_b = asyncio.create_task(mux.read(journal, 2, 30))
    await asyncio.sleep(0)  # B has joined the journal's readers
    reads.release()

    found_a = await asyncio.wait_for(reader_a, 30)
    found_b = await asyncio.wait_for(reader_b, 30)
    assert [entry.position for entry in found_a] == [8]
    assert [entry.position for entry in found_b] == [3, 4, 5, 6, 7, 8]
    assert [entry.event.artifact.parts[0].text for entry in found_b] == [
        "c3", "c4", "c5", "c6", "c7", "c8",
    ]  # fmt: skip


async def test_readers_joining_at_every_position_while_entries_are_appended_miss_none(
    store: RedisTaskStore, held: tuple[JournalMux, HeldReads], prefix: str
) -> None:
    """Readers follow one journal from positions far apart, each joining from a position the
    shard has not read lately, while another's read is in flight and entries keep coming: each
    sees after+1, after+2, ... up to the last entry, with no gap and no entry twice."""
    mux, reads = held
    task = make_task()
    await store.create(task, owner=OWNER)
    await _publish(store, task.id, [f"c{n}" for n in range(2, 41)])  # before any shared read
    journal = RedisKeys(prefix).journal(OWNER, task.id)
    last = 100

    async def follow(after: int) -> list[int]:
        seen: list[int] = []
        while after < last:
            entries = await mux.read(journal, after, 30)
            seen += [entry.position for entry in entries]
            after = entries[-1].position if entries else after
        return seen

    followers = [(40, asyncio.create_task(follow(40)))]
    for position in range(41, last + 1):
        reads.hold()  # the reply to this publish is held: a reader joins meanwhile
        await _until(lambda: mux.waiting, "a reader waits in the shared read")
        await _publish(store, task.id, [f"c{position}"])
        if position % 3 == 0:  # join from a position before every entry the shard read
            await asyncio.wait_for(reads.answered.wait(), 30)
            joined_at = (position - 40) // 2
            followers.append((joined_at, asyncio.create_task(follow(joined_at))))
            await asyncio.sleep(0)
        reads.release()
    for after, follower in followers:
        assert await asyncio.wait_for(follower, 30) == list(range(after + 1, last + 1)), after
