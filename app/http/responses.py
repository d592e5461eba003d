"""JSON responses, and the one place that chooses an error response's shape.

An error can be answered from three places: a binding, the framework (no route, method not
allowed) and the HTTP guard (before any route). All three answer in the shape of the binding the
client speaks at that path: a JSON-RPC error at `/` (the JSON-RPC endpoint), an AIP-193 body
everywhere else, both with the error's HTTP status and headers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from app.errors import A2AError
from app.http.json_body import render_json

JSONRPC_PATH = "/"


def _media_type(headers: Headers) -> str:
    # Mirror the client's media type: a2a+json when it used it, plain JSON otherwise.
    wants_a2a = "application/a2a+json" in (
        headers.get("content-type", "") + headers.get("accept", "")
    )
    return "application/a2a+json" if wants_a2a else "application/json"


def json_response(
    payload: Any,
    request: Request,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An HTTP+JSON answer, in the media type the client used."""
    return Response(
        render_json(payload), status_code, headers=headers, media_type=_media_type(request.headers)
    )


def error_response(
    scope: Scope,
    error: A2AError,
    *,
    status_code: int | None = None,
    headers: Mapping[str, str] | None = None,
    before_routing: bool = False,
) -> Response:
    """`error` for a request outside a binding's own handling: a JSON-RPC error (id null: the
    request was not read) at `/`, an AIP-193 body elsewhere. `status_code` when the response's
    status is not the error's own; `headers` beside the error's own (`Allow` on a 405).
    `before_routing`: the HTTP guard's refusal, made before any route: only a POST at `/` is a
    JSON-RPC call, and an AIP-193 body is plain JSON (both as the guard has always answered)."""
    status = status_code or error.http_status
    all_headers = {**error.http_headers(), **(headers or {})}
    at_endpoint = scope.get("path") == JSONRPC_PATH
    if at_endpoint and (not before_routing or scope.get("method") == "POST"):
        body = render_json(error.jsonrpc_error(None))
        return Response(body, status, headers=all_headers, media_type="application/json")
    body = render_json(error.rest_body(http_status=status_code))
    media_type = "application/json" if before_routing else _media_type(Headers(scope=scope))
    return Response(body, status, headers=all_headers, media_type=media_type)
