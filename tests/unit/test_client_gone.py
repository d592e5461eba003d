"""An SSE stream ends quietly when its client leaves: told by the server's connection
(app.http.request_task) with no task of its own beside the request's, or, served by anything else,
by a task watching `receive()`. A cancel from elsewhere (shutdown) is not swallowed. (Through
the real server: tests/unit/test_idle_stream_footprint.py and tests/e2e/test_admission.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.a2a.sse import JournalStream
from app.http import request_task
from app.ops.metrics import Metrics
from stores.models import JournalEntry


class Client:
    """The ASGI side of one stream: its request, then nothing until it leaves; what was sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.leaves = asyncio.Event()
        self._asked = 0

    async def receive(self) -> dict[str, Any]:
        self._asked += 1
        if self._asked == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.leaves.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


class Entries:
    """Journal reads that never bring anything (an idle stream); knows whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def __aiter__(self) -> AsyncIterator[list[JournalEntry] | None]:
        return self

    async def __anext__(self) -> list[JournalEntry] | None:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self.closed = True


def stream_of(entries: Entries) -> JournalStream:
    return JournalStream(
        entries, render=lambda entry: b"{}", render_error=lambda error: b"", metrics=Metrics()
    )


async def open_stream(
    client: Client, entries: Entries, *, served_by_the_protocol: bool
) -> tuple[asyncio.Task[None], int]:
    """The stream running in a task of its own (as its request's), started as the server's
    protocol starts a request's task, or not; and how many tasks it added."""
    before = len(asyncio.all_tasks())
    response = stream_of(entries)
    coro = response({"type": "http"}, client.receive, client.send)
    loop = asyncio.get_running_loop()
    task = request_task.start(loop, coro) if served_by_the_protocol else loop.create_task(coro)
    for _ in range(3):
        await asyncio.sleep(0)  # the stream is open and waits on its journal
    assert client.sent and client.sent[0]["type"] == "http.response.start"
    return task, len(asyncio.all_tasks()) - before


async def test_told_by_its_connection_a_stream_ends_quietly_and_needs_no_task_of_its_own() -> None:
    client, entries = Client(), Entries()
    task, tasks_added = await open_stream(client, entries, served_by_the_protocol=True)
    assert tasks_added == 1  # the request's task alone: nothing waits on receive()
    request_task.client_gone(task)  # the connection was lost
    await asyncio.wait_for(task, 1)
    assert not task.cancelled() and task.exception() is None
    assert entries.closed
    assert task.get_coro().listener is None  # told once: nothing holds the stream any more


async def test_served_otherwise_a_stream_watches_receive_for_its_client_leaving() -> None:
    client, entries = Client(), Entries()
    task, tasks_added = await open_stream(client, entries, served_by_the_protocol=False)
    assert tasks_added == 2  # the request's task and the one watching receive()
    client.leaves.set()
    await asyncio.wait_for(task, 1)
    assert not task.cancelled() and task.exception() is None
    assert entries.closed
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == 1  # the watcher went with it: only this test's task


@pytest.mark.parametrize("served_by_the_protocol", [True, False])
async def test_a_cancel_from_elsewhere_is_not_taken_for_the_client_leaving(
    served_by_the_protocol: bool,
) -> None:
    client, entries = Client(), Entries()
    task, _ = await open_stream(client, entries, served_by_the_protocol=served_by_the_protocol)
    task.cancel()  # shutdown
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled() and entries.closed


async def test_a_connection_lost_after_its_request_ended_cancels_nothing() -> None:
    async def answered() -> str:
        return "done"

    task = request_task.start(asyncio.get_running_loop(), answered())
    assert await task == "done"
    request_task.client_gone(task)  # nothing listens: no error, nothing to cancel
    assert not task.cancelled() and task.result() == "done"
