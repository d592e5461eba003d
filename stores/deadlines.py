"""Deadlines for many waits at once, one timer per slot of time instead of one per wait.

Every idle stream waits for its task's next journal entry with a deadline, after which the
handler reads again and keeps the connection alive (in memory, the store's read; on one Redis,
the shared reads of JournalMux). A timer per wait (`asyncio.timeout`: a `Timeout` and the
loop's timer handle) was ~0.7 KiB of each idle stream; here the waits whose deadlines fall in
the same slot of RESOLUTION_S share one timer, and a wait costs an entry in its slot's set. A
deadline fires up to RESOLUTION_S late. The reads of request bodies share the same wheel
(app.http.body_deadlines).
"""

from __future__ import annotations

import asyncio
import math
from typing import Generic, TypeVar

T = TypeVar("T")
W = TypeVar("W")

RESOLUTION_S = 0.1


class SlottedDeadlines(Generic[W]):
    """Fires `_fire(wait)` at a wait's deadline (rounded up to its slot) unless it was
    discarded by then."""

    def __init__(self, resolution_s: float = RESOLUTION_S) -> None:
        self._resolution_s = resolution_s
        self._slots: dict[int, set[W]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}

    def add(self, wait: W, timeout_s: float) -> int:
        """Fire `wait` after `timeout_s`; returns the slot to `discard` it from."""
        loop = asyncio.get_running_loop()
        slot = math.ceil((loop.time() + timeout_s) / self._resolution_s)
        waits = self._slots.get(slot)
        if waits is None:
            waits = self._slots[slot] = set()
            self._timers[slot] = loop.call_at(slot * self._resolution_s, self._expire, slot)
        waits.add(wait)
        return slot

    def discard(self, wait: W, slot: int) -> None:
        """`wait` is done (or gone): its slot no longer holds it, and a slot left empty no
        longer holds a timer (a slot's timer would otherwise outlive its waits by up to their
        timeout: a body read's is tens of seconds)."""
        waits = self._slots.get(slot)
        if waits is not None:
            waits.discard(wait)
            if not waits:
                del self._slots[slot]
                self._timers.pop(slot).cancel()

    def _expire(self, slot: int) -> None:
        self._timers.pop(slot, None)
        for wait in self._slots.pop(slot, ()):
            self._fire(wait)

    def _fire(self, wait: W) -> None:
        raise NotImplementedError


class CoarseDeadlines(SlottedDeadlines["asyncio.Future[T]"], Generic[T]):
    """Resolves a waiter future with `expired` at its deadline unless it is done by then."""

    def __init__(self, expired: T, resolution_s: float = RESOLUTION_S) -> None:
        super().__init__(resolution_s)
        self._expired = expired

    def _fire(self, wait: asyncio.Future[T]) -> None:
        if not wait.done():
            wait.set_result(self._expired)
