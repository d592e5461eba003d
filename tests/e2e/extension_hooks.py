"""Hooks loaded by the extension tests' servers via AGENT_HOOKS: what a turn's hooks see."""

from __future__ import annotations

from typing import Any

from agent.hooks import Hooks, TurnContext

SEEN_KEY = "extensionsSeenByHooks"


class ExtensionsSeen(Hooks):
    """Puts the extensions active for the turn, as every hook sees them, on the answer."""

    async def answer_metadata(self, turn: TurnContext, answer: str) -> dict[str, Any] | None:
        return {SEEN_KEY: sorted(turn.extensions)}
