"""A2A 1.0 operations on plain JSON params: parse (wire_v1), call the RequestHandler, render.

Both bindings call these: JSON-RPC passes its `params` object; HTTP+JSON builds the same object
from the body, the path and the query string.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.call_context import CallContext
from app.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    unreadable_task,
)
from app.handler import RequestHandler, SendRequest
from app.limits import RequestLimits
from app.wire_v1 import (
    ListTasksParams,
    SendMessageParams,
    TaskIdParams,
    render_task,
)
from stores.base import TaskQuery
from stores.models import JournalEntry, Task, TaskState

logger = logging.getLogger(__name__)

ParamsT = TypeVar("ParamsT", bound=BaseModel)
JsonObject = dict[str, Any]


def parse(model: type[ParamsT], params: JsonObject, limits: RequestLimits | None = None) -> ParamsT:
    try:
        return model.model_validate(params, context=limits)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'params'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise InvalidParamsError(f"Invalid parameters: {problems}") from exc


MAX_ID_LENGTH = 128
"""The longest client-chosen id (messageId, contextId, taskId): ids become parts of store keys."""


def check_id(field: str, value: str | None) -> None:
    """A client-chosen id must be 1-128 characters, not blank, without control characters
    (-32602 / 400 naming the field): it becomes part of a store key and of log lines."""
    if value is None:
        return
    if not value.strip():
        raise InvalidParamsError(f"{field} must not be empty or blank", field=field)
    if len(value) > MAX_ID_LENGTH:
        raise InvalidParamsError(f"{field} is longer than {MAX_ID_LENGTH} characters", field=field)
    if any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") for char in value):
        raise InvalidParamsError(
            f"{field} must not contain control or format characters", field=field
        )


def _check_message_ids(params: SendMessageParams) -> None:
    message = params.message
    check_id("message.messageId", message.message_id)
    check_id("message.contextId", message.context_id)
    check_id("message.taskId", message.task_id)


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


def _render_stored(task: Task, *, where: str, **shaping: Any) -> JsonObject | None:
    """A stored task as the wire shows it, or None (logged) if it cannot be rendered: poison data,
    such as a value nested deeper than the serializer goes, must not fail a whole list."""
    try:
        return render_task(task, **shaping)
    except Exception as exc:
        logger.warning(
            "%s | task_id=<%s> | the stored task cannot be rendered (%s); left out",
            where,
            task.id,
            type(exc).__name__,
        )
        return None


_NO_PUSH = "This agent does not send push notifications"


def _send_request(params: SendMessageParams, context: CallContext) -> SendRequest:
    _check_message_ids(params)
    configuration = params.configuration
    if configuration is not None and configuration.task_push_notification_config is not None:
        raise PushNotificationNotSupportedError(_NO_PUSH)
    return SendRequest(
        message=params.message,
        return_immediately=bool(configuration and configuration.return_immediately),
        trace_carrier=dict(context.trace_carrier),
    )


class Operations:
    def __init__(self, handler: RequestHandler, *, limits: RequestLimits | None = None) -> None:
        self._handler = handler
        self._limits = limits or RequestLimits()

    async def push_config(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        """Create/Get/List/Delete push-notification configs: not offered by this agent.

        The card says `pushNotifications: false`, so each of them fails with -32003 before
        anything else is looked at (even the task), as the spec requires.
        """
        raise PushNotificationNotSupportedError(_NO_PUSH)

    async def extended_card(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        """The card says `extendedAgentCard: false`: the operation is unsupported (-32004)."""
        raise UnsupportedOperationError("This agent has no extended agent card")

    async def send_message(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(SendMessageParams, params, self._limits)
        task = await self._handler.send_message(_send_request(parsed, context), owner=context.owner)
        history_length = parsed.configuration.history_length if parsed.configuration else None
        return {"task": render_task(task, history_length=history_length)}

    async def stream_message(
        self, params: JsonObject, *, context: CallContext
    ) -> AsyncIterator[JournalEntry]:
        parsed = parse(SendMessageParams, params, self._limits)
        return await self._handler.stream_message(
            _send_request(parsed, context), owner=context.owner
        )

    async def get_task(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        task = await self._handler.get_task(parsed.id, owner=context.owner)
        rendered = _render_stored(task, where="GetTask", history_length=parsed.history_length)
        if rendered is None:
            raise unreadable_task(task.id)
        return rendered

    async def list_tasks(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(ListTasksParams, params, self._limits)
        check_id("contextId", parsed.context_id)
        page_size = parsed.page_size or 50
        query = TaskQuery(
            context_id=parsed.context_id,
            state=None if parsed.status in (None, TaskState.UNSPECIFIED) else parsed.status,
            status_after=parsed.status_timestamp_after,
            page_size=page_size,
            page_token=parsed.page_token or None,
        )
        page = await self._handler.list_tasks(query, owner=context.owner)
        tasks = []
        for task in page.tasks:
            rendered = _render_stored(
                task,
                where="ListTasks",
                history_length=parsed.history_length,
                include_artifacts=parsed.include_artifacts,
            )
            if rendered is not None:
                tasks.append(rendered)
        return {
            "tasks": tasks,
            "nextPageToken": page.next_page_token,
            "pageSize": page_size,
            "totalSize": page.total_size,
        }

    async def cancel_task(self, params: JsonObject, *, context: CallContext) -> JsonObject:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        return render_task(await self._handler.cancel_task(parsed.id, owner=context.owner))

    async def subscribe(
        self, params: JsonObject, *, context: CallContext
    ) -> AsyncIterator[JournalEntry]:
        parsed = parse(TaskIdParams, params, self._limits)
        check_id("id", parsed.id)
        return await self._handler.subscribe(
            parsed.id,
            owner=context.owner,
            last_event_id=parse_last_event_id(context.last_event_id),
        )
