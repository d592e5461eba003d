"""What every protocol binding (JSON-RPC, HTTP+JSON of either generation) is built from."""

from __future__ import annotations

from starlette.responses import Response

from app.a2a.operations import Operations
from app.a2a.sse import JournalStream
from app.call_context import CallContext
from app.extensions import echo_headers
from app.http.edge import Edge
from app.ops.metrics import Metrics


def echo_extensions(response: Response, context: CallContext | None) -> Response:
    """The response naming the request's activated A2A extensions (`A2A-Extensions`): a result,
    a stream (before its first event) or an error alike. A request refused before activation
    (no `context`: authentication, rate, a required extension missing) has none to name."""
    if context is None or not context.activated_extensions:
        return response  # the usual case: nothing to name
    headers = echo_headers(context)
    if isinstance(response, JournalStream):  # its head is written by the stream itself
        response.extra_headers = tuple(
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()
        )
    else:
        response.headers.update(headers)
    return response


class Binding:
    """The operations a binding serves, the edge its requests pass (authentication, rate), the
    nesting depth a JSON body may have, and the metrics its requests are counted in."""

    def __init__(
        self,
        operations: Operations,
        edge: Edge,
        *,
        max_json_depth: int = 32,
        metrics: Metrics | None = None,
    ) -> None:
        self._operations = operations
        self._edge = edge
        self._max_json_depth = max_json_depth
        self._metrics = metrics or Metrics()
