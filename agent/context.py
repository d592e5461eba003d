"""TurnContext: who and what a turn is for, handed to hooks, tools and the model client."""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry.context import Context

from stores.base import ContextFence


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnContext:
    owner: str
    context_id: str
    task_id: str
    trace: Context | None = field(default=None, compare=False)
    """The turn's trace context (its `agent.turn` span), parent of the turn's other spans."""
    message_id: str | None = None
    """The id of the client's message that started (or resumed) the turn."""
    call_depth: int = 0
    """How many agents deep this turn runs: 0 for a client's message; an agent calling another
    agent sends its own depth + 1 (message metadata `a2aCallDepth`)."""
    extensions: frozenset[str] = frozenset()
    """The URIs of the A2A extensions active for the turn: those the agent declares that the
    request which started (or resumed) it listed in `A2A-Extensions`. A hook or tool that
    implements an extension acts only when its URI is here."""
    fence: ContextFence | None = field(default=None, compare=False)
    """What the turn's conversation writes carry, opaque to the engine: the store takes them
    only while the turn's task holds the context under its lease (None: unfenced)."""
