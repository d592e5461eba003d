"""A2A 1.0 (ProtoJSON) wire form: request params in, StreamResponse / Task JSON out.

Our records already carry the 1.0 camelCase aliases, so rendering is a dump plus the few
response-shaping rules (historyLength, includeArtifacts). Params accept camelCase and snake_case.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from app.a2a.generations import render_entry_with_generation, with_generation
from app.a2a.limits import RequestLimits
from app.http.json_body import render_json
from stores.codec import dump_task
from stores.models import (
    ArtifactUpdate,
    JournalEntry,
    Message,
    MessageReply,
    StatusUpdate,
    Task,
    TaskEvent,
    TaskRecord,
    TaskSnapshot,
    TaskState,
)

_DEFAULT_LIMITS = RequestLimits()


def limits_of(info: ValidationInfo) -> RequestLimits:
    """The limits validation runs under: `model_validate(params, context=limits)`."""
    return info.context if isinstance(info.context, RequestLimits) else _DEFAULT_LIMITS


class WireParams(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class HistoryLengthCapped(WireParams):
    """Params with a `historyLength`, capped at A2A_MAX_HISTORY_LENGTH."""

    history_length: int | None = Field(None, ge=0)

    @field_validator("history_length")
    @classmethod
    def _history_length_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        limits_of(info).check_history_length(value)
        return value


class PushAuthenticationParams(WireParams):
    scheme: str = Field(min_length=1)
    credentials: str | None = None


class PushConfigParams(WireParams):
    """A TaskPushNotificationConfig (Create, or inline in a send's configuration)."""

    task_id: str | None = None
    id: str | None = None
    url: str = Field(min_length=1)
    token: str | None = None
    authentication: PushAuthenticationParams | None = None
    tenant: str | None = None


class PushConfigRefParams(WireParams):
    """Get/List/Delete: the task, and (but for List) the config."""

    task_id: str = Field(min_length=1)
    id: str | None = None
    tenant: str | None = None


class SendMessageConfiguration(HistoryLengthCapped):
    accepted_output_modes: list[str] | None = None
    return_immediately: bool = False
    task_push_notification_config: PushConfigParams | None = None


class SendMessageParams(WireParams):
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _within_limits(cls, data: Any, info: ValidationInfo) -> Any:
        # On the raw JSON, before any part is validated: refusing costs no more than the parse.
        limits_of(info).check_message_params(data)
        return data


class TaskIdParams(HistoryLengthCapped):
    id: str = Field(min_length=1)
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class ListTasksParams(HistoryLengthCapped):
    context_id: str | None = None
    status: TaskState | None = None
    page_size: int | None = Field(None, ge=1, le=100)
    page_token: str | None = None
    status_timestamp_after: datetime | None = None
    include_artifacts: bool = False
    tenant: str | None = None


def _dump(record: BaseModel) -> dict[str, Any]:
    return record.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"kind"})


def render_task(
    task: Task, *, history_length: int | None = None, include_artifacts: bool = True
) -> dict[str, Any]:
    payload = _dump(task)
    if history_length is not None:
        if history_length == 0:
            payload.pop("history", None)
        else:
            payload["history"] = payload.get("history", [])[-history_length:]
    if not include_artifacts:
        payload.pop("artifacts", None)
    return payload


def render_task_json(
    record: TaskRecord, *, history_length: int | None = None, generation: bool = False
) -> dict[str, Any] | orjson.Fragment:
    """`render_task` of the record's task, for `render_json`. Unshaped, it is the task's stored
    form (which is its 1.0 wire form): the record's own when it has it, else written by
    pydantic-core in one pass, rather than built as a dict and written again (a SendMessage's
    reply is the whole task). `generation` (1.1): with the record's position as its generation."""
    if history_length is None:
        stored = record.stored or dump_task(record.task)
        if generation:
            stored = with_generation(stored, record.position)
        return orjson.Fragment(stored)
    payload = render_task(record.task, history_length=history_length)
    if generation:
        payload["generation"] = str(record.position)
    return payload


def render_entry_v11(entry: JournalEntry) -> bytes:
    """`render_entry` in 1.1: the task, status and artifact events carry their generation."""
    return render_entry_with_generation(render_entry(entry), entry)


def entry_renderer(task_generations: bool) -> Callable[[JournalEntry], bytes]:
    """How a stream (or a webhook) renders its entries: in 1.1 with generations, else in 1.0."""
    return render_entry_v11 if task_generations else render_entry


_STREAM_RESPONSE_FIELDS = {b"status": b"statusUpdate", b"artifact": b"artifactUpdate"}


def render_entry(entry: JournalEntry) -> bytes:
    """A journal entry as 1.0 StreamResponse JSON, written from the stored form (`{"kind":K,`
    then the event's fields; a task event's one field is `task`) without parsing it again."""
    stored, kind = entry.stored, entry.kind.encode()
    prefix = b'{"kind":"' + kind + b'",'
    if not stored.startswith(prefix):
        return render_json(render_event(entry.event))
    if kind in (b"task", b"message"):  # `{"kind":K,"task":{...}}`: the one field is the payload
        return b"{" + stored[len(prefix) :]
    return b'{"' + _STREAM_RESPONSE_FIELDS[kind] + b'":{' + stored[len(prefix) :] + b"}"


def render_event(event: TaskEvent) -> dict[str, Any]:
    """A journal event as a 1.0 StreamResponse."""
    match event:
        case TaskSnapshot(task=task):
            return {"task": render_task(task)}
        case StatusUpdate():
            return {"statusUpdate": _dump(event)}
        case ArtifactUpdate():
            return {"artifactUpdate": _dump(event)}
        case MessageReply(message=message):
            return {"message": _dump(message)}
    raise TypeError(f"not a journal event: {type(event).__name__}")
