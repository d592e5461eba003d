"""The HTTP+JSON (REST) binding of A2A 1.0: the same operations on resource routes.

Errors are AIP-193 bodies `{"error": {code, status, message, details}}` with the A2A 1.0.1 HTTP
status of each error; a request body that is not JSON gets 415. Errors the framework raises
outside the bindings (no route, method not allowed) get the shape of the binding the client was
speaking: a JSON-RPC error under `/`, an AIP-193 body everywhere else.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.a2a.binding import Binding
from app.a2a.http_json import (
    Endpoint,
    guarded,
    ignored_body,
    query_params,
    read_body,
    sse_response,
)
from app.a2a.wire import entry_renderer
from app.call_context import CallContext
from app.errors import MethodNotFoundError, http_error
from app.http.json_body import JsonObject
from app.http.responses import error_response, json_response
from stores.models import JournalEntry

logger = logging.getLogger(__name__)

TENANT_PREFIX = "/{tenant}"
"""The prefix of the 1.0 routes' copies within a tenant (the proto's `additional_bindings`)."""

LIST_QUERY = (
    "contextId",
    "status",
    "pageSize",
    "pageToken",
    "historyLength",
    "statusTimestampAfter",
    "includeArtifacts",
)


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
    return error_response(request.scope, error, status_code=status_code, headers=headers)


class RestBinding(Binding):
    def routes(self, prefix: str = "") -> list[Route]:
        """The 1.0 routes, under `prefix`: "", and TENANT_PREFIX (mounted after every other
        route, so that it never shadows one)."""

        def route(path: str, endpoint: Endpoint, method: str, methods: list[str]) -> Route:
            served = guarded(self._edge, endpoint, metrics=self._metrics, method=method)
            return Route(prefix + path, served, methods=methods)

        push = self._push_config
        return [
            route("/message:send", self._send, "SendMessage", ["POST"]),
            route("/message:stream", self._stream, "SendStreamingMessage", ["POST"]),
            route("/tasks", self._list, "ListTasks", ["GET"]),
            route("/tasks/{ref}", self._task_get, "GetTask", ["GET"]),
            route("/tasks/{ref}", self._task_post, "unknown", ["POST"]),
            route(
                "/tasks/{ref}/pushNotificationConfigs",
                push,
                "PushNotificationConfig",
                ["GET", "POST"],
            ),
            route(
                "/tasks/{ref}/pushNotificationConfigs/{config_id}",
                push,
                "PushNotificationConfig",
                ["GET", "DELETE"],
            ),
            route("/extendedAgentCard", self._extended_card, "GetExtendedAgentCard", ["GET"]),
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
        return self._sse(entries, context)

    async def _list(self, request: Request, context: CallContext) -> Response:
        params = query_params(request, LIST_QUERY)  # the params model parses "true"/"false" itself
        return json_response(await self._operations.list_tasks(params, context=context), request)

    async def _task_get(self, request: Request, context: CallContext) -> Response:
        task_id, action = self._split(request)
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        if action:
            raise MethodNotFoundError(f"GET /tasks/{{id}}:{action} is not a route")
        params = {"id": task_id, **query_params(request, ("historyLength", "currentGeneration"))}
        return json_response(await self._operations.get_task_json(params, context=context), request)

    async def _task_post(self, request: Request, context: CallContext) -> Response:
        task_id, action = self._split(request)
        if action == "cancel":
            await ignored_body(request)
            canceled = await self._operations.cancel_task({"id": task_id}, context=context)
            return json_response(canceled, request)
        if action == "subscribe":
            return await self._subscribe(task_id, context)
        raise MethodNotFoundError(f"POST /tasks/{{id}}:{action or ''} is not a route")

    async def _subscribe(self, task_id: str, context: CallContext) -> Response:
        entries = await self._operations.subscribe({"id": task_id}, context=context)
        return self._sse(entries, context)

    async def _body(self, request: Request) -> JsonObject:
        return await read_body(request, max_json_depth=self._max_json_depth)

    @staticmethod
    def _split(request: Request) -> tuple[str, str]:
        task_id, _, action = request.path_params["ref"].partition(":")
        return task_id, action

    def _sse(
        self, entries: AsyncIterator[list[JournalEntry] | None], context: CallContext
    ) -> Response:
        render = entry_renderer(context.task_generations)
        return sse_response(entries, render, metrics=self._metrics)
