"""The model interface the loop talks to. Adapters: LiteLLM (real models), the offline demo."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.errors import AgentError
from agent.events import Usage
from stores.models import Thinking, ToolCall

if TYPE_CHECKING:
    from agent.context import TurnContext


class LLMError(AgentError):
    """The model call failed; `transient` errors were already retried by the adapter.

    The message is what the client sees in the task's status: a short classified text, never
    the provider's own (which the adapter logs).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    turn: TurnContext | None = field(default=None, compare=False)
    """The turn the call belongs to (task, context, owner, the message that started it), for
    models that route or script on it; adapters of real models ignore it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMText:
    """A streamed chunk of assistant text."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMReasoning:
    """A streamed chunk of the model's reasoning (thinking) text: never part of the answer."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMResponse:
    """The complete response, yielded last."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage
    thinking: Thinking | None = None
    """The response's reasoning (text and the provider's blocks), when the model produced any."""


class LLMClient(ABC):
    """A model: streams one response, text chunks as they come, then the whole response.

    Only `stream` is required; the rest have defaults a real adapter overrides.
    """

    @abstractmethod
    def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMReasoning | LLMResponse]:
        """The response, streamed. A stream its caller leaves before the end (its turn stopped)
        is closed at once if it has an `aclose` (an async generator does): the place to end the
        call (cut its connection: the provider stops generating)."""

    async def warm_up(self) -> None:
        """Load what the first call would (off the request path); ready when it returns."""
        return None

    def context_window(self) -> int | None:
        """The model's input window in tokens, when known (the history is fitted to it)."""
        return None

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        """Tokens the messages take in this model's count (used only with a known window)."""
        return sum(len(str(message.get("content") or "")) // 4 + 4 for message in messages)


@asynccontextmanager
async def closing_stream(stream: AsyncIterator[Any]) -> AsyncGenerator[None, None]:
    """`async with closing_stream(stream):` closes the model's stream when the block is left,
    however it is left, if the stream can be closed (`contextlib.aclosing` for any iterator)."""
    try:
        yield
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
