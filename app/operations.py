"""A2A 1.0 operations on plain JSON params: parse (wire_v1), call the RequestHandler, render.

Both bindings call these: JSON-RPC passes its `params` object; HTTP+JSON builds the same object
from the body, the path and the query string.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
)
from app.handler import RequestHandler, SendRequest
from app.wire_v1 import (
    ListTasksParams,
    SendMessageParams,
    TaskIdParams,
    render_task,
    render_task_page,
)
from stores.base import TaskQuery
from stores.models import JournalEntry, TaskState

ParamsT = TypeVar("ParamsT", bound=BaseModel)
JsonObject = dict[str, Any]


def parse(model: type[ParamsT], params: JsonObject) -> ParamsT:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'params'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise InvalidParamsError(f"Invalid parameters: {problems}") from exc


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's W3C trace context headers, if it sent any."""
    return {name: headers[name] for name in ("traceparent", "tracestate") if name in headers}


def parse_last_event_id(value: str | None) -> int | None:
    """The standard SSE `Last-Event-ID` header: the journal position a client saw last."""
    if not value:
        return None
    try:
        position = int(value)
    except ValueError as exc:
        raise InvalidParamsError(f"Last-Event-ID {value!r} is not an event id") from exc
    if position < 0:
        raise InvalidParamsError(f"Last-Event-ID {value!r} is not an event id")
    return position


_NO_PUSH = "This agent does not send push notifications"


def _send_request(params: SendMessageParams, trace_carrier: dict[str, str]) -> SendRequest:
    configuration = params.configuration
    if configuration is not None and configuration.task_push_notification_config is not None:
        raise PushNotificationNotSupportedError(_NO_PUSH)
    return SendRequest(
        message=params.message,
        return_immediately=bool(configuration and configuration.return_immediately),
        trace_carrier=trace_carrier,
    )


class Operations:
    def __init__(self, handler: RequestHandler) -> None:
        self._handler = handler

    async def push_config(self, params: JsonObject, *, owner: str) -> JsonObject:
        """Create/Get/List/Delete push-notification configs: not offered by this agent.

        The card says `pushNotifications: false`, so each of them fails with -32003 before
        anything else is looked at (even the task), as the spec requires.
        """
        raise PushNotificationNotSupportedError(_NO_PUSH)

    async def extended_card(self, params: JsonObject, *, owner: str) -> JsonObject:
        """The card says `extendedAgentCard: false`: the operation is unsupported (-32004)."""
        raise UnsupportedOperationError("This agent has no extended agent card")

    async def send_message(
        self, params: JsonObject, *, owner: str, trace: dict[str, str] | None = None
    ) -> JsonObject:
        parsed = parse(SendMessageParams, params)
        task = await self._handler.send_message(_send_request(parsed, trace or {}), owner=owner)
        history_length = parsed.configuration.history_length if parsed.configuration else None
        return {"task": render_task(task, history_length=history_length)}

    async def stream_message(
        self, params: JsonObject, *, owner: str, trace: dict[str, str] | None = None
    ) -> AsyncIterator[JournalEntry]:
        parsed = parse(SendMessageParams, params)
        return await self._handler.stream_message(_send_request(parsed, trace or {}), owner=owner)

    async def get_task(self, params: JsonObject, *, owner: str) -> JsonObject:
        parsed = parse(TaskIdParams, params)
        task = await self._handler.get_task(parsed.id, owner=owner)
        return render_task(task, history_length=parsed.history_length)

    async def list_tasks(self, params: JsonObject, *, owner: str) -> JsonObject:
        parsed = parse(ListTasksParams, params)
        page_size = parsed.page_size or 50
        query = TaskQuery(
            context_id=parsed.context_id,
            state=None if parsed.status in (None, TaskState.UNSPECIFIED) else parsed.status,
            status_after=parsed.status_timestamp_after,
            page_size=page_size,
            page_token=parsed.page_token or None,
        )
        page = await self._handler.list_tasks(query, owner=owner)
        return render_task_page(
            page,
            page_size=page_size,
            history_length=parsed.history_length,
            include_artifacts=parsed.include_artifacts,
        )

    async def cancel_task(self, params: JsonObject, *, owner: str) -> JsonObject:
        parsed = parse(TaskIdParams, params)
        return render_task(await self._handler.cancel_task(parsed.id, owner=owner))

    async def subscribe(
        self, params: JsonObject, *, owner: str, last_event_id: str | None
    ) -> AsyncIterator[JournalEntry]:
        parsed = parse(TaskIdParams, params)
        return await self._handler.subscribe(
            parsed.id, owner=owner, last_event_id=parse_last_event_id(last_event_id)
        )
