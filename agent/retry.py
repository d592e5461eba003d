"""Retrying store writes of a running turn while the store is unreachable."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stores.base import StoreUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def persistently(
    operation: Callable[[], Awaitable[T]],
    *,
    what: str,
    first_delay_s: float = 0.1,
    max_delay_s: float = 5.0,
    on_unavailable: Callable[[str], None] | None = None,
) -> T:
    """Run `operation` until the store takes it, backing off while it is unavailable.

    A turn's writes must not be lost to a store outage, and a turn must not fail because of one:
    it waits for the store to come back. Cancelling the turn interrupts the wait. Only
    StoreUnavailable is retried: a refusal (LeaseLost, a fence that no longer holds) is final, so
    no retry lands a write its lease no longer covers.
    `on_unavailable(what)` is told of every failed attempt (for metrics).
    """
    delay = first_delay_s
    while True:
        try:
            return await operation()
        except StoreUnavailable as exc:
            if on_unavailable is not None:
                on_unavailable(what)
            logger.warning("store unavailable during %s (%s); retrying in %.1fs", what, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay_s)
