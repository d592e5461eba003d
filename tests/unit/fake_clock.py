"""A clock the tests move by hand, patched over a module's `time.monotonic` or `perf_counter`."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
