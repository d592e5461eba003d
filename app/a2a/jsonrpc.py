"""The JSON-RPC 2.0 binding of A2A 1.0 at `POST /`.

Every outcome is HTTP 200 with a JSON-RPC response (or an SSE stream of them); failures are
JSON-RPC errors, never a 500 with a stack trace. A notification (a request object without an
"id" member) is run for its effect and answered with an empty HTTP 204, as JSON-RPC wants no
response to it, not even an error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.a2a.binding import Binding, echo_extensions
from app.a2a.rpc import Entries, JsonId, Method
from app.a2a.sse import JournalStream, frame
from app.a2a.v0_3.jsonrpc import v03_methods
from app.a2a.versions import check_version, generation_of
from app.a2a.wire import entry_renderer
from app.call_context import CallContext
from app.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    as_a2a_error,
)
from app.http.errors import EDGE_ERRORS
from app.http.json_body import (
    JsonObject,
    check_depth,
    check_json_media_type,
    parse_json,
    read_request_body,
    render_json,
)
from app.ops.metrics import RequestRecord
from stores.models import JournalEntry

logger = logging.getLogger(__name__)

# A notification gets no answer, so a streaming method runs as its one-shot form (same effect: the
# task is started, or looked up), and a send does not wait for the task to settle.
_NOTIFIED_AS = {"SendStreamingMessage": "SendMessage", "SubscribeToTask": "GetTask"}


def _request_id(payload: JsonObject) -> JsonId:
    """The id to answer with: the request's own when it is a valid one, else null."""
    request_id = payload.get("id")
    valid = isinstance(request_id, str | int) and not isinstance(request_id, bool)
    return request_id if valid else None


def _task_id_of(params: JsonObject) -> str | None:
    """The task a request names, when it names one (for its log line)."""
    message = params.get("message")
    task_id = params.get("id") or (message.get("taskId") if isinstance(message, dict) else None)
    return task_id if isinstance(task_id, str) else None


def _tenant_of(payload: Any, *, v03_tenant: str | None) -> object:
    """The raw `params.tenant` of a 1.0 request (checked by the edge). 0.3 has no tenant: a 0.3
    method is served within `v03_tenant` (the card's), whatever its params hold."""
    method = payload.get("method") if isinstance(payload, dict) else None
    if isinstance(method, str) and generation_of(method) == "0.3":
        return v03_tenant
    params = payload.get("params") if isinstance(payload, dict) else None
    return params.get("tenant") if isinstance(params, dict) else None


def _is_notification(payload: JsonObject) -> bool:
    """A well-formed 1.0 request object with no "id" member (`"id": null` is a request).

    A 0.3 method (`category/action`) without an id is answered all the same, with id null: that
    is what 0.3 servers (a2a-python's) do and what 0.3 clients and the 0.3 TCK expect.
    """
    method = payload.get("method")
    return (
        "id" not in payload
        and payload.get("jsonrpc") == "2.0"
        and isinstance(method, str)
        and generation_of(method) == "1.0"
    )


def _response(
    payload: JsonObject, headers: dict[str, str] | None = None, status_code: int = 200
) -> Response:
    return Response(
        render_json(payload), status_code, media_type="application/json", headers=headers
    )


class JsonRpcBinding(Binding):
    @functools.cached_property
    def _methods(self) -> dict[str, Method]:
        """Both generations' methods on the one endpoint: 1.0's PascalCase, 0.3's slashes."""
        operations = self._operations
        return {
            "SendMessage": self._send_message,
            "SendStreamingMessage": self._send_streaming_message,
            "GetTask": self._unary(operations.get_task_json),
            "ListTasks": self._unary(operations.list_tasks),
            "CancelTask": self._unary(operations.cancel_task),
            "SubscribeToTask": self._subscribe_to_task,
            "CreateTaskPushNotificationConfig": self._unary(operations.create_push_config),
            "GetTaskPushNotificationConfig": self._unary(operations.get_push_config),
            "ListTaskPushNotificationConfigs": self._unary(operations.list_push_configs),
            "DeleteTaskPushNotificationConfig": self._unary(operations.delete_push_config),
            "GetExtendedAgentCard": self._unary(operations.extended_card),
            **v03_methods(operations, self),
        }

    async def __call__(self, request: Request, tenant: str | None = None) -> Response:
        """Serve a request; `tenant`: the path's (`POST /{tenant}/`), which every method of
        either generation is within (a `params.tenant` is not read, as on HTTP+JSON)."""
        with self._metrics.request("jsonrpc") as record:
            return await self._serve(request, record, tenant)

    async def _serve(
        self, request: Request, record: RequestRecord, path_tenant: str | None = None
    ) -> Response:
        try:
            body = await read_request_body(request)  # nothing else reads it
        except ClientDisconnect:
            logger.debug("JSON-RPC request | the client went away before its request arrived")
            return Response(status_code=400)  # nobody reads it
        request_id: JsonId = None
        notification = False
        context: CallContext | None = None
        try:
            check_json_media_type(request.headers.get("content-type", ""))
            # The id is read before the caller is authenticated, so that even a 401 answers
            # the request it refuses; nothing else of the body is acted on until then.
            parse_error: JSONParseError | None = None
            payload: Any = None
            try:
                payload = parse_json(body)
            except JSONParseError as exc:
                parse_error = exc
            if isinstance(payload, dict):
                request_id = _request_id(payload)
            tenant = path_tenant or _tenant_of(payload, v03_tenant=self._edge.tenants.card_tenant)
            context = await self._edge.context(request, tenant=tenant)
            record.owner = context.owner
            if parse_error is not None:
                raise parse_error
            notification = isinstance(payload, dict) and _is_notification(payload)
            check_depth(payload, limit=self._max_json_depth, text=body)
            name, method, params = self._envelope(payload)
            record.method, record.task_id = name, _task_id_of(params)
            check_version(request, generation_of(name))
            if notification:
                await self._notify(name, params, context)
                return echo_extensions(Response(status_code=204), context)
            return echo_extensions(await method(params, request_id, context), context)
        except Exception as exc:
            error = as_a2a_error(exc, where="JSON-RPC request")
            record.outcome = error.reason
            if isinstance(exc, A2AError):
                logger.debug(
                    "JSON-RPC request | refused: code=<%s> | %s", error.code, error.message
                )
            if notification:
                return echo_extensions(Response(status_code=204), context)
            # Headers too: an overload's Retry-After is worth as much on JSON-RPC as on REST;
            # and a refusal at the edge (401, 415, 429) keeps its HTTP status.
            status_code = error.http_status if isinstance(error, EDGE_ERRORS) else 200
            response = _response(error.jsonrpc_error(request_id), error.http_headers(), status_code)
            return echo_extensions(response, context)

    async def _notify(self, name: str, params: JsonObject, context: CallContext) -> None:
        """Run a notification for its effect; its result (or stream) goes nowhere."""
        name = _NOTIFIED_AS.get(name, name)
        configuration = params.get("configuration")
        if name == "SendMessage" and isinstance(configuration, dict | None):
            configuration = {
                key: value
                for key, value in (configuration or {}).items()
                if key not in ("returnImmediately", "return_immediately")
            }
            params = {**params, "configuration": {**configuration, "returnImmediately": True}}
        await self._methods[name](params, None, context)

    def _envelope(self, payload: Any) -> tuple[str, Method, JsonObject]:
        if isinstance(payload, list):
            raise InvalidRequestError("Batch requests are not supported")
        if not isinstance(payload, dict):
            raise InvalidRequestError("A JSON-RPC request must be a JSON object")
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
        return method_name, method, params

    def _unary(self, operation: Callable[..., Awaitable[JsonObject | orjson.Fragment]]) -> Method:
        """A method with one JSON result: params in, the operation's result out."""

        async def method(params: JsonObject, request_id: JsonId, context: CallContext) -> Response:
            return self.result(request_id, await operation(params, context=context))

        return method

    # The Responder the method tables answer through (app.a2a.rpc).

    @staticmethod
    def result(request_id: JsonId, result: Any) -> Response:
        return _response({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _send_message(
        self, params: JsonObject, request_id: JsonId, context: CallContext
    ) -> Response:
        result = await self._operations.send_message(params, context=context)
        return self.result(request_id, result)

    async def _send_streaming_message(
        self, params: JsonObject, request_id: JsonId, context: CallContext
    ) -> Response:
        entries = await self._operations.stream_message(params, context=context)
        return self.stream(request_id, entries, entry_renderer(context.task_generations))

    async def _subscribe_to_task(
        self, params: JsonObject, request_id: JsonId, context: CallContext
    ) -> Response:
        entries = await self._operations.subscribe(params, context=context)
        return self.stream(request_id, entries, entry_renderer(context.task_generations))

    def stream(
        self, request_id: JsonId, entries: Entries, render: Callable[[JournalEntry], bytes]
    ) -> Response:
        frames = _ResponseFrames(request_id, render)
        return JournalStream(
            entries, render=frames.result, render_error=frames.error, metrics=self._metrics
        )


class _ResponseFrames:
    """A stream's events as JSON-RPC responses to the request that opened it. An object with
    slots rather than two closures: each open stream holds one."""

    __slots__ = ("_head", "_render", "_request_id")

    def __init__(self, request_id: JsonId, render: Callable[[JournalEntry], bytes]) -> None:
        self._request_id = request_id
        self._head = b'{"jsonrpc":"2.0","id":' + render_json(request_id) + b',"result":'
        self._render = render

    def result(self, entry: JournalEntry) -> bytes:
        return self._head + self._render(entry) + b"}"

    def error(self, error: A2AError) -> bytes:
        return frame(render_json(error.jsonrpc_error(self._request_id)))
