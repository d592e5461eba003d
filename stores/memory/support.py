"""What the in-memory stores share: bounded by idle time (a TTL) and by a size limit."""

from __future__ import annotations

import time
from typing import Protocol, TypeVar

# What one in-memory server keeps by default (A2A_MEMORY_MAX_TASKS): enough to try the server out,
# and a process whose memory stops growing early (bench/RESULTS.md, "memory over time"): a
# replica that must keep more uses Redis.
MAX_TASKS = 2_000


class Touched(Protocol):
    touched: float


class TaskDependent(Protocol):
    """A store that keeps something per task (a lease, a checkpoint, push configs, a context
    claim): the task store tells it when it drops a task, so nothing of the task stays behind."""

    def forget_task(self, owner: str, task_id: str, context_id: str) -> None: ...


KeyT = TypeVar("KeyT")


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

    def sweep(self, entries: dict[KeyT, TouchedT]) -> list[tuple[KeyT, TouchedT]]:
        """The entries it dropped (none when it did not sweep)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return []
        self._next_sweep = now + 60
        dropped = [item for item in entries.items() if now - item[1].touched > self._ttl_s]
        for key, _ in dropped:
            del entries[key]
        return dropped
