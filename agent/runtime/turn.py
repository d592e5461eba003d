"""A turn's data: what runs (`Turn`) and what is saved so that any process can go on with it
(`TurnCheckpoint`)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal

import orjson
from opentelemetry.context import Context
from pydantic import BaseModel

from agent.context import TurnContext
from agent.runtime.chunks import AnswerStream
from agent.state import LoopState
from agent.tools.client import ClientTool
from agent.tracing import Carrier
from stores.base import ContextFence, Fence
from stores.models import Message, Role, Task, TaskRecord


class TurnCheckpoint(BaseModel):
    """What a process needs to go on with a turn: the loop's state and the answer stream's."""

    loop: LoopState
    artifact_id: str
    chunks_sent: int
    trace_carrier: Carrier = {}
    """The turn's trace context, so the turn goes on in the same trace wherever it resumes."""
    extensions: list[str] = []
    """The A2A extensions active for the turn, so that they stay on wherever it resumes."""

    @staticmethod
    def saved(
        loop_state: str,
        *,
        artifact_id: str,
        chunks_sent: int,
        trace_carrier: Carrier,
        extensions: frozenset[str] = frozenset(),
    ) -> str:
        """The stored form (`model_dump_json`) of a checkpoint of `loop_state`, itself already
        in its stored form (`CheckpointReached.saved`): written around it, not parsed again."""
        checkpoint = {
            "loop": orjson.Fragment(loop_state),
            "artifact_id": artifact_id,
            "chunks_sent": chunks_sent,
            "trace_carrier": trace_carrier,
            "extensions": sorted(extensions),
        }
        return orjson.dumps(checkpoint).decode()


class TurnRequested(BaseModel):
    """What a new turn's request brought that its task does not hold, kept in its checkpoint's
    place until the turn's first checkpoint replaces it: a process that takes over a turn that
    never began (its replica died right after accepting it) starts it as it was asked, with the
    same extensions on, the client's tools, and in the client's trace."""

    not_begun: Literal[True]
    """What tells it from a checkpoint in the same place (required: a checkpoint, whose other
    fields it would ignore, does not read as one)."""
    trace_carrier: Carrier = {}
    extensions: list[str] = []
    client_tools: list[ClientTool] = []

    @property
    def needed(self) -> bool:
        """Anything a takeover would lose without it (else nothing is written)."""
        return bool(self.trace_carrier or self.extensions or self.client_tools)

    @staticmethod
    def read(saved: str | None) -> TurnRequested | None:
        if saved is None:
            return None
        try:
            return TurnRequested.model_validate_json(saved)
        except ValueError:
            return None


@dataclass(kw_only=True)
class TurnStart:
    """A turn about to start here: a reserved slot and the task's lease (`TaskRunner.starting`)."""

    task_id: str
    owner: str
    fence: Fence | None = None
    launched: bool = False
    let_lapse: bool = False
    """Leave the lease to lapse rather than release it: a creation the store did not answer may
    still land, and the sweep that finds the lapsed lease then finds the task (released, the
    task would be one no replica ever runs)."""


@dataclass(slots=True)
class TurnCalls:
    """The turn's model and tool calls, counted for its report and metrics."""

    model_calls: int = 0
    tool_calls: int = 0
    model_call_started: float | None = None  # monotonic time of the model call under way

    def model_call_ended(self) -> float:
        """How long the model call under way took (0 if none was)."""
        started, self.model_call_started = self.model_call_started, None
        return time.monotonic() - started if started is not None else 0.0


@dataclass(kw_only=True)
class Turn:
    """One task's turn as it runs in this process (built by `TurnPublisher.turn`)."""

    # Whose turn it is, and what it has made so far (the publisher's to change).
    task: Task
    owner: str
    fence: Fence
    answer: AnswerStream
    client_tools: list[ClientTool] = field(default_factory=list)  # declared with the message
    trace_carrier: Carrier = field(default_factory=dict)  # the parent: the client's, or saved
    extensions: frozenset[str] = frozenset()  # active A2A extensions: the request's, or saved
    trace: Context | None = None  # this process's `agent.turn` span, once started
    calls: TurnCalls = field(default_factory=TurnCalls)
    settled: TaskRecord | None = None  # the snapshot that ended or paused the turn, once stored

    # Where it is in its life here (the runner's, but for a suspension the publisher records).
    holds_lease: bool = True  # False once released (the turn suspended or ended) or lost
    cancel_requested: bool = False
    suspended: bool = False
    finished: bool = False
    # Waiters for the turn to be over here (TaskRunner.until_local_turn_ends), woken by the
    # turn's last step.
    end_waiters: list[asyncio.Future[None]] = field(default_factory=list)

    @property
    def context(self) -> TurnContext:
        user = next((m for m in reversed(self.task.history) if m.role == Role.USER), None)
        return TurnContext(
            owner=self.owner,
            context_id=self.task.context_id,
            task_id=self.task.id,
            trace=self.trace,
            message_id=user.message_id if user is not None else None,
            call_depth=_call_depth(user),
            extensions=self.extensions,
            fence=ContextFence(self.task.id, self.fence),
        )


def _call_depth(message: Message | None) -> int:
    """The depth an incoming message says it was sent at (metadata `a2aCallDepth`; 0 if none)."""
    depth = (message.metadata or {}).get("a2aCallDepth") if message is not None else None
    return depth if isinstance(depth, int) and depth >= 0 else 0
