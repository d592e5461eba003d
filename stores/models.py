"""Domain records: A2A tasks and their events, and the conversation messages a model sees.

These are our internal models, not a wire format. Field names are snake_case; the alias generator
gives them the camelCase names of the A2A 1.0 ProtoJSON form, so the 1.0 binding is a near-identity
translation and other generations (0.3) translate at the edge. Enum values use the 1.0 proto names.
"""

from __future__ import annotations

import enum
import functools
import json
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    model_validator,
)
from pydantic.alias_generators import to_camel

Generation = Literal["1.0", "0.3"]
"""An A2A protocol generation this server speaks (1.x minors are served as 1.0)."""


class Record(BaseModel):
    """Base for every record: camelCase aliases, snake_case accepted, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=False
    )


def utc_now() -> datetime:
    """Now, to the millisecond: the precision timestamps have on the wire and in every store."""
    # From whole milliseconds as a float: a double holds today's epoch seconds to ~0.2 us, so
    # rounding to the microsecond gives the millisecond exactly (3x cheaper than now + replace).
    return datetime.fromtimestamp(time.time_ns() // 1_000_000 / 1000, UTC)


@functools.lru_cache(maxsize=256)
def iso_timestamp(moment: datetime) -> str:
    """ISO-8601 UTC with millisecond precision and a Z suffix (A2A spec section 5.6.1). Cached:
    a status's timestamp is written several times (its event, the snapshot, the reply)."""
    # isoformat truncates to the millisecond, as utc_now does; twice as fast as strftime.
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaskState(enum.StrEnum):
    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_interrupted(self) -> bool:
        return self in _INTERRUPTED

    @property
    def is_active(self) -> bool:
        """A turn is (or is about to be) running for the task."""
        return self in (TaskState.SUBMITTED, TaskState.WORKING)


_TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED}
)
_INTERRUPTED = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class Role(enum.StrEnum):
    UNSPECIFIED = "ROLE_UNSPECIFIED"
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


class Part(Record):
    """One piece of content: exactly one of text, raw (base64), url or data."""

    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = None
    media_type: str | None = None
    filename: str | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one_content(self) -> Part:
        # Counted first, named only for the error: every part of every message and answer
        # passes here (the list of names cost a send ~1% of its CPU).
        given = self.__pydantic_fields_set__
        if (self.text is not None) + (self.raw is not None) + (self.url is not None) + (
            "data" in given
        ) != 1:
            present = [name for name in ("text", "raw", "url") if getattr(self, name) is not None]
            if "data" in given:
                present.append("data")
            raise ValueError(
                "a part must have exactly one of 'text', 'raw', 'url' or 'data'"
                f" (got {present or 'none'})"
            )
        return self


class Message(Record):
    message_id: str = Field(min_length=1)
    role: Role
    parts: list[Part] = Field(min_length=1)
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    def text(self) -> str:
        """The message's text parts joined; data parts rendered as JSON."""
        return "\n".join(part_as_text(part) for part in self.parts)


def part_as_text(part: Part) -> str:
    if part.text is not None:
        return part.text
    if "data" in part.model_fields_set:
        return json.dumps(part.data)
    if part.url is not None:
        return f"[file: {part.filename or part.url} ({part.media_type or 'unknown type'})]"
    return f"[file: {part.filename or 'inline'} ({part.media_type or 'unknown type'})]"


Timestamp = Annotated[datetime, PlainSerializer(iso_timestamp, when_used="json")]


class TaskStatus(Record):
    state: TaskState
    message: Message | None = None
    timestamp: Timestamp = Field(default_factory=utc_now)


class Artifact(Record):
    artifact_id: str
    parts: list[Part] = Field(min_length=1)
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task(Record):
    """The latest snapshot of a task as clients see it."""

    id: str
    context_id: str
    status: TaskStatus
    artifacts: list[Artifact] = Field(default_factory=list)
    history: list[Message] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None


class StatusUpdate(Record):
    kind: Literal["status"] = "status"
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: dict[str, Any] | None = None


class ArtifactUpdate(Record):
    kind: Literal["artifact"] = "artifact"
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class TaskSnapshot(Record):
    """A journal entry carrying a whole task (the first event of a task's journal)."""

    kind: Literal["task"] = "task"
    task: Task


class PushAuthentication(Record):
    scheme: str
    credentials: str | None = None


class PushConfig(Record):
    """Where (and how) to POST a task's events: a push-notification config of one task."""

    id: str
    task_id: str
    url: str
    token: str | None = None
    authentication: PushAuthentication | None = None
    generation: Generation = "1.0"
    """The protocol generation of the client that created it: what its webhook is sent."""
    task_generations: bool = False
    """Created by a 1.1 client: its webhook's events carry their generation (a replica of an
    earlier version ignores the field, and sends them as 1.0 does)."""

    @property
    def dialect(self) -> str:
        """What its webhook bodies are rendered as: "1.1", "1.0" or "0.3"."""
        return "1.1" if self.task_generations else self.generation


class MessageReply(Record):
    """A reply that is a Message, not a task: the one event of a turn answered directly (a
    hook's `reply_directly`). It is never journaled: there is no task to journal it in."""

    kind: Literal["message"] = "message"
    message: Message


TaskEvent = Annotated[
    StatusUpdate | ArtifactUpdate | TaskSnapshot | MessageReply, Field(discriminator="kind")
]
_EVENTS: TypeAdapter[TaskEvent] = TypeAdapter(TaskEvent)  # their stored form: see stores.codec


class JournalEntry:
    """An event at its position in a task's journal (the SSE `id:`).

    Stores hand entries out in the form they keep them, the event's stored JSON (see
    `stores.codec`), with its kind and, for status and task events, its state: all that a reader
    waiting for the end needs, and all that a stream relaying the event needs to write it. The
    event object is parsed only when someone asks for it, once.
    """

    __slots__ = ("_event", "_stored", "kind", "position", "state")

    def __init__(
        self,
        *,
        position: int,
        event: TaskEvent | None = None,
        stored: bytes | None = None,
        kind: str | None = None,
        state: TaskState | None = None,
    ) -> None:
        if event is None and stored is None:
            raise ValueError("a journal entry needs its event or its stored form")
        self.position = position
        self._event = event
        self._stored = stored
        if event is not None:
            kind, state = event.kind, event_state(event)
        self.kind: str = kind or ""
        self.state: TaskState | None = state

    @property
    def event(self) -> TaskEvent:
        if self._event is None:
            self._event = _EVENTS.validate_json(self._stored or b"")
        return self._event

    @property
    def stored(self) -> bytes:
        """The event in its stored form (`kind` first)."""
        if self._stored is None:
            self._stored = _EVENTS.dump_json(self.event, by_alias=True, exclude_none=True)
        return self._stored

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JournalEntry):
            return NotImplemented
        return self.position == other.position and self.event == other.event

    def __hash__(self) -> int:
        return hash((self.position, self.kind))

    def __repr__(self) -> str:
        return f"JournalEntry(position={self.position}, kind={self.kind!r}, state={self.state})"


def event_state(event: TaskEvent) -> TaskState | None:
    """The state a status or task event reports; None for an artifact update."""
    if isinstance(event, StatusUpdate):
        return event.status.state
    if isinstance(event, TaskSnapshot):
        return event.task.status.state
    return None


class TaskRecord(BaseModel):
    """A stored task: the snapshot plus the journal position it reflects."""

    task: Task
    owner: str
    position: int
    stored: bytes | None = None
    """`task` in its stored form (`stores.codec`) as the store wrote or read it, when it had it
    at hand: what the task was at `position`, even after the holder of `task` changed it."""


class TaskBytes(NamedTuple):
    """A stored task as a reader that only writes it out needs it: its stored form (which is
    its A2A 1.0 wire form) and the journal position it reflects, no task built."""

    stored: bytes
    position: int


# --- The conversation the model sees (per context) ---------------------------------------------


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # JSON text, as the model produced it


class Thinking(BaseModel):
    """The model's reasoning in one assistant response, kept with the message it produced.

    `blocks` are the provider's own (Anthropic `thinking` with its `signature`, and
    `redacted_thinking`), exactly as LiteLLM gave them: they go back unchanged, or the provider
    refuses the next request of a tool round. `text` is the reasoning as readable text (what a
    client may be shown); it is never part of the answer.
    """

    text: str = ""
    blocks: list[dict[str, Any]] = Field(default_factory=list)


class ChatMessage(BaseModel):
    """One message of a conversation in the model's terms (user, assistant, tool).

    A message stored before `thinking` existed loads with none; a reader that predates it
    ignores the field (pydantic's default), so it reads the message without its reasoning.
    """

    role: Literal["user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    thinking: Thinking | None = None
