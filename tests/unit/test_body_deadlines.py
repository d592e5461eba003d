"""The guard's deadline on a body read (app.http.body_deadlines: one timer per slot of time):
a read that waits past it is refused with 408, and a cancel from elsewhere (a client gone, a
shutdown) stays a cancel, not a 408. (A slow but steady body, each read within its own
deadline, is served: tests/unit/test_http_guard.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.types import Message

from app.http.guard import HttpGuard


def guard_reading_the_body(timeout_s: float, read: list[bytes]) -> HttpGuard:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            read.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return HttpGuard(app, max_body_bytes=1 << 20, allowed_hosts=["*"], body_timeout_s=timeout_s)


SCOPE = {"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"127.0.0.1")]}


async def test_a_read_waiting_past_its_deadline_is_answered_408() -> None:
    sent: list[Message] = []
    read: list[bytes] = []
    guard = guard_reading_the_body(0.05, read)
    parts = [{"type": "http.request", "body": b"a", "more_body": True}]

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop()
        await asyncio.Event().wait()  # the rest of the body never comes
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    await guard(SCOPE, receive, send)
    assert read == [b"a"]
    assert sent[0]["status"] == 408, sent


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    sent: list[Message] = []
    guard = guard_reading_the_body(30, [])
    reading = asyncio.Event()

    async def receive() -> dict[str, Any]:
        reading.set()
        await asyncio.Event().wait()
        raise AssertionError

    async def send(message: Message) -> None:
        sent.append(message)

    served = asyncio.create_task(guard(SCOPE, receive, send))
    await reading.wait()
    served.cancel()
    with pytest.raises(asyncio.CancelledError):
        await served
    assert sent == []
