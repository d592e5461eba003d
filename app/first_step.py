"""A request's first step taken as soon as its bytes are read, not at the event loop's next pass.

uvicorn starts each request as a task, whose first step the loop runs after everything already
queued: under load, a whole pass of other requests' work (turns, stream writes) came between a
request's arrival and its first line of code, and a stream's first event, written in that first
step, waited for it (at 32 streams, ~1.8 passes of ~3 ms). Python 3.12's eager tasks take the
first step at once; on 3.11 this module does the same for the request tasks the HTTP protocol
starts (app.connections): the task is created as usual, then its coroutine's first step runs
right away, as that task (`asyncio.current_task()` is it) and in its context, up to its first
real wait. The task's own first step then hands the task whatever that step waits for (or its
outcome), and from there on the task drives the coroutine as any other.
"""

from __future__ import annotations

import asyncio
import contextvars

# asyncio's own bookkeeping of the running task, which Python 3.12's eager tasks use too.
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Coroutine, Generator
from typing import Any

_NOT_STARTED, _WAITING, _ENDED, _RUNNING = range(4)


class FirstStepTaken(Coroutine[Any, Any, Any]):
    """The coroutine a task runs, whose first step may be taken before the task's own
    (`take_first_step`). Introspection (`cr_frame`, `__qualname__`) reaches the coroutine."""

    __slots__ = ("_coro", "_first", "_state")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._state = _NOT_STARTED
        self._first: Any = None  # what the first step awaits, or the exception that ended it

    @property
    def started(self) -> bool:
        return self._state != _NOT_STARTED

    def take_first_step(self) -> None:
        """Run the coroutine to its first wait (or its end). Call it as its task, in its
        context, before the task's own first step."""
        if self._state != _NOT_STARTED:
            return
        try:
            self._first = self._coro.send(None)
            self._state = _WAITING
        except BaseException as exc:  # its end (StopIteration) or its failure: the task's
            self._first, self._state = exc, _ENDED

    def send(self, value: Any) -> Any:
        state = self._state
        if state == _RUNNING or state == _NOT_STARTED:
            self._state = _RUNNING
            return self._coro.send(value)
        # The task's own first step: hand it what the first step left.
        first, self._first, self._state = self._first, None, _RUNNING
        if state == _ENDED:
            raise first
        return first  # the future the coroutine waits for (or None: it yielded a pass)

    def throw(self, exc: Any, *args: Any) -> Any:
        state, first = self._state, self._first
        self._first, self._state = None, _RUNNING
        if state == _ENDED:
            raise exc if isinstance(exc, BaseException) else exc(*args)
        if (
            state == _WAITING
            and isinstance(first, asyncio.Future)
            and isinstance(exc, asyncio.CancelledError)
        ):
            # The task was cancelled before it knew what its coroutine waits for: that wait is
            # cancelled too, as Task.cancel does to the future a task waits for.
            first.cancel()
        return self._coro.throw(exc, *args)

    def close(self) -> None:
        self._first = None
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("driven by its task only")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coro, name)


def start_task(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    context: contextvars.Context | None = None,
) -> tuple[asyncio.Task[Any], FirstStepTaken, contextvars.Context]:
    """A task of `coro` whose first step `take_first_step` may take at once."""
    context = context if context is not None else contextvars.copy_context()
    wrapped = FirstStepTaken(coro)
    return loop.create_task(wrapped, context=context), wrapped, context


def take_first_step(
    loop: asyncio.AbstractEventLoop,
    task: asyncio.Task[Any],
    coro: FirstStepTaken,
    context: contextvars.Context,
) -> bool:
    """Take `task`'s first step now, if it has not been taken and no task is running (this is
    for the loop's own callbacks: a protocol reading its socket). False if it was not taken."""
    if coro.started or task.done() or task.cancelling():
        return False
    try:
        _enter_task(loop, task)
    except RuntimeError:  # called from inside a task: its own first step will do
        return False
    try:
        context.run(coro.take_first_step)
    finally:
        _leave_task(loop, task)
    return True
