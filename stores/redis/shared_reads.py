"""SharedReads: identical blocking reads in flight at the same time run once.

Every subscriber of a task waits on the task's journal from the position it has reached; the
subscribers of one task are nearly always at the same position (the end). Each of them holding a
blocking XREAD of its own made 10,000 subscribers of one task 10,000 Redis connections, past
Redis' `maxclients` and the process' descriptors. Here the first reader of a (journal, position)
starts the read, later ones join it, and all get the same entries (which are immutable).

A reader that leaves (its client went away) leaves the read to the others; the last one to leave
cancels it, so an abandoned read does not hold its connection until it times out. A reader asking
for a shorter wait than the read in flight stops waiting when its own time is up, with nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Generic, TypeVar

from stores.deadlines import CoarseDeadlines

T = TypeVar("T")


class _Flight(Generic[T]):
    __slots__ = ("task", "waiters")

    def __init__(self, task: asyncio.Task[T]) -> None:
        self.task = task
        # Its readers' waits: True when the read landed, False when a reader's time was up.
        self.waiters: set[asyncio.Future[bool]] = set()


class SharedReads(Generic[T]):
    def __init__(self) -> None:
        self._flights: dict[Hashable, _Flight[T]] = {}
        self._deadlines: CoarseDeadlines[bool] = CoarseDeadlines(expired=False)

    def __len__(self) -> int:
        """Reads in flight (one per distinct key)."""
        return len(self._flights)

    def __contains__(self, key: Hashable) -> bool:
        """Whether a read for `key` is in flight (a reader of it would join it)."""
        return key in self._flights

    async def read(
        self,
        key: Hashable,
        start: Callable[[], Awaitable[T]],
        *,
        timeout_s: float,
        nothing: T,
    ) -> T:
        """The result of the read in flight for `key`, or of one started with `start()`;
        `nothing` when `timeout_s` passes first."""
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight(asyncio.ensure_future(start()))
            flight.task.add_done_callback(partial(self._landed, key, flight))
        # A future and a shared deadline per reader, no timer: thousands of readers wait here.
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        flight.waiters.add(waiter)
        slot = self._deadlines.add(waiter, timeout_s)
        try:
            landed = await waiter
        finally:
            self._deadlines.discard(waiter, slot)
            flight.waiters.discard(waiter)
            if not flight.waiters and not flight.task.done():
                # Nobody waits for it any more; a reader coming now starts a read of its own.
                self._forget(key, flight.task)
                flight.task.cancel()
        if not landed:
            return nothing
        return flight.task.result()  # the read's own error, if it failed, for every reader

    def _landed(self, key: Hashable, flight: _Flight[T], task: asyncio.Task[T]) -> None:
        self._forget(key, task)
        for waiter in flight.waiters:
            if not waiter.done():
                waiter.set_result(True)
        if not task.cancelled():
            task.exception()  # retrieved: readers that left before it failed never ask

    def _forget(self, key: Hashable, task: asyncio.Task[T]) -> None:
        flight = self._flights.get(key)
        if flight is not None and flight.task is task:
            del self._flights[key]
