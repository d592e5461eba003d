"""A2A 1.0 (ProtoJSON) wire form: request params in, StreamResponse / Task JSON out.

Our records already carry the 1.0 camelCase aliases, so rendering is a dump plus the few
response-shaping rules (historyLength, includeArtifacts). Params accept camelCase and snake_case.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from stores.base import TaskPage
from stores.models import (
    ArtifactUpdate,
    Message,
    StatusUpdate,
    Task,
    TaskEvent,
    TaskSnapshot,
    TaskState,
)


class WireParams(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class SendMessageConfiguration(WireParams):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = Field(None, ge=0)
    return_immediately: bool = False
    task_push_notification_config: dict[str, Any] | None = None


class SendMessageParams(WireParams):
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class TaskIdParams(WireParams):
    id: str = Field(min_length=1)
    history_length: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class ListTasksParams(WireParams):
    context_id: str | None = None
    status: TaskState | None = None
    page_size: int | None = Field(None, ge=1, le=100)
    page_token: str | None = None
    history_length: int | None = Field(None, ge=0)
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


def render_event(event: TaskEvent) -> dict[str, Any]:
    """A journal event as a 1.0 StreamResponse."""
    match event:
        case TaskSnapshot(task=task):
            return {"task": render_task(task)}
        case StatusUpdate():
            return {"statusUpdate": _dump(event)}
        case ArtifactUpdate():
            return {"artifactUpdate": _dump(event)}


def render_task_page(
    page: TaskPage, *, page_size: int, history_length: int | None, include_artifacts: bool
) -> dict[str, Any]:
    return {
        "tasks": [
            render_task(task, history_length=history_length, include_artifacts=include_artifacts)
            for task in page.tasks
        ],
        "nextPageToken": page.next_page_token,
        "pageSize": page_size,
        "totalSize": page.total_size,
    }
