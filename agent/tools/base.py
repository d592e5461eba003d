"""Where tools come from: one interface for every source, with a lifecycle.

A `ToolProvider` is entered with the app's lifespan (`start`) and left with it (`aclose`); it lists
its tools for a turn (name, description, JSON schema), runs a call, and says when its list changed
(`changed()`: the card's skills and the next model call see the new list). Local Python functions
are one provider (`FunctionToolProvider`); MCP servers (`agent.tools.mcp`) and other A2A agents
are others. The `Toolbox` merges them: a name two providers share is qualified with the
provider's name (`<provider>_<tool>`), so neither shadows the other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stores.models import Artifact

if TYPE_CHECKING:
    from agent.context import TurnContext
    from agent.extensions import AgentExtension


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function description sent to the model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolError(Exception):
    """A call failed in a way the model should read (the message is its tool result)."""


class ToolNeedsInput(Exception):
    """The call cannot go on without the user (another agent asked a question): the turn suspends
    with `question` (TASK_STATE_INPUT_REQUIRED), and the user's answer goes to the provider's
    `resume` with `state` (JSON, kept in the turn's checkpoint, so any replica can resume it)."""

    def __init__(self, question: str, state: dict[str, Any]) -> None:
        super().__init__(question)
        self.question = question
        self.state = state


_progress: ContextVar[Callable[[str], None] | None] = ContextVar("tool_progress", default=None)
_turn: ContextVar[TurnContext | None] = ContextVar("tool_turn", default=None)


def report_progress(text: str) -> None:
    """From inside a tool call: a progress line the client sees as a WORKING status update
    (`<tool>: <text>`). Outside a call (or with no one listening) it does nothing."""
    listener = _progress.get()
    if listener is not None and text.strip():
        listener(text.strip())


def current_turn() -> TurnContext | None:
    """From inside a tool call (a plain function tool's too): the turn it runs for, with the A2A
    extensions active for it (`extensions`). None outside a call."""
    return _turn.get()


def listen_to_progress(listener: Callable[[str], None], turn: TurnContext | None = None) -> None:
    """Where the current call's `report_progress` lines go, and the turn it runs for (set in the
    task running the call)."""
    _progress.set(listener)
    _turn.set(turn)


class ToolProvider(ABC):
    """A source of tools. Override `list_tools` and `call`; the lifecycle methods are optional."""

    name: str = "tools"

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    async def start(self) -> None:
        """Entered with the app's lifespan (connect, list). A source that cannot start is not a
        reason for the server not to: say why in `status()` and keep trying."""
        return None

    async def aclose(self) -> None:
        """Left with the app's lifespan."""
        return None

    @abstractmethod
    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        """The tools offered for this turn (None: outside a turn, e.g. for the card)."""

    @abstractmethod
    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        """Run one call; the return value is what a function tool may return (text, JSON,
        FileResult, DataResult). Raise ToolError with what the model should read."""

    async def resume(
        self, name: str, state: dict[str, Any], answer: str, turn: TurnContext | None
    ) -> Any:
        """Go on with a call that raised ToolNeedsInput, with the user's answer; returns what
        `call` returns (and may ask again)."""
        raise ToolError(f"the tool {name!r} cannot take an answer")

    async def abandon(self, name: str, state: dict[str, Any]) -> None:
        """The task was canceled while the call waited for the user: let go of what it holds."""
        return None

    def status(self) -> str | None:
        """None when the source is up; else why it is not (the readiness endpoint shows it)."""
        return None

    def extensions(self) -> list[AgentExtension]:
        """The A2A extensions this source implements, declared in the agent card (read once, at
        start-up); a call says which are active (`turn.extensions`)."""
        return []

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def changed(self) -> None:
        """The list of tools changed (a server said so): listeners refresh what they show."""
        for listener in self._listeners:
            listener()


class UnavailableSource(ToolProvider):
    """A configured source that cannot be used at all (its configuration does not parse): no
    tools, and a status saying why, so the server starts and readiness names it."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__()
        self.name = name
        self._reason = reason

    def status(self) -> str | None:
        return self._reason

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return []

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        raise ToolError(f"tool source {self.name!r} is unavailable: {self._reason}")


class ToolLoadError(ValueError):
    """A configured tool reference cannot be imported or described."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    call_id: str
    name: str
    content: str
    ok: bool
    artifacts: tuple[Artifact, ...] = ()
    """Files and data the tool returned (FileResult, DataResult), for the client."""
    needs_input: ToolNeedsInput | None = None
    """The call waits for the user (no result yet): the question, and what resumes it."""
