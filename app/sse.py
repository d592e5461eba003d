"""Server-sent events: one journal entry per event, `id:` = its journal position.

A stream always ends at an event boundary with a complete HTTP response: when its entries end
(the task settled, or this server is draining and the handler ended them), when a store error
becomes a last error event, or when the client goes away. The entries are closed on every one
of those paths, so whatever they hold (a stream slot) is given back.

The response is written here rather than with sse-starlette: an idle stream is what a server
holding thousands of subscribers is made of, and sse-starlette's task group (four tasks and their
cancel scopes per stream) was a third of an idle stream's memory. Here a stream is its request's
task plus one watcher task, which notices the client leaving (and cancels the stream at once,
whatever it is waiting for) and keeps the connection alive with a comment every PING_S.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.errors import A2AError, as_a2a_error
from app.metrics import Metrics
from stores.models import JournalEntry

PING_S = 15
_PING = b": ping\r\n\r\n"
_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # proxies (nginx) must not buffer the stream
]


def dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def frame(data: bytes, *, event_id: str | None = None, event: str | None = None) -> bytes:
    """One SSE event. `data` is one line of JSON (JSON text never holds a raw line break)."""
    head = b""
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\r\n"
    if event is not None:
        head += b"event: " + event.encode() + b"\r\n"
    return head + b"data: " + data + b"\r\n\r\n"


class JournalStream(Response):
    """An SSE response over already framed events; closes the journal entries however the
    response ends (finished, failed, or the client gone)."""

    def __init__(self, events: AsyncIterator[bytes], entries: Any) -> None:
        self._events = events
        self._entries = entries
        self._finished = False
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.current_task()
        assert stream is not None
        watcher = asyncio.ensure_future(self._watch(receive, send, stream))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self._events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not watcher.done() or watcher.cancelled() or not watcher.result():
                raise  # cancelled from elsewhere (shutdown): not ours to swallow
            stream.uncancel()  # the client left: the stream is simply over
        except OSError:  # the connection broke under a write
            pass
        finally:
            self._finished = True
            watcher.cancel()
            aclose = getattr(self._entries, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _watch(self, receive: Receive, send: Send, stream: asyncio.Task[Any]) -> bool:
        """Until the client leaves (then cancel the stream and return True), ping when quiet."""
        while True:
            try:
                async with asyncio.timeout(PING_S):
                    message = await receive()
            except TimeoutError:
                if self._finished:
                    return False
                try:
                    await send({"type": "http.response.body", "body": _PING, "more_body": True})
                except (OSError, RuntimeError):  # gone, or the response ended meanwhile
                    return False
                continue
            if message["type"] == "http.disconnect":
                if not self._finished:
                    stream.cancel()
                    return True
                return False


def event_stream(
    entries: AsyncIterator[JournalEntry],
    *,
    render: Callable[[JournalEntry], bytes],
    render_error: Callable[[A2AError], bytes],
    metrics: Metrics,
) -> JournalStream:
    """An SSE response over journal entries; a failure mid-stream becomes a last error event."""

    async def events() -> AsyncIterator[bytes]:
        opened_at = time.time()
        with metrics.stream_open():
            try:
                async for entry in entries:
                    yield frame(render(entry), event_id=str(entry.position))
                    metrics.stream_sent(entry, opened_at=opened_at)
                    del entry  # an idle stream holds nothing it has sent
            except Exception as exc:
                yield render_error(as_a2a_error(exc, where="SSE stream"))

    return JournalStream(events(), entries)
