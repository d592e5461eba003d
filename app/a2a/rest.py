"""The HTTP+JSON (REST) binding of A2A 1.0: the same operations on resource routes.

Errors are AIP-193 bodies `{"error": {code, status, message, details}}` with the A2A 1.0.1 HTTP
status of each error; a request body that is not JSON gets 415. Errors the framework raises
outside the bindings (no route, method not allowed) get the shape of the binding the client was
speaking: a JSON-RPC error under `/`, an AIP-193 body everywhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from app.a2a.binding import Binding
from app.a2a.json_body import check_depth, check_json_media_type, parse_json, render_json
from app.a2a.jsonrpc import check_version, error_payload
from app.a2a.operations import JsonObject
from app.a2a.sse import JournalStream, frame
from app.a2a.wire import render_entry
from app.call_context import CallContext
from app.errors import (
    A2AError,
    InvalidParamsError,
    MethodNotFoundError,
    as_a2a_error,
    http_error,
)
from app.http.edge import Edge
from app.ops.metrics import Metrics, RequestRecord
from stores.models import JournalEntry

logger = logging.getLogger(__name__)

LIST_QUERY = (
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
)


def error_body(error: A2AError, *, http_status: int | None = None) -> JsonObject:
    return {
        "error": {
            "code": http_status or error.http_status,
            "status": error.status,
            "message": error.message,
            "details": error.details(),
        }
    }


async def framework_error(request: Request, exc: Exception) -> Response:
    """An HTTP error raised by the framework (404, 405 with its `Allow` header, ...)."""
    status_code = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = exc.headers if isinstance(exc, HTTPException) else None
    if status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        if headers and "Allow" in headers:
            message += f"; allowed: {headers['Allow']}"
    elif status_code == 404:
        message = f"{request.method} {request.url.path} is not a route"
    else:
        message = str(getattr(exc, "detail", "")) or "Invalid request"
    error = http_error(status_code, message)
    logger.debug("%s %s | refused: status=<%s>", request.method, request.url.path, status_code)
    if request.url.path == "/":
        payload = error_payload(None, error)
        return Response(
            render_json(payload), status_code, headers=headers, media_type="application/json"
        )
    return json_response(error_body(error, http_status=status_code), request, status_code, headers)


def json_response(
    payload: JsonObject,
    request: Request,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    # Mirror the client's media type: a2a+json when it used it, plain JSON otherwise.
    wants_a2a = "application/a2a+json" in (
        request.headers.get("content-type", "") + request.headers.get("accept", "")
    )
    media_type = "application/a2a+json" if wants_a2a else "application/json"
    return Response(render_json(payload), status_code, headers=headers, media_type=media_type)


Endpoint = Callable[[Request, CallContext], Awaitable[Response]]


async def read_body(request: Request, *, max_json_depth: int) -> JsonObject:
    """The request's JSON object body ({} when empty); 415 for another media type."""
    check_json_media_type(request.headers.get("content-type", ""))
    raw = await request.body()
    if not raw.strip():
        return {}
    payload = parse_json(raw)
    check_depth(payload, limit=max_json_depth, text=raw)
    if not isinstance(payload, dict):
        raise InvalidParamsError("The request body must be a JSON object")
    return payload


def guarded(
    edge: Edge, endpoint: Endpoint, *, metrics: Metrics, method: str, generation: str = "1.0"
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint, once the caller is authenticated and within its rate (one call context per
    request), with every failure rendered as an AIP-193 error; counted as `method`."""

    async def guarded(request: Request) -> Response:
        with metrics.request("rest") as record:
            record.method = method
            return await serve(request, record)

    async def serve(request: Request, record: RequestRecord) -> Response:
        where = f"REST {request.method} {request.url.path}"
        ref = request.path_params.get("ref")
        if isinstance(ref, str):
            task_id, _, action = ref.partition(":")
            record.task_id = task_id
            record.method = _REST_ACTIONS.get((request.method, action), method)
        try:
            context = await edge.context(request)
            record.owner = context.owner
            check_version(request, generation)
            return await endpoint(request, context)
        except ClientDisconnect:
            logger.debug("%s | the client went away before its request arrived", where)
            return Response(status_code=400)  # nobody reads it
        except Exception as exc:
            error = as_a2a_error(exc, where=where)
            record.outcome = error.reason
            if isinstance(exc, A2AError):
                logger.debug(
                    "%s | refused: status=<%s> | %s", where, error.http_status, error.message
                )
            return json_response(
                error_body(error), request, error.http_status, error.http_headers()
            )

    return guarded


def query_params(request: Request, names: tuple[str, ...]) -> JsonObject:
    return {name: request.query_params[name] for name in names if name in request.query_params}


_REST_ACTIONS = {
    ("GET", "subscribe"): "SubscribeToTask",
    ("POST", "subscribe"): "SubscribeToTask",
    ("POST", "cancel"): "CancelTask",
}
"""The method a `/tasks/{id}:action` route serves (for metrics and logs)."""


class RestBinding(Binding):
    def routes(self) -> list[Route]:
        def guarded_(endpoint: Endpoint, method: str) -> Callable[[Request], Awaitable[Response]]:
            return guarded(self._edge, endpoint, metrics=self._metrics, method=method)

        return [
            Route("/message:send", guarded_(self._send, "SendMessage"), methods=["POST"]),
            Route(
                "/message:stream", guarded_(self._stream, "SendStreamingMessage"), methods=["POST"]
            ),
            Route("/tasks", guarded_(self._list, "ListTasks"), methods=["GET"]),
            Route("/tasks/{ref}", guarded_(self._task_get, "GetTask"), methods=["GET"]),
            Route("/tasks/{ref}", guarded_(self._task_post, "unknown"), methods=["POST"]),
            Route(
                "/tasks/{ref}/pushNotificationConfigs",
                guarded_(self._push_config, "PushNotificationConfig"),
                methods=["GET", "POST"],
            ),
            Route(
                "/tasks/{ref}/pushNotificationConfigs/{config_id}",
                guarded_(self._push_config, "PushNotificationConfig"),
                methods=["GET", "DELETE"],
            ),
            Route(
                "/extendedAgentCard",
                guarded_(self._extended_card, "GetExtendedAgentCard"),
                methods=["GET"],
            ),
        ]

    async def _push_config(self, request: Request, context: CallContext) -> Response:
        task_id = request.path_params["ref"]
        config_id = request.path_params.get("config_id")
        reference = {"taskId": task_id} | ({"id": config_id} if config_id else {})
        operations = self._operations
        if request.method == "POST":
            body = await self._body(request)
            result = await operations.create_push_config(body | reference, context=context)
        elif request.method == "DELETE":
            result = await operations.delete_push_config(reference, context=context)
        elif config_id:
            result = await operations.get_push_config(reference, context=context)
        else:
            query = query_params(request, ("pageSize", "pageToken"))
            result = await operations.list_push_configs(query | reference, context=context)
        return json_response(result, request)

    async def _extended_card(self, request: Request, context: CallContext) -> Response:
        return json_response(await self._operations.extended_card({}, context=context), request)

    async def _send(self, request: Request, context: CallContext) -> Response:
        result = await self._operations.send_message(await self._body(request), context=context)
        return json_response(result, request)

    async def _stream(self, request: Request, context: CallContext) -> Response:
        entries = await self._operations.stream_message(await self._body(request), context=context)
        return self._sse(entries)

    async def _list(self, request: Request, context: CallContext) -> Response:
        params = query_params(request, LIST_QUERY)  # the params model parses "true"/"false" itself
        return json_response(await self._operations.list_tasks(params, context=context), request)

    async def _task_get(self, request: Request, context: CallContext) -> Response:
        task_id, action = self._split(request)
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        if action:
            raise MethodNotFoundError(f"GET /tasks/{{id}}:{action} is not a route")
        params = {"id": task_id, **query_params(request, ("historyLength",))}
        return json_response(await self._operations.get_task(params, context=context), request)

    async def _task_post(self, request: Request, context: CallContext) -> Response:
        task_id, action = self._split(request)
        if action == "cancel":
            body = await self._body(request)
            params = {"id": task_id, "metadata": body.get("metadata")}
            return json_response(
                await self._operations.cancel_task(params, context=context), request
            )
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        raise MethodNotFoundError(f"POST /tasks/{{id}}:{action or ''} is not a route")

    async def _subscribe(self, task_id: str, context: CallContext) -> Response:
        entries = await self._operations.subscribe({"id": task_id}, context=context)
        return self._sse(entries)

    async def _body(self, request: Request) -> JsonObject:
        return await read_body(request, max_json_depth=self._max_json_depth)

    @staticmethod
    def _split(request: Request) -> tuple[str, str]:
        task_id, _, action = request.path_params["ref"].partition(":")
        return task_id, action

    def _sse(self, entries: Any) -> Response:
        return sse_response(entries, render_entry, metrics=self._metrics)


def sse_response(
    entries: Any, render: Callable[[JournalEntry], bytes], *, metrics: Metrics
) -> Response:
    """Journal entries as SSE; a failure mid-stream is a last `event: error` with its body."""
    return JournalStream(
        entries,
        render=render,
        render_error=lambda error: frame(render_json(error_body(error)), event="error"),
        metrics=metrics,
    )
