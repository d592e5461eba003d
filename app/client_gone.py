"""Who hears that a request's client went away, without a task of its own waiting for it.

ASGI tells an app that its client left through `receive()` only: a stream whose request task
waits on the journal needed a second task waiting on `receive()` to notice. At 10,000 idle
streams that task (its coroutine, its wait on the connection's event and asyncio's weak
reference to it) was ~1.1 KiB of the ~15 KiB of RSS a stream cost. The server's own HTTP
protocol (app.connections) knows when a connection is lost: it registers each request task it
starts (`serving`), and a stream asks to be told (`tell_when_gone`). A request served otherwise
(another ASGI server, an in-process client) is not registered: its stream watches `receive()`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class Listener(Protocol):
    def client_left(self) -> bool:
        """The client went away: True if the request's task is to be cancelled."""
        ...


# Each request task the protocol serves, with what listens for its client leaving.
_listeners: dict[asyncio.Task[Any], Listener | None] = {}


def serving(task: asyncio.Task[Any]) -> None:
    """`task` serves a request on a connection that will say when it is lost (`gone`)."""
    _listeners[task] = None


def done(task: asyncio.Task[Any]) -> None:
    _listeners.pop(task, None)


def gone(task: asyncio.Task[Any]) -> None:
    """The connection of `task`'s request was lost before its response ended."""
    listener = _listeners.get(task)
    if listener is not None:
        _listeners[task] = None
        if listener.client_left():
            task.cancel()


def tell_when_gone(task: asyncio.Task[Any], listener: Listener) -> bool:
    """Have `listener` told when `task`'s client leaves. False if nothing will tell (the
    request is not served by the server's protocol): watch `receive()` instead."""
    if task not in _listeners:
        return False
    _listeners[task] = listener
    return True
