"""Agent: the multi-turn manager. Loads a context's recent conversation, runs one turn, and
commits what the turn adds as complete units."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agent.events import AgentEvent, MessagesCommitted
from agent.loop import AgentLoop
from stores.base import MessageStore
from stores.models import ChatMessage


def starts_on_boundary(window: list[ChatMessage]) -> list[ChatMessage]:
    """Drop leading tool results whose call was cut off by the window: a model rejects them."""
    start = 0
    while start < len(window) and window[start].role == "tool":
        start += 1
    return window[start:]


class Agent:
    def __init__(
        self, loop: AgentLoop, messages: MessageStore, *, history_max_messages: int = 50
    ) -> None:
        self._loop = loop
        self._messages = messages
        self._history_max_messages = history_max_messages

    async def run_turn(
        self, *, owner: str, context_id: str, user_message: ChatMessage
    ) -> AsyncIterator[AgentEvent]:
        # Only the window is read: starting a turn costs the same however long the conversation.
        history = await self._messages.window(
            context_id, owner=owner, limit=self._history_max_messages - 1
        )
        await self._messages.append(context_id, [user_message], owner=owner)
        async for event in self._loop.run([*starts_on_boundary(history), user_message]):
            if isinstance(event, MessagesCommitted):
                await self._messages.append(context_id, event.messages, owner=owner)
            yield event
