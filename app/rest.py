"""The HTTP+JSON (REST) binding of A2A 1.0: the same operations on resource routes.

Errors are AIP-193 bodies `{"error": {code, status, message, details}}` with the A2A 1.0.1 HTTP
status of each error; a request body that is not JSON gets 415.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.errors import (
    A2AError,
    InvalidParamsError,
    MethodNotFoundError,
    as_a2a_error,
)
from app.jsonrpc import check_version
from app.operations import JsonObject, Operations, trace_headers
from app.sse import dumps, event_stream
from app.wire_v1 import render_event
from stores.base import ANONYMOUS

_JSON_TYPES = ("application/json", "application/a2a+json", "")
LIST_QUERY = (
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
)


class UnsupportedMediaType(A2AError):
    code = -32005
    reason = "CONTENT_TYPE_NOT_SUPPORTED"
    default_message = "Send the request body as application/json"
    http_status = 415
    status = "INVALID_ARGUMENT"


def error_body(error: A2AError) -> JsonObject:
    return {
        "error": {
            "code": error.http_status,
            "status": error.status,
            "message": error.message,
            "details": error.details(),
        }
    }


async def not_found(request: Request, exc: Exception) -> Response:
    """Unknown routes answer with an AIP-193 body too."""
    error = MethodNotFoundError(f"{request.method} {request.url.path} is not a route")
    return _json(error_body(error), request, error.http_status)


def _json(payload: JsonObject, request: Request, status_code: int = 200) -> Response:
    # Mirror the client's media type: a2a+json when it used it, plain JSON otherwise.
    wants_a2a = "application/a2a+json" in (
        request.headers.get("content-type", "") + request.headers.get("accept", "")
    )
    media_type = "application/a2a+json" if wants_a2a else "application/json"
    return Response(dumps(payload), status_code=status_code, media_type=media_type)


def _guarded(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        try:
            check_version(request)
            return await endpoint(request)
        except Exception as exc:
            error = as_a2a_error(exc, where=f"REST {request.method} {request.url.path}")
            return _json(error_body(error), request, error.http_status)

    return guarded


async def _body(request: Request) -> JsonObject:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in _JSON_TYPES:
        raise UnsupportedMediaType(f"Content-Type {media_type!r} is not supported")
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidParamsError("The request body is not valid JSON") from exc
    if not isinstance(payload, dict):
        raise InvalidParamsError("The request body must be a JSON object")
    return payload


def _query(request: Request, names: tuple[str, ...]) -> JsonObject:
    return {name: request.query_params[name] for name in names if name in request.query_params}


class RestBinding:
    def __init__(self, operations: Operations) -> None:
        self._operations = operations

    def routes(self) -> list[Route]:
        return [
            Route("/message:send", _guarded(self._send), methods=["POST"]),
            Route("/message:stream", _guarded(self._stream), methods=["POST"]),
            Route("/tasks", _guarded(self._list), methods=["GET"]),
            Route("/tasks/{ref}", _guarded(self._task_get), methods=["GET"]),
            Route("/tasks/{ref}", _guarded(self._task_post), methods=["POST"]),
            Route(
                "/tasks/{ref}/pushNotificationConfigs",
                _guarded(self._push_config),
                methods=["GET", "POST"],
            ),
            Route(
                "/tasks/{ref}/pushNotificationConfigs/{config_id}",
                _guarded(self._push_config),
                methods=["GET", "DELETE"],
            ),
            Route("/extendedAgentCard", _guarded(self._extended_card), methods=["GET"]),
        ]

    async def _push_config(self, request: Request) -> Response:
        return _json(await self._operations.push_config({}, owner=ANONYMOUS), request)

    async def _extended_card(self, request: Request) -> Response:
        return _json(await self._operations.extended_card({}, owner=ANONYMOUS), request)

    async def _send(self, request: Request) -> Response:
        result = await self._operations.send_message(
            await _body(request), owner=ANONYMOUS, trace=trace_headers(request.headers)
        )
        return _json(result, request)

    async def _stream(self, request: Request) -> Response:
        entries = await self._operations.stream_message(
            await _body(request), owner=ANONYMOUS, trace=trace_headers(request.headers)
        )
        return self._sse(entries)

    async def _list(self, request: Request) -> Response:
        params = _query(request, LIST_QUERY)  # the params model parses "true"/"false" itself
        return _json(await self._operations.list_tasks(params, owner=ANONYMOUS), request)

    async def _task_get(self, request: Request) -> Response:
        task_id, action = self._split(request)
        if action == "subscribe":
            return await self._subscribe(request, task_id)
        if action:
            raise MethodNotFoundError(f"GET /tasks/{{id}}:{action} is not a route")
        params = {"id": task_id, **_query(request, ("historyLength",))}
        return _json(await self._operations.get_task(params, owner=ANONYMOUS), request)

    async def _task_post(self, request: Request) -> Response:
        task_id, action = self._split(request)
        if action == "cancel":
            body = await _body(request)
            params = {"id": task_id, "metadata": body.get("metadata")}
            return _json(await self._operations.cancel_task(params, owner=ANONYMOUS), request)
        if action == "subscribe":
            return await self._subscribe(request, task_id)
        raise MethodNotFoundError(f"POST /tasks/{{id}}:{action or ''} is not a route")

    async def _subscribe(self, request: Request, task_id: str) -> Response:
        entries = await self._operations.subscribe(
            {"id": task_id},
            owner=ANONYMOUS,
            last_event_id=request.headers.get("last-event-id"),
        )
        return self._sse(entries)

    @staticmethod
    def _split(request: Request) -> tuple[str, str]:
        task_id, _, action = request.path_params["ref"].partition(":")
        return task_id, action

    @staticmethod
    def _sse(entries: Any) -> Response:
        return event_stream(
            entries,
            render=lambda entry: render_event(entry.event),
            render_error=lambda error: {"event": "error", "data": dumps(error_body(error))},
        )
