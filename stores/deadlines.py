"""Deadlines for many waits at once, one timer per slot of time instead of one per wait.

Every idle stream waits for its task's next journal entry with a deadline, after which the
handler reads again and keeps the connection alive (in memory, the store's read; on one Redis,
the shared reads of JournalMux). A timer per wait (`asyncio.timeout`: a `Timeout` and the
loop's timer handle) was ~0.7 KiB of each idle stream; here the waits whose deadlines fall in
the same slot of RESOLUTION_S share one timer, and a wait costs an entry in its slot's set. A
deadline fires up to RESOLUTION_S late.
"""

from __future__ import annotations

import asyncio
import math
from typing import Generic, TypeVar

T = TypeVar("T")

RESOLUTION_S = 0.1


class CoarseDeadlines(Generic[T]):
    """Resolves a waiter future with `expired` at its deadline unless it is done by then."""

    def __init__(self, expired: T, resolution_s: float = RESOLUTION_S) -> None:
        self._expired = expired
        self._resolution_s = resolution_s
        self._slots: dict[int, set[asyncio.Future[T]]] = {}

    def add(self, waiter: asyncio.Future[T], timeout_s: float) -> int:
        """Time `waiter` out after `timeout_s`; returns the slot to `discard` it from."""
        loop = waiter.get_loop()
        slot = math.ceil((loop.time() + timeout_s) / self._resolution_s)
        waiters = self._slots.get(slot)
        if waiters is None:
            waiters = self._slots[slot] = set()
            loop.call_at(slot * self._resolution_s, self._expire, slot)
        waiters.add(waiter)
        return slot

    def discard(self, waiter: asyncio.Future[T], slot: int) -> None:
        """`waiter` is done (or gone): its slot no longer holds it."""
        waiters = self._slots.get(slot)
        if waiters is not None:
            waiters.discard(waiter)

    def _expire(self, slot: int) -> None:
        for waiter in self._slots.pop(slot, ()):
            if not waiter.done():
                waiter.set_result(self._expired)
