"""Readiness: whether this replica can serve A2A calls now, in one place for every probe.

`/readyz` answers it (503 while not ready) and gRPC health follows it (`grpc.health.v1`: the
empty service and each A2A service NOT_SERVING while not ready, SERVING again once it is), so
that a load balancer or mesh speaking either protocol routes around the same replica for the
same reasons:

- draining (SIGTERM): not ready, for good;
- the stores do not answer a ping (Redis down, partitioned, paused): not ready until they do;
- the model adapter still loading (the first seconds): not ready until it has loaded.

A tool source that is down does not make the replica unready (every replica shares the source:
taking them all out would not help); the answer names it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.runtime.drain import Drain
from stores.base import StoreSet, StoreUnavailable


@dataclass(frozen=True, slots=True)
class ReadinessAnswer:
    ready: bool
    body: dict[str, Any] = field(default_factory=dict)
    """What /readyz says: `status` (ready, draining, unavailable, starting) and why."""


class Readiness:
    def __init__(
        self,
        *,
        drain: Drain,
        stores: StoreSet,
        model_ready: asyncio.Event,
        sources_down: Callable[[], dict[str, Any]],
    ) -> None:
        self.drain = drain
        self._stores = stores
        self._model_ready = model_ready
        self._sources_down = sources_down

    async def check(self) -> ReadinessAnswer:
        """One look: the drain, then a store ping (bounded by the store's ping timeout), then
        the model adapter."""
        if self.drain.started:
            return ReadinessAnswer(False, {"status": "draining"})
        try:
            await self._stores.ping()
        except StoreUnavailable:
            return ReadinessAnswer(False, {"status": "unavailable", "stores": "unreachable"})
        if not self._model_ready.is_set():
            return ReadinessAnswer(False, {"status": "starting", "model": "loading"})
        down = self._sources_down()  # by agent with AGENTS_FILE
        named = {"toolSourcesDown": down} if down else {}
        return ReadinessAnswer(True, {"status": "ready", **named})

    async def next_look(self, interval_s: float) -> None:
        """Until the next look is due: `interval_s` (the store is only known by asking it), or
        sooner when the drain begins or the model adapter has loaded (known at once)."""
        tasks: list[asyncio.Future[Any]] = [asyncio.ensure_future(asyncio.sleep(interval_s))]
        if not self._model_ready.is_set():
            tasks.append(asyncio.ensure_future(self._model_ready.wait()))
        try:
            await self.drain.unless_drained(
                asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            )
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
