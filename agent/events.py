"""What happens during a turn, as typed facts. The A2A layer maps them to task events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agent.state import LoopState
from stores.models import Artifact, ChatMessage

if TYPE_CHECKING:
    from agent.state import Awaiting


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    """Of the completion tokens, those spent reasoning (where the provider reports them)."""
    cache_read_tokens: int = 0
    """Of the prompt tokens, those read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Of the prompt tokens, those written to the provider's prompt cache."""
    cost_usd: float | None = None
    """What it cost by LiteLLM's price map; None when a price is unknown (never a made-up 0)."""
    model: str | None = None
    """The model that answered (of a turn: its last call's), as configured."""

    def __add__(self, other: Usage) -> Usage:
        cost = None
        if self.cost_usd is not None and other.cost_usd is not None:
            cost = self.cost_usd + other.cost_usd
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=cost,
            model=other.model or self.model,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStarted:
    kind: Literal["turn_started"] = "turn_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class IterationStarted:
    iteration: int
    kind: Literal["iteration_started"] = "iteration_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    """A chunk of answer text, as the model produces it."""

    text: str
    kind: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningDelta:
    """A chunk of the model's reasoning text, as it produces it (only with AGENT_REASONING=stream):
    for the client to watch, never part of the answer."""

    text: str
    kind: Literal["reasoning_delta"] = "reasoning_delta"


TextSink = Callable[[str], Awaitable[None]]
"""Takes a turn's streamed text where it would be a TextDelta event (`AgentLoop.run`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMCallStarted:
    iteration: int
    kind: Literal["llm_call_started"] = "llm_call_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMCallFinished:
    iteration: int
    usage: Usage
    finish_reason: str | None
    kind: Literal["llm_call_finished"] = "llm_call_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallStarted:
    call_id: str
    name: str
    arguments: str = ""  # as the model wrote them (JSON)
    kind: Literal["tool_call_started"] = "tool_call_started"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallFinished:
    call_id: str
    name: str
    ok: bool
    result: str = ""  # what the model reads (the start of it)
    duration_s: float = 0.0
    kind: Literal["tool_call_finished"] = "tool_call_finished"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolProgress:
    """A running call said how it is getting on (`report_progress`: a sub-agent's status)."""

    call_id: str
    name: str
    text: str
    kind: Literal["tool_progress"] = "tool_progress"


@dataclass(frozen=True, kw_only=True, slots=True)
class ArtifactProduced:
    """A tool returned a file or data: an artifact of the task, for the client."""

    artifact: Artifact
    kind: Literal["artifact_produced"] = "artifact_produced"


@dataclass(frozen=True, kw_only=True, slots=True)
class MessagesCommitted:
    """A complete unit of conversation (e.g. tool calls with all their results), to be stored."""

    unit_id: str
    messages: list[ChatMessage] = field(default_factory=list)
    kind: Literal["messages_committed"] = "messages_committed"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnCompleted:
    answer: str
    usage: Usage
    llm_calls: int
    tool_calls: int
    metadata: dict[str, Any] | None = None
    """The answer's metadata, from the hooks (`Hooks.answer_metadata`)."""
    kind: Literal["turn_completed"] = "turn_completed"


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnFailed:
    reason: str
    usage: Usage
    llm_calls: int
    tool_calls: int
    rejected: bool = False
    """The agent declined the task (a tool raised TaskRejected): REJECTED, not FAILED."""
    kind: Literal["turn_failed"] = "turn_failed"


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointReached:
    """The loop's state at a safe point, in the JSON form a checkpoint stores (so it stays what
    the state was, whatever the loop does next); persisting it lets the turn resume from here.
    Written once, where the state is reached: a copy to serialize later cost as much again."""

    saved: str
    kind: Literal["checkpoint"] = "checkpoint"

    @classmethod
    def of(cls, state: LoopState) -> CheckpointReached:
        return cls(saved=state.model_dump_json())

    @property
    def state(self) -> LoopState:
        """The state at the safe point, read back (a new object each time)."""
        return LoopState.model_validate_json(self.saved)


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnSuspended:
    """The turn waits for the client (a question, or a tool call to approve)."""

    awaiting: Awaiting
    kind: Literal["turn_suspended"] = "turn_suspended"


AgentEvent = (
    TurnStarted
    | IterationStarted
    | TextDelta
    | ReasoningDelta
    | LLMCallStarted
    | LLMCallFinished
    | ToolCallStarted
    | ToolCallFinished
    | ToolProgress
    | ArtifactProduced
    | MessagesCommitted
    | TurnCompleted
    | TurnFailed
    | CheckpointReached
    | TurnSuspended
)
