"""The JSON-RPC 2.0 binding of A2A 1.0 at `POST /`.

Parse, call one RequestHandler method, render. Every outcome is HTTP 200 with a JSON-RPC response
(or an SSE stream); failures are JSON-RPC errors, never a 500 with a stack trace.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from app.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    StoreUnavailableError,
    VersionNotSupportedError,
)
from app.handler import RequestHandler, SendRequest
from app.wire_v1 import (
    ListTasksParams,
    SendMessageParams,
    TaskIdParams,
    render_event,
    render_task,
    render_task_page,
)
from stores.base import ANONYMOUS, StoreUnavailable, TaskQuery
from stores.models import JournalEntry, TaskState

logger = logging.getLogger(__name__)

JsonId = str | int | None
ParamsT = TypeVar("ParamsT", bound=BaseModel)
SSE_PING_S = 15

# curl -d sends form-urlencoded by default; a JSON body under that type is still taken as JSON.
_JSON_LIKE_TYPES = (
    "application/json",
    "application/a2a+json",
    "application/x-www-form-urlencoded",
    "",
)


def _dumps(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _response(payload: dict[str, Any]) -> Response:
    return Response(_dumps(payload), media_type="application/json")


def error_payload(request_id: JsonId, error: A2AError) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": error.code, "message": error.message, "data": error.details()},
    }


def _invalid_params(exc: ValidationError) -> InvalidParamsError:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'params'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    )
    return InvalidParamsError(f"Invalid parameters: {problems}")


def _parse(model: type[ParamsT], params: dict[str, Any]) -> ParamsT:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise _invalid_params(exc) from exc


def _check_version(request: Request) -> None:
    """A2A-Version: honour it when present; absent means a lenient 1.0 for 1.0 method names."""
    version = request.headers.get("a2a-version") or request.query_params.get("A2A-Version")
    if version and version.strip().split(".")[0] != "1":
        raise VersionNotSupportedError(
            f"A2A version {version!r} is not supported; this endpoint speaks 1.0",
            requestedVersion=version,
        )


class JsonRpcBinding:
    def __init__(self, handler: RequestHandler) -> None:
        self._handler = handler
        self._methods: dict[
            str, Callable[[dict[str, Any], JsonId, Request], Awaitable[Response]]
        ] = {
            "SendMessage": self._send_message,
            "SendStreamingMessage": self._send_streaming_message,
            "GetTask": self._get_task,
            "ListTasks": self._list_tasks,
            "CancelTask": self._cancel_task,
            "SubscribeToTask": self._subscribe_to_task,
        }

    async def __call__(self, request: Request) -> Response:
        request_id: JsonId = None
        try:
            payload = self._parse_body(
                request.headers.get("content-type", ""), await request.body()
            )
            request_id = payload.get("id") if isinstance(payload.get("id"), str | int) else None
            method, params = self._envelope(payload)
            _check_version(request)
            return await method(params, request_id, request)
        except A2AError as error:
            return _response(error_payload(request_id, error))
        except StoreUnavailable:
            logger.warning("the task store is unavailable")
            return _response(error_payload(request_id, StoreUnavailableError()))
        except Exception:
            logger.exception("unexpected error in a JSON-RPC request")
            return _response(error_payload(request_id, InternalError()))

    @staticmethod
    def _parse_body(content_type: str, body: bytes) -> dict[str, Any]:
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

    def _envelope(
        self, payload: dict[str, Any]
    ) -> tuple[Callable[[dict[str, Any], JsonId, Request], Awaitable[Response]], dict[str, Any]]:
        if payload.get("jsonrpc") != "2.0":
            raise InvalidRequestError('"jsonrpc" must be "2.0"')
        if "id" in payload and not isinstance(payload["id"], str | int | None):
            raise InvalidRequestError('"id" must be a string, a number or null')
        if isinstance(payload["id"] if "id" in payload else None, bool):
            raise InvalidRequestError('"id" must be a string, a number or null')
        method_name = payload.get("method")
        if not isinstance(method_name, str):
            raise InvalidRequestError('"method" must be a string')
        method = self._methods.get(method_name)
        if method is None:
            raise MethodNotFoundError(f"Method {method_name!r} not found", method=method_name)
        params = payload.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidParamsError('"params" must be an object')
        return method, params

    @staticmethod
    def _result(request_id: JsonId, result: dict[str, Any]) -> Response:
        return _response({"jsonrpc": "2.0", "id": request_id, "result": result})

    @staticmethod
    def _send_request(params: SendMessageParams) -> SendRequest:
        configuration = params.configuration
        if configuration is not None and configuration.task_push_notification_config is not None:
            raise PushNotificationNotSupportedError("This agent does not send push notifications")
        return SendRequest(
            message=params.message,
            return_immediately=bool(configuration and configuration.return_immediately),
        )

    async def _send_message(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(SendMessageParams, params)
        task = await self._handler.send_message(self._send_request(parsed), owner=ANONYMOUS)
        history_length = parsed.configuration.history_length if parsed.configuration else None
        return self._result(request_id, {"task": render_task(task, history_length=history_length)})

    async def _send_streaming_message(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(SendMessageParams, params)
        entries = await self._handler.stream_message(self._send_request(parsed), owner=ANONYMOUS)
        return self._stream(request_id, entries)

    async def _get_task(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(TaskIdParams, params)
        task = await self._handler.get_task(parsed.id, owner=ANONYMOUS)
        return self._result(request_id, render_task(task, history_length=parsed.history_length))

    async def _list_tasks(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(ListTasksParams, params)
        page_size = parsed.page_size or 50
        query = TaskQuery(
            context_id=parsed.context_id,
            state=None if parsed.status in (None, TaskState.UNSPECIFIED) else parsed.status,
            status_after=parsed.status_timestamp_after,
            page_size=page_size,
            page_token=parsed.page_token or None,
        )
        page = await self._handler.list_tasks(query, owner=ANONYMOUS)
        return self._result(
            request_id,
            render_task_page(
                page,
                page_size=page_size,
                history_length=parsed.history_length,
                include_artifacts=parsed.include_artifacts,
            ),
        )

    async def _cancel_task(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(TaskIdParams, params)
        task = await self._handler.cancel_task(parsed.id, owner=ANONYMOUS)
        return self._result(request_id, render_task(task))

    async def _subscribe_to_task(
        self, params: dict[str, Any], request_id: JsonId, request: Request
    ) -> Response:
        parsed = _parse(TaskIdParams, params)
        last_event_id = request.headers.get("last-event-id")
        after: int | None = None
        if last_event_id:
            try:
                after = int(last_event_id)
            except ValueError as exc:
                raise InvalidParamsError(
                    f"Last-Event-ID {last_event_id!r} is not an event id"
                ) from exc
        entries = await self._handler.subscribe(parsed.id, owner=ANONYMOUS, last_event_id=after)
        return self._stream(request_id, entries)

    @staticmethod
    def _stream(request_id: JsonId, entries: AsyncIterator[JournalEntry]) -> Response:
        async def events() -> AsyncIterator[dict[str, str]]:
            try:
                async for entry in entries:
                    payload = {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "result": render_event(entry.event),
                    }
                    yield {"id": str(entry.position), "data": _dumps(payload)}
            except StoreUnavailable:
                yield {"data": _dumps(error_payload(request_id, StoreUnavailableError()))}
            except A2AError as error:
                yield {"data": _dumps(error_payload(request_id, error))}

        return EventSourceResponse(events(), ping=SSE_PING_S)
