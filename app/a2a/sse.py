"""Server-sent events: one journal entry per event, `id:` = its journal position; the events of
one store read go out in one write.

A stream always ends at an event boundary with a complete HTTP response: when its entries end
(the task settled, or this server is draining and the handler ended them), when a store error
becomes a last error event, or when the client goes away. The entries are closed on every one
of those paths, so whatever they hold (a stream slot) is given back.

The response is written here rather than with sse-starlette: an idle stream is what a server holding
thousands of subscribers is made of, and sse-starlette's task group (four tasks and their cancel
scopes per stream) was a third of an idle stream's memory. Here a stream is its request's task
alone: the server's HTTP protocol tells it when the client leaves (app.http.request_task), and it is
cancelled at once, whatever it is waiting for. Served otherwise (another ASGI server, an in-process
client), a stream has a second task, which watches `receive()` for the same. The connection is kept
alive with a comment after each read of the journal that waited its whole time
(A2A_STREAM_KEEPALIVE_S) for nothing: no timer per stream for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agent.runtime.journal import LastEntries
from app.errors import A2AError, as_a2a_error
from app.http.request_task import tell_when_gone
from app.ops.metrics import Metrics
from stores.models import JournalEntry

_PING = b": ping\r\n\r\n"
_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),  # proxies (nginx) must not buffer the stream
]


def frame(data: bytes, *, event_id: str | None = None, event: str | None = None) -> bytes:
    """One SSE event. `data` is one line of JSON (JSON text never holds a raw line break)."""
    head = b""
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\r\n"
    if event is not None:
        head += b"event: " + event.encode() + b"\r\n"
    return head + b"data: " + data + b"\r\n\r\n"


class JournalStream(Response):
    """An SSE response over journal entries, each rendered as it goes out; a failure to read or
    render them becomes a last error event. Closes the entries however the response ends
    (finished, failed, or the client gone).

    The entries are iterated here, not through a generator of frames: each layer between the
    response and the store read is a frame that every idle stream keeps alive."""

    # Class attributes, not per instance: every open stream holds its response.
    status_code = 200
    background = None
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()
    """Headers beside the stream's own (the activated A2A extensions): set on the few that
    have any."""

    def __init__(
        self,
        entries: AsyncIterator[list[JournalEntry] | None],
        *,
        render: Callable[[JournalEntry], bytes],
        render_error: Callable[[A2AError], bytes],
        metrics: Metrics,
    ) -> None:
        self._entries = entries
        self._render = render
        self._render_error = render_error
        self._metrics = metrics
        self._finished = False
        self._left = False  # the client went away: the stream's cancel is that

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.current_task()
        assert stream is not None
        watcher = None
        if not tell_when_gone(stream, self):
            watcher = asyncio.ensure_future(self._watch(receive, stream))
        entries, metrics, opened_at = self._entries, self._metrics, time.time()
        metrics.open_streams.add(1)
        try:
            headers = [*_HEADERS, *self.extra_headers]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            del headers
            more = True
            while more:
                batch: list[JournalEntry] | None = None
                frames: list[bytes] = []
                failed = False
                try:
                    batch = await anext(entries)
                    # None: nothing new for a while, a comment keeps the connection alive
                    self._render_into(frames, batch)  # one read's entries go out in one write
                except StopAsyncIteration:
                    break
                except Exception as exc:  # reading or rendering: the stream's last event
                    frames.append(self._render_error(as_a2a_error(exc, where="SSE stream")))
                    failed = True
                more = not failed and not isinstance(batch, LastEntries)
                self._finished = not more
                body = b"".join(frames)
                await send({"type": "http.response.body", "body": body, "more_body": more})
                if batch:
                    self._count_sent(batch[: len(frames) - failed], opened_at)
                del batch, frames, body  # an idle stream holds nothing it has sent
            if more:  # the entries ended without saying so beforehand
                self._finished = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self._left:
                raise  # cancelled from elsewhere (shutdown): not ours to swallow
            stream.uncancel()  # the client left: the stream is simply over
        except OSError:  # the connection broke under a write
            pass
        finally:
            self._finished = True
            metrics.open_streams.add(-1)
            if watcher is not None:
                watcher.cancel()
            aclose = getattr(entries, "aclose", None)
            if aclose is not None:
                await aclose()

    def _render_into(self, frames: list[bytes], batch: list[JournalEntry] | None) -> None:
        """Each entry's frame (or the keep-alive), appended as it is rendered: a failure keeps
        the frames before it. A method of its own, so that no entry stays bound in the stream's
        frame while it waits for the next read."""
        if batch is None:
            frames.append(_PING)
            return
        for entry in batch:
            frames.append(self._frame(entry))

    def _count_sent(self, sent: list[JournalEntry], opened_at: float) -> None:
        for entry in sent:
            self._metrics.stream_sent(entry, opened_at=opened_at)

    def _frame(self, entry: JournalEntry) -> bytes:
        return frame(self._render(entry), event_id=str(entry.position))

    def client_left(self) -> bool:
        """The client went away: True (cancel the stream) unless the stream has ended."""
        if self._finished:
            return False
        self._left = True
        return True

    async def _watch(self, receive: Receive, stream: asyncio.Task[Any]) -> None:
        """Until the client leaves (when nothing else tells the stream): then cancel it."""
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.client_left():
            stream.cancel()
