"""The deadline on each read of a request's body, one timer per slot of time for all of them.

A body that stops arriving for A2A_BODY_TIMEOUT_S is refused (app.http.guard). A timer per read
(`asyncio.timeout`: a `Timeout`, the loop's timer handle, its cancel) was ~5% of a GetTask's
samples, for a deadline that nearly never fires: the body is nearly always in before the read.
Here the reads whose deadlines fall in the same slot of RESOLUTION_S share one timer, and a read
costs an entry in its slot's set; at the slot's end, each read still waiting is cancelled, and
told so (as stores.deadlines does for journal reads). A deadline fires up to RESOLUTION_S late.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

RESOLUTION_S = 0.1


class BodyRead(Protocol):
    def expire(self) -> None:
        """The read's deadline passed: stop it (if it is still waiting)."""


class BodyDeadlines:
    def __init__(self, resolution_s: float = RESOLUTION_S) -> None:
        self._resolution_s = resolution_s
        self._slots: dict[int, set[BodyRead]] = {}

    def add(self, read: BodyRead, timeout_s: float) -> int:
        """Expire `read` after `timeout_s`; returns the slot to `discard` it from."""
        loop = asyncio.get_running_loop()
        slot = math.ceil((loop.time() + timeout_s) / self._resolution_s)
        reads = self._slots.get(slot)
        if reads is None:
            reads = self._slots[slot] = set()
            loop.call_at(slot * self._resolution_s, self._expire, slot)
        reads.add(read)
        return slot

    def discard(self, read: BodyRead, slot: int) -> None:
        reads = self._slots.get(slot)
        if reads is not None:
            reads.discard(read)

    def _expire(self, slot: int) -> None:
        for read in self._slots.pop(slot, ()):
            read.expire()
