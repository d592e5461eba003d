"""Server-sent events: one journal entry per event, `id:` = its journal position."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse

from app.errors import A2AError, as_a2a_error
from stores.models import JournalEntry

PING_S = 15


def dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def event_stream(
    entries: AsyncIterator[JournalEntry],
    *,
    render: Callable[[JournalEntry], dict[str, Any]],
    render_error: Callable[[A2AError], dict[str, str]],
) -> EventSourceResponse:
    """An SSE response over journal entries; a failure mid-stream becomes a last error event."""

    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            async for entry in entries:
                yield {"id": str(entry.position), "data": dumps(render(entry))}
        except Exception as exc:
            yield render_error(as_a2a_error(exc, where="SSE stream"))

    return EventSourceResponse(events(), ping=PING_S)
