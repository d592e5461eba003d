"""Drain.unless_drained: a wait cut short by the drain, in the caller's own task."""

from __future__ import annotations

import asyncio

import pytest

from agent.runtime.drain import DRAINED, Drain
from tests.fakes.parked_read import ParkedRead


async def test_the_drain_ends_a_wait_and_cancels_its_work() -> None:
    drain = Drain()
    read = ParkedRead()

    waiting = asyncio.create_task(drain.unless_drained(read()))
    await asyncio.sleep(0.01)
    tasks_before = len(asyncio.all_tasks())
    drain.start()
    assert await asyncio.wait_for(waiting, 1) is DRAINED
    assert read.cancelled.is_set()
    assert len(asyncio.all_tasks()) == tasks_before - 1  # no task of its own was left behind
    # Once draining, a new wait does not even start its work.
    assert await drain.unless_drained(read()) is DRAINED


async def test_a_result_comes_back_and_another_cancel_still_cancels() -> None:
    drain = Drain()

    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    assert await drain.unless_drained(value()) == 7
    waiting = asyncio.create_task(drain.unless_drained(asyncio.sleep(60)))
    await asyncio.sleep(0.01)
    waiting.cancel()  # the client went away: not the drain's to swallow
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # Cancelled by both the client and the drain: still a cancellation for the caller.
    both = asyncio.create_task(drain.unless_drained(asyncio.sleep(60)))
    await asyncio.sleep(0.01)
    both.cancel()
    drain.start()
    with pytest.raises(asyncio.CancelledError):
        await both
