"""Waits without polling: one process writes the file, so a write wakes its waiters in-process.

A journal read that finds nothing waits for its task's key; a committed publish wakes every
waiter of that key (`Step.after_commit`), each of which reads again. A waiter registers before
its last read (`TaskStore.read`), so a publish that commits between that read and the wait still
wakes it: nothing is missed, at worst a read is repeated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class Wakeups:
    """Futures waiting for a key to be written (True once it was)."""

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[Hashable, set[asyncio.Future[bool]]] = {}

    def waiter(self, key: Hashable) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, set()).add(future)
        return future

    def discard(self, key: Hashable, future: asyncio.Future[bool]) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self._waiting[key]

    def wake(self, key: Hashable) -> None:
        for future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(True)
