"""The model interface the loop talks to. Adapters: LiteLLM (real models), the offline demo."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.events import Usage
from stores.models import ToolCall


class LLMError(Exception):
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


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMText:
    """A streamed chunk of assistant text."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LLMResponse:
    """The complete response, yielded last."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage


class LLMClient(Protocol):
    """Streams one model response: text chunks as they come, then the whole response."""

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]: ...
