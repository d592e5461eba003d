"""The deadline on each read of a request's body, one timer per slot of time for all of them.

A body that stops arriving for A2A_BODY_TIMEOUT_S is refused (app.http.guard). A timer per read
(`asyncio.timeout`: a `Timeout`, the loop's timer handle, its cancel) was ~5% of a GetTask's
samples, for a deadline that nearly never fires: the body is nearly always in before the read.
Here the reads whose deadlines fall in the same slot of RESOLUTION_S share one timer, and a read
costs an entry in its slot's set; at the slot's end, each read still waiting is cancelled, and
told so (the wheel of stores.deadlines, which journal reads use too). A deadline fires up to
RESOLUTION_S late.
"""

from __future__ import annotations

from typing import Protocol

from stores.deadlines import RESOLUTION_S, SlottedDeadlines

__all__ = ["RESOLUTION_S", "BodyDeadlines", "BodyRead"]


class BodyRead(Protocol):
    def expire(self) -> None:
        """The read's deadline passed: stop it (if it is still waiting)."""


class BodyDeadlines(SlottedDeadlines[BodyRead]):
    def _fire(self, wait: BodyRead) -> None:
        wait.expire()
