"""The contract between the JSON-RPC endpoint and the method tables it serves (1.0's and 0.3's).

A method takes its params and answers through a `Responder`: the endpoint owns the envelope (the
id, the SSE framing, the error frames), so a method table never reaches into the binding.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from starlette.responses import Response

from app.call_context import CallContext
from app.http.json_body import JsonObject
from stores.models import JournalEntry

JsonId = str | int | None
Method = Callable[[JsonObject, JsonId, CallContext], Awaitable[Response]]
Entries = AsyncIterator[list[JournalEntry] | None]
"""A journal's entries as a stream reads them (None: nothing new yet)."""


class Responder(Protocol):
    """How a method answers the request `request_id`: one result, or a stream of results."""

    def result(self, request_id: JsonId, result: Any) -> Response: ...

    def stream(
        self, request_id: JsonId, entries: Entries, render: Callable[[JournalEntry], bytes]
    ) -> Response: ...
