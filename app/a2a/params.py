"""What every operation does first with its params: validate them into their model, check the
ids a client chose (they become parts of store keys and log lines), read `Last-Event-ID`."""

from __future__ import annotations

import unicodedata
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from app.a2a.limits import RequestLimits
from app.a2a.wire import SendMessageParams
from app.errors import InvalidParamsError
from app.http.json_body import JsonObject

ParamsT = TypeVar("ParamsT", bound=BaseModel)


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
    if value.isascii() and value.isprintable():
        return  # the usual id: ASCII has no format, surrogate or separator characters
    if any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") for char in value):
        raise InvalidParamsError(
            f"{field} must not contain control or format characters", field=field
        )


def check_message_ids(params: SendMessageParams) -> None:
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
