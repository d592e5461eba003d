"""Server-sent events: one journal entry per event, `id:` = its journal position."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse

from app.errors import A2AError, InternalError, StoreUnavailableError
from stores.base import StoreUnavailable
from stores.models import JournalEntry

logger = logging.getLogger(__name__)

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
        except A2AError as error:
            yield render_error(error)
        except StoreUnavailable:
            yield render_error(StoreUnavailableError())
        except Exception:
            logger.exception("stream failed")
            yield render_error(InternalError())

    return EventSourceResponse(events(), ping=PING_S)
