"""Agent: the multi-turn manager. Loads a context's recent conversation, runs one turn, and
commits what the turn adds as complete units."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial

from agent.context import TurnContext
from agent.events import AgentEvent, MessagesCommitted, TextSink
from agent.loop import AgentLoop
from agent.retry import persistently
from agent.state import LoopState
from agent.tools.client import ClientTool
from stores.base import MessageStore, StoreUnavailable
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
        self.loop = loop
        self._messages = messages
        self._history_max_messages = history_max_messages

    async def start_turn(
        self,
        turn: TurnContext,
        user_message: ChatMessage,
        *,
        client_tools: list[ClientTool] | None = None,
    ) -> LoopState:
        """Commit the user message and build the turn's starting state (waiting for the store
        while it is unavailable, as every write of a turn does). Every conversation write carries
        `turn.fence`: LeaseLost (never retried) once the turn's task no longer holds the context
        under it, and the turn ends there."""
        # Only the window is read: starting a turn costs the same however long the conversation.
        unit_id, limit = f"{turn.task_id}:user", self._history_max_messages - 1
        try:
            history = await self._messages.window_then_append(
                turn.context_id,
                [user_message],
                owner=turn.owner,
                unit_id=unit_id,
                limit=limit,
                fence=turn.fence,
            )
        except StoreUnavailable:
            # The store may have run it before its answer was lost: commit the unit (once, by its
            # id), then read the window up to it. Nothing follows it (one turn per context).
            await persistently(
                partial(
                    self._messages.append,
                    turn.context_id,
                    [user_message],
                    owner=turn.owner,
                    unit_id=unit_id,
                    fence=turn.fence,
                ),
                what="conversation append",
            )
            window = partial(self._messages.window, turn.context_id, owner=turn.owner)
            history = (await persistently(partial(window, limit=limit + 1), what="history"))[:-1]
        return LoopState(
            conversation=[*starts_on_boundary(history), user_message],
            client_tools=client_tools or [],
        )

    async def run(
        self, turn: TurnContext, state: LoopState, *, on_text: TextSink | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the turn from `state` (new, resumed after input, or recovered from a checkpoint);
        its streamed text to `on_text`, if given (`AgentLoop.run`)."""
        async with aclosing(self.loop.run(state, turn, on_text=on_text)) as events:
            async for event in events:
                if isinstance(event, MessagesCommitted):
                    await persistently(
                        partial(
                            self._messages.append,
                            turn.context_id,
                            event.messages,
                            owner=turn.owner,
                            unit_id=f"{turn.task_id}:{event.unit_id}",
                            fence=turn.fence,
                        ),
                        what="conversation append",
                    )
                yield event
