"""SharedReads: one read per key in flight, its result (or its error) for every reader."""

from __future__ import annotations

import asyncio

import pytest

from stores.base import StoreUnavailable
from stores.redis.shared_reads import SharedReads
from tests.fakes.parked_read import ParkedRead


async def test_readers_of_one_key_share_one_read_and_its_error() -> None:
    shared: SharedReads[list[int]] = SharedReads()
    started = 0
    release = asyncio.Event()

    async def read() -> list[int]:
        nonlocal started
        started += 1
        await release.wait()
        raise StoreUnavailable("Redis did not answer")

    readers = [
        asyncio.create_task(shared.read("k", read, timeout_s=5, nothing=[])) for _ in range(50)
    ]
    other = asyncio.create_task(shared.read("other", read, timeout_s=5, nothing=[]))
    await asyncio.sleep(0.01)
    assert (started, len(shared)) == (2, 2)
    release.set()
    outcomes = await asyncio.gather(*readers, other, return_exceptions=True)
    assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes)
    assert len(shared) == 0  # the next reader starts a fresh read


async def test_the_last_reader_to_leave_cancels_the_read() -> None:
    shared: SharedReads[list[int]] = SharedReads()
    read = ParkedRead()
    cancelled = read.cancelled
    first = asyncio.create_task(shared.read("k", read, timeout_s=60, nothing=[]))
    second = asyncio.create_task(shared.read("k", read, timeout_s=60, nothing=[]))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    assert not cancelled.is_set(), "a reader is still waiting for it"
    # A reader with a shorter wait gets nothing when its time is up; the read goes on.
    assert await shared.read("k", read, timeout_s=0.05, nothing=[]) == []
    assert not cancelled.is_set()
    second.cancel()
    await asyncio.wait_for(cancelled.wait(), 1)
    assert len(shared) == 0
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_a_reader_joining_gets_what_the_read_finds() -> None:
    shared: SharedReads[list[int]] = SharedReads()
    found = asyncio.Event()

    async def read() -> list[int]:
        await found.wait()
        return [7, 8]

    readers = [
        asyncio.create_task(shared.read("k", read, timeout_s=5, nothing=[])) for _ in range(3)
    ]
    await asyncio.sleep(0.01)
    found.set()
    assert await asyncio.gather(*readers) == [[7, 8]] * 3
