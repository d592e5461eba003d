"""LoopState: everything a turn knows, serializable, so a turn can stop and go on later.

Saved as a checkpoint before each model call and after each model response and tool result. The
same state resumes a turn suspended for a human (ask_user, approvals) and a turn whose process died.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.tools.client import ClientTool
from stores.models import ChatMessage, Thinking, ToolCall


class SavedToolResult(BaseModel):
    call_id: str
    name: str
    content: str
    ok: bool


class ToolInput(BaseModel):
    """A tool call waiting for the user (another agent asked): its question, what resumes it
    (the provider's state), and the answer once given."""

    question: str
    state: dict[str, Any]
    answer: str | None = None


class Awaiting(BaseModel):
    """What the suspended turn waits for from the client."""

    kind: Literal["ask_user", "approval", "client_tools", "tool_input"]
    call: ToolCall
    question: str = ""
    calls: list[ToolCall] = Field(default_factory=list)
    """client_tools: every call the client is to run (`call` is the first)."""


class ToolFailureStreak(BaseModel):
    error: str
    count: int


class LoopState(BaseModel):
    conversation: list[ChatMessage]
    """What the model sees, oldest first: history window, user message, this turn's units."""
    iterations: int = 0
    """Model calls made so far in this turn."""
    answer: list[str] = Field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    """The priced calls' cost; the turn's only while `unpriced_calls` is 0."""
    unpriced_calls: int = 0
    model: str | None = None
    """The model that answered the last call (a fallback's, when it answered)."""
    tool_calls_made: int = 0
    pending_content: str | None = None
    """Text of the assistant message whose tool calls are still being answered."""
    pending_thinking: Thinking | None = None
    """The reasoning of that message: it goes back with the tool round (its signatures too)."""
    pending_calls: list[ToolCall] = Field(default_factory=list)
    results: dict[str, SavedToolResult] = Field(default_factory=dict)
    approved: list[str] = Field(default_factory=list)
    """Ids of pending calls a human or a hook already allowed."""
    awaiting: Awaiting | None = None
    finish_result: str | None = None
    failure_streaks: dict[str, ToolFailureStreak] = Field(default_factory=dict)
    client_tools: list[ClientTool] = Field(default_factory=list)
    """Tools the client declared for this task (it runs them; the turn waits for results)."""
    tool_inputs: dict[str, ToolInput] = Field(default_factory=dict)
    """Pending calls that wait for the user, by call id (ToolNeedsInput)."""
