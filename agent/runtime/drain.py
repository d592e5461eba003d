"""Draining: the process was told to stop; it answers what it can now and takes nothing new.

    SIGTERM / SIGINT --cli.DrainingServer.handle_exit (loop.call_soon_threadsafe)--> Drain.start
        /readyz                    -> 503
        new sends, subscriptions   -> refused: Overloaded, "shutting down" (retry elsewhere)
        blocking SendMessage waits -> answer at once with the task as it stands
        open streams               -> end after the event they are at (a clean end of stream:
                                      the client resubscribes elsewhere with Last-Event-ID)

Then uvicorn shuts down as usual: connections close, and the lifespan hands every running turn
over to another replica (TaskRunner.shutdown).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from agent.runtime.admission import Overloaded

logger = logging.getLogger(__name__)

T = TypeVar("T")

SHUTTING_DOWN = "This server is shutting down; retry, another server will take the request"


class Drained(enum.Enum):
    """What a wait cut short by the drain returns."""

    DRAINED = "drained"


DRAINED: Literal[Drained.DRAINED] = Drained.DRAINED


class Drain:
    """The process-wide "stop taking work" signal. Lives on the event loop: `start` must run on
    the loop's thread (a signal handler schedules it with `loop.call_soon_threadsafe`)."""

    def __init__(self) -> None:
        self._started = False
        # The tasks waiting in `unless_drained`, and those the drain has cancelled.
        self._waiting: set[asyncio.Task[Any]] = set()
        self._cut: set[asyncio.Task[Any]] = set()

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Begin draining: every wait in `unless_drained` returns at once. Idempotent."""
        if self._started:
            return
        self._started = True
        logger.info("draining: refusing new work; open streams and waits end now")
        for waiter in self._waiting:
            self._cut.add(waiter)
            waiter.cancel()

    def refuse_new_work(self) -> None:
        """Raise Overloaded once draining has begun."""
        if self._started:
            raise Overloaded(SHUTTING_DOWN, retry_after_s=1)

    async def unless_drained(self, work: Coroutine[Any, Any, T]) -> T | Literal[Drained.DRAINED]:
        """Run `work` until it finishes or the drain begins, whichever is first (then `work` is
        cancelled and DRAINED returned).

        `work` runs in the caller's own task, which the drain cancels: no task of its own per
        wait, since every idle stream waits here (a task per wait was memory on every stream).
        """
        if self._started:
            work.close()
            return DRAINED
        waiter = asyncio.current_task()
        assert waiter is not None
        self._waiting.add(waiter)
        try:
            return await work
        except asyncio.CancelledError:
            if waiter in self._cut and waiter.uncancel() == 0:  # the drain's cancel, and only it
                return DRAINED
            raise
        finally:
            self._waiting.discard(waiter)
            self._cut.discard(waiter)
