"""A request's task as the server's HTTP protocol starts it: its first step taken as soon as its
bytes are read (not at the event loop's next pass), and its stream told when the client leaves.

uvicorn starts each request as a task, whose first step the loop runs after everything already
queued: under load a whole pass of other requests' work came between a request's arrival and its
first line of code, and a stream's first event waited for it. Python 3.12's eager tasks take the
first step at once; on 3.11 this module does the same for the request tasks the HTTP protocol
starts (app.http.connections): the task is created as usual, then its coroutine's first step runs
right away, as that task (`asyncio.current_task()` is it) and in its context, up to its first
real wait. The task's own first step then hands the task whatever that step waits for (or its
outcome), and from there on the task drives the coroutine as any other.

The same wrapper says whether a stream will be told that its client left. ASGI tells an app so
through `receive()` only, which cost a stream a second task waiting on it. The protocol knows
when its connection is lost: a stream in a task it started hangs itself on the task's coroutine
(`tell_when_gone`) and the protocol tells it (`client_gone`). A request served otherwise (another
ASGI server, an in-process client) runs a plain coroutine: its stream watches `receive()`.

Private names, fenced here: written against CPython 3.11's asyncio (3.11.7), whose
`asyncio.tasks._enter_task` / `_leave_task` say which task is running (eager tasks use them
too). They are looked up once, at import (`first_step_available`): without them no first step
is taken early and each request's task starts as any task does. Once the floor is Python 3.12,
eager tasks replace the first-step half of this module. (Figures: bench/RESULTS.md, "Figures
moved out of docstrings (issue 41)".)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol

_TaskHook = Callable[[asyncio.AbstractEventLoop, "asyncio.Task[Any]"], None]


def running_task_hooks() -> tuple[_TaskHook, _TaskHook] | None:
    """asyncio's private `_enter_task` and `_leave_task`, or None if this Python has not both."""
    enter = getattr(asyncio.tasks, "_enter_task", None)
    leave = getattr(asyncio.tasks, "_leave_task", None)
    return (enter, leave) if callable(enter) and callable(leave) else None


_TASK_HOOKS = running_task_hooks()


def first_step_available() -> bool:
    """Whether a request's first step can be taken inside the read that brought it."""
    return _TASK_HOOKS is not None


_NOT_STARTED, _WAITING, _ENDED, _RUNNING = range(4)


class Listener(Protocol):
    def client_left(self) -> bool:
        """The client went away: True if the request's task is to be cancelled."""
        ...


class RequestCoroutine(Coroutine[Any, Any, Any]):
    """The coroutine a request's task runs, as the server's protocol starts it: its first step
    may be taken before the task's own (`take_first_step`), and a listener may hang on it for
    the client leaving. Introspection (`cr_frame`, `__qualname__`) reaches the coroutine."""

    __slots__ = ("_context", "_coro", "_first", "_state", "listener")

    def __init__(self, coro: Coroutine[Any, Any, Any], context: contextvars.Context) -> None:
        self._coro = coro
        self._context: contextvars.Context | None = context  # until the first step is taken
        self._state = _NOT_STARTED
        self._first: Any = None  # what the first step awaits, or the exception that ended it
        self.listener: Listener | None = None

    def take_first_step(self) -> None:
        """Run the coroutine to its first wait (or its end), in its task's context. Call it as
        its task, before the task's own first step."""
        context, self._context = self._context, None
        assert context is not None and self._state == _NOT_STARTED
        try:
            self._first = context.run(self._coro.send, None)
            self._state = _WAITING
        except BaseException as exc:  # its end (StopIteration) or its failure: the task's
            self._first, self._state = exc, _ENDED

    def send(self, value: Any) -> Any:
        state = self._state
        if state == _RUNNING or state == _NOT_STARTED:
            self._state, self._context = _RUNNING, None
            return self._coro.send(value)
        # The task's own first step: hand it what the first step left.
        first, self._first, self._state = self._first, None, _RUNNING
        if state == _ENDED:
            raise first
        return first  # the future the coroutine waits for (or None: it yielded a pass)

    def throw(self, exc: Any, *args: Any) -> Any:
        state, first = self._state, self._first
        self._first, self._state, self._context = None, _RUNNING, None
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


def start(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    context: contextvars.Context | None = None,
) -> asyncio.Task[Any]:
    """A task of `coro` (in `context`, else a copy of the current one), whose first step
    `take_first_step` may take at once."""
    context = context if context is not None else contextvars.copy_context()
    return loop.create_task(RequestCoroutine(coro, context), context=context)


def take_first_step(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
    """Take `task`'s first step now, if it has not been taken and no task is running (this is
    for the loop's own callbacks: a protocol reading its socket). False if it was not taken
    (also when asyncio's hooks are missing: the task then takes it at the loop's next pass)."""
    hooks = _TASK_HOOKS
    coro = task.get_coro()
    if (
        hooks is None
        or not isinstance(coro, RequestCoroutine)
        or coro._state != _NOT_STARTED
        or task.done()
        or task.cancelling()
    ):
        return False
    enter, leave = hooks
    try:
        enter(loop, task)
    except RuntimeError:  # called from inside a task: its own first step will do
        return False
    try:
        coro.take_first_step()
    finally:
        leave(loop, task)
    return True


def tell_when_gone(task: asyncio.Task[Any], listener: Listener) -> bool:
    """Have `listener` told when `task`'s client leaves. False if nothing will tell (the task
    was not started by the server's protocol): watch `receive()` instead."""
    coro = task.get_coro()
    if not isinstance(coro, RequestCoroutine):
        return False
    coro.listener = listener
    return True


def client_gone(task: asyncio.Task[Any]) -> None:
    """The connection of `task`'s request was lost before its response ended."""
    coro = task.get_coro()
    if isinstance(coro, RequestCoroutine) and coro.listener is not None:
        listener, coro.listener = coro.listener, None
        if listener.client_left():
            task.cancel()
