"""What an agent's answers carry, read the same way whatever the generation and binding:
`Event(kind, payload, raw, id)` with `kind` one of task, status, artifact, message, and the
1.0 state names (`state_of`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

_STATES_03 = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "TASK_STATE_CANCELLED": "TASK_STATE_CANCELED",  # 0.3 ProtoJSON (HTTP+JSON) spells it so
}
END_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_FAILED",
    "TASK_STATE_REJECTED",
}
INTERRUPTED_STATES = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}


@dataclass(frozen=True)
class Event:
    kind: str  # task | status | artifact | message
    payload: dict[str, Any]
    raw: dict[str, Any]  # the event as the wire carried it (the JSON-RPC result, or the body)
    id: str | None = None  # its SSE id (a journal position on our servers)


def read_event(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, payload) of a result or streamed event of either generation."""
    for key, kind in (
        ("task", "task"),
        ("statusUpdate", "status"),
        ("artifactUpdate", "artifact"),
        ("message", "message"),
        ("msg", "message"),  # 0.3 ProtoJSON (HTTP+JSON)
    ):
        if key in result:
            return kind, result[key]
    kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact"}
    return kinds.get(result.get("kind", ""), "message"), result


def state_of(payload: dict[str, Any]) -> str | None:
    """A task's or status update's state, in 1.0 names."""
    state = (payload.get("status") or {}).get("state")
    return _STATES_03.get(state, state) if isinstance(state, str) else None


def parts_of(holder: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of a message or artifact (`content` in 0.3 ProtoJSON)."""
    return list(holder.get("parts") or holder.get("content") or [])


def text_of(holder: dict[str, Any] | None) -> str:
    """The text parts of a message or artifact, joined."""
    return "".join(
        part["text"] for part in parts_of(holder or {}) if isinstance(part.get("text"), str)
    )


def status_text(payload: dict[str, Any]) -> str:
    return text_of((payload.get("status") or {}).get("message"))


async def sse_lines(response: httpx.Response) -> AsyncIterator[tuple[str | None, str]]:
    """(id, data) of each server-sent event."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event_id, "\n".join(data)
            event_id, data = None, []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("id:"):
            event_id = line[3:].strip()
    if data:
        yield event_id, "\n".join(data)
