"""Server-sent events: one journal entry per event, `id:` = its journal position.

A stream always ends at an event boundary with a complete HTTP response: when its entries end
(the task settled, or this server is draining and the handler ended them), when a store error
becomes a last error event, or when the client goes away. The entries are closed on every one
of those paths, so whatever they hold (a stream slot) is given back.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from app.errors import A2AError, as_a2a_error
from app.metrics import Metrics
from stores.models import JournalEntry

PING_S = 15
SHUTDOWN_GRACE_S = 5.0
"""On a server shutdown, how long sse-starlette lets a stream end by itself before cutting it
(a cut stream is an incomplete chunked response). Draining ends streams at once; this only
has to outlast that, and stay below uvicorn's graceful-shutdown timeout."""


def dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


class JournalStream(EventSourceResponse):
    """An EventSourceResponse that closes its journal entries however the response ends."""

    def __init__(self, events: AsyncIterator[dict[str, str]], entries: AsyncIterator[Any]) -> None:
        super().__init__(events, ping=PING_S, shutdown_grace_period=SHUTDOWN_GRACE_S)
        self._entries = entries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self._entries, "aclose", None)
            if aclose is not None:
                await aclose()


def event_stream(
    entries: AsyncIterator[JournalEntry],
    *,
    render: Callable[[JournalEntry], bytes],
    render_error: Callable[[A2AError], dict[str, str]],
    metrics: Metrics,
) -> EventSourceResponse:
    """An SSE response over journal entries; a failure mid-stream becomes a last error event."""

    async def events() -> AsyncIterator[dict[str, str]]:
        opened_at = time.time()
        with metrics.stream_open():
            try:
                async for entry in entries:
                    yield {"id": str(entry.position), "data": render(entry).decode()}
                    metrics.stream_sent(entry, opened_at=opened_at)
            except Exception as exc:
                yield render_error(as_a2a_error(exc, where="SSE stream"))

    return JournalStream(events(), entries)
