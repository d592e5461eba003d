"""What the in-memory stores share: bounded by idle time (a TTL) and by a size limit."""

from __future__ import annotations

import time
from typing import Any, Protocol, TypeVar


class Touched(Protocol):
    touched: float


TouchedT = TypeVar("TouchedT", bound=Touched)


def room_to_make(size: int, limit: int) -> int:
    """How many entries a store at its `limit` drops at once: a hundredth of the limit (so its
    log line comes once per hundredth), or what brings it back under the limit if that is more."""
    return max(size - limit + 1, limit // 100, 1)


class IdleSweeper:
    """Drops entries idle for longer than the TTL; sweeps at most once a minute."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._next_sweep = 0.0

    def sweep(self, entries: dict[Any, TouchedT]) -> bool:
        """True if it swept (and may have dropped entries)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return False
        self._next_sweep = now + 60
        for key in [key for key, value in entries.items() if now - value.touched > self._ttl_s]:
            del entries[key]
        return True
