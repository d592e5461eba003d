"""The JSON-RPC 2.0 binding of A2A 1.0 at `POST /`.

Every outcome is HTTP 200 with a JSON-RPC response (or an SSE stream of them); failures are
JSON-RPC errors, never a 500 with a stack trace.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from app.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
    as_a2a_error,
)
from app.operations import JsonObject, Operations, trace_headers
from app.sse import dumps, event_stream
from app.wire_v1 import render_event
from stores.base import ANONYMOUS

JsonId = str | int | None
Method = Callable[[JsonObject, JsonId, Request], Awaitable[Response]]

# curl -d sends form-urlencoded by default; a JSON body under that type is still taken as JSON.
_JSON_LIKE_TYPES = (
    "application/json",
    "application/a2a+json",
    "application/x-www-form-urlencoded",
    "",
)


def error_payload(request_id: JsonId, error: A2AError) -> JsonObject:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": error.code, "message": error.message, "data": error.details()},
    }


def check_version(request: Request) -> None:
    """A2A-Version: honour it when present; absent means a lenient 1.0 for 1.0 method names."""
    version = request.headers.get("a2a-version") or request.query_params.get("A2A-Version")
    if version and version.strip().split(".")[0] != "1":
        raise VersionNotSupportedError(
            f"A2A version {version!r} is not supported; this endpoint speaks 1.0",
            requestedVersion=version,
        )


def _response(payload: JsonObject) -> Response:
    return Response(dumps(payload), media_type="application/json")


class JsonRpcBinding:
    def __init__(self, operations: Operations) -> None:
        self._operations = operations
        self._methods: dict[str, Method] = {
            "SendMessage": self._send_message,
            "SendStreamingMessage": self._send_streaming_message,
            "GetTask": self._unary(operations.get_task),
            "ListTasks": self._unary(operations.list_tasks),
            "CancelTask": self._unary(operations.cancel_task),
            "SubscribeToTask": self._subscribe_to_task,
            "CreateTaskPushNotificationConfig": self._unary(operations.push_config),
            "GetTaskPushNotificationConfig": self._unary(operations.push_config),
            "ListTaskPushNotificationConfigs": self._unary(operations.push_config),
            "DeleteTaskPushNotificationConfig": self._unary(operations.push_config),
            "GetExtendedAgentCard": self._unary(operations.extended_card),
        }

    async def __call__(self, request: Request) -> Response:
        request_id: JsonId = None
        try:
            payload = self._parse_body(
                request.headers.get("content-type", ""), await request.body()
            )
            request_id = payload.get("id") if isinstance(payload.get("id"), str | int) else None
            method, params = self._envelope(payload)
            check_version(request)
            return await method(params, request_id, request)
        except Exception as exc:
            error = as_a2a_error(exc, where="JSON-RPC request")
            return _response(error_payload(request_id, error))

    @staticmethod
    def _parse_body(content_type: str, body: bytes) -> JsonObject:
        media_type = content_type.split(";")[0].strip().lower()
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            if media_type not in _JSON_LIKE_TYPES:
                raise ContentTypeNotSupportedError(
                    f"Content-Type {media_type!r} is not supported; send application/json"
                ) from exc
            raise JSONParseError() from exc
        if isinstance(payload, list):
            raise InvalidRequestError("Batch requests are not supported")
        if not isinstance(payload, dict):
            raise InvalidRequestError("A JSON-RPC request must be a JSON object")
        return payload

    def _envelope(self, payload: JsonObject) -> tuple[Method, JsonObject]:
        if payload.get("jsonrpc") != "2.0":
            raise InvalidRequestError('"jsonrpc" must be "2.0"')
        request_id = payload.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int | None):
            raise InvalidRequestError('"id" must be a string, a number or null')
        method_name = payload.get("method")
        if not isinstance(method_name, str):
            raise InvalidRequestError('"method" must be a string')
        method = self._methods.get(method_name)
        if method is None:
            raise MethodNotFoundError(f"Method {method_name!r} not found", method=method_name)
        params = payload.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidParamsError('"params" must be an object')
        return method, params

    def _unary(self, operation: Callable[..., Awaitable[JsonObject]]) -> Method:
        """A method with one JSON result: params in, the operation's result out."""

        async def method(params: JsonObject, request_id: JsonId, _: Request) -> Response:
            return self._result(request_id, await operation(params, owner=ANONYMOUS))

        return method

    @staticmethod
    def _result(request_id: JsonId, result: JsonObject) -> Response:
        return _response({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _send_message(
        self, params: JsonObject, request_id: JsonId, request: Request
    ) -> Response:
        trace = trace_headers(request.headers)
        result = await self._operations.send_message(params, owner=ANONYMOUS, trace=trace)
        return self._result(request_id, result)

    async def _send_streaming_message(
        self, params: JsonObject, request_id: JsonId, request: Request
    ) -> Response:
        trace = trace_headers(request.headers)
        entries = await self._operations.stream_message(params, owner=ANONYMOUS, trace=trace)
        return self._stream(request_id, entries)

    async def _subscribe_to_task(
        self, params: JsonObject, request_id: JsonId, request: Request
    ) -> Response:
        entries = await self._operations.subscribe(
            params, owner=ANONYMOUS, last_event_id=request.headers.get("last-event-id")
        )
        return self._stream(request_id, entries)

    @staticmethod
    def _stream(request_id: JsonId, entries: Any) -> Response:
        return event_stream(
            entries,
            render=lambda entry: {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": render_event(entry.event),
            },
            render_error=lambda error: {"data": dumps(error_payload(request_id, error))},
        )
