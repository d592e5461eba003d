"""CoarseDeadlines: waits time out at their deadline (late by at most the resolution, never
early), a wait that ended first is left alone and forgotten, and many waits share one timer."""

from __future__ import annotations

import asyncio

import pytest

from stores.deadlines import CoarseDeadlines
from tests.loop_timers import live_timers

RESOLUTION_S = 0.05


async def test_a_wait_times_out_at_its_deadline_not_before() -> None:
    deadlines = CoarseDeadlines(expired=False, resolution_s=RESOLUTION_S)
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bool] = loop.create_future()
    began = loop.time()
    deadlines.add(waiter, 0.2)
    assert await waiter is False
    waited = loop.time() - began
    assert 0.2 - loop._clock_resolution <= waited < 0.2 + RESOLUTION_S + 0.1, waited  # type: ignore[attr-defined]


async def test_a_wait_that_ended_first_keeps_its_result_and_is_forgotten() -> None:
    deadlines = CoarseDeadlines(expired=False, resolution_s=RESOLUTION_S)
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bool] = loop.create_future()
    slot = deadlines.add(waiter, 0.1)
    waiter.set_result(True)
    deadlines.discard(waiter, slot)
    await asyncio.sleep(0.2)  # past the deadline: nothing happens to it
    assert waiter.result() is True
    assert deadlines._slots == {}  # nothing kept of past waits


async def test_a_cancelled_wait_is_not_touched_at_its_deadline() -> None:
    deadlines = CoarseDeadlines(expired=False, resolution_s=RESOLUTION_S)
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        waiter: asyncio.Future[bool] = loop.create_future()
        deadlines.add(waiter, 0.05)
        waiter.cancel()
        await asyncio.sleep(0.15)  # past the deadline: resolving it would raise in the timer
    finally:
        loop.set_exception_handler(None)
    assert waiter.cancelled()
    assert errors == []


async def test_an_expired_wait_gets_the_expired_value() -> None:
    deadlines: CoarseDeadlines[list[int]] = CoarseDeadlines(expired=[], resolution_s=RESOLUTION_S)
    waiter: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
    deadlines.add(waiter, 0.05)
    assert await waiter == []


@pytest.mark.parametrize("waits", [1_000])
async def test_many_waits_share_a_few_timers(waits: int) -> None:
    deadlines = CoarseDeadlines(expired=False, resolution_s=RESOLUTION_S)
    loop = asyncio.get_running_loop()
    before = live_timers(loop)
    waiters: list[asyncio.Future[bool]] = [loop.create_future() for _ in range(waits)]
    for waiter in waiters:
        deadlines.add(waiter, 0.2)
    assert live_timers(loop) - before <= 2  # the slot(s) the deadlines fell in, not 1,000
    assert await asyncio.gather(*waiters) == [False] * waits


async def test_a_slot_left_empty_holds_no_timer() -> None:
    deadlines = CoarseDeadlines(expired=False, resolution_s=RESOLUTION_S)
    loop = asyncio.get_running_loop()
    before = live_timers(loop)
    waiters: list[asyncio.Future[bool]] = [loop.create_future() for _ in range(3)]
    slots = [deadlines.add(waiter, 30) for waiter in waiters]
    assert live_timers(loop) - before == 1  # the three share one slot
    for waiter, slot in zip(waiters[:2], slots[:2], strict=True):
        deadlines.discard(waiter, slot)
    assert live_timers(loop) - before == 1  # one wait is still in it
    deadlines.discard(waiters[2], slots[2])
    assert live_timers(loop) == before  # not 30 s of a timer for nothing
