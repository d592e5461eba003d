"""A hook and a tool loaded by the extension tests' servers (AGENT_HOOKS, AGENT_TOOLS): what a
turn's hooks and tools see of the A2A extensions active for it."""

from __future__ import annotations

from typing import Any

from agent.hooks import Hooks, TurnContext
from agent.tools.base import current_turn

SEEN_KEY = "extensionsSeenByHooks"


class ExtensionsSeen(Hooks):
    """Puts the extensions active for the turn, as every hook sees them, on the answer."""

    async def answer_metadata(self, turn: TurnContext, answer: str) -> dict[str, Any] | None:
        return {SEEN_KEY: sorted(turn.extensions)}


def active_extensions() -> list[str]:
    """The A2A extensions active for the turn that calls this tool."""
    turn = current_turn()
    return sorted(turn.extensions) if turn is not None else ["no turn"]
