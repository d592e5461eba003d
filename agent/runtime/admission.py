"""Admission control: a replica takes on only as much work as it was sized for.

A request beyond a limit is refused before anything is written (no task, no claim, no lease), so
overload is refused cleanly instead of half-accepted; the client is told to retry shortly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

MAX_RUNNING_TURNS = 256
"""Turns one replica runs at once unless configured (A2A_MAX_RUNNING_TURNS)."""


class Overloaded(Exception):
    """This replica is at one of its limits; the request may be retried after `retry_after_s`."""

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Slots:
    """A counted limit (running turns, open streams), overall and, with `per_key`, for each key
    (a principal): one principal cannot take every slot of the replica. Taking a slot never
    awaits, so a check and the take are one step on the event loop: a burst of requests cannot
    all pass one check."""

    def __init__(self, limit: int, *, what: str, per_key: int | None = None) -> None:
        self.limit = limit
        self.what = what
        self.per_key = per_key
        self.in_use = 0
        self._by_key: dict[str, int] = {}

    def take(self, key: str = "") -> None:
        """Take a slot, or raise Overloaded when all are in use (or all of the key's)."""
        if self.in_use >= self.limit:
            raise Overloaded(
                f"This server is at its limit of {self.limit} {self.what}; retry shortly"
            )
        held = self._by_key.get(key, 0)
        if self.per_key is not None and held >= self.per_key:
            raise Overloaded(
                f"You are at your limit of {self.per_key} {self.what} on this server;"
                " retry once one has ended"
            )
        self.in_use += 1
        self._by_key[key] = held + 1

    def give_back(self, key: str = "") -> None:
        self.in_use = max(0, self.in_use - 1)
        held = self._by_key.get(key, 0) - 1
        if held > 0:
            self._by_key[key] = held
        else:
            self._by_key.pop(key, None)

    def held_by(self, key: str) -> int:
        return self._by_key.get(key, 0)

    @contextmanager
    def held(self, key: str = "") -> Iterator[None]:
        self.take(key)
        try:
            yield
        finally:
            self.give_back(key)
