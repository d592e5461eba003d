"""In-memory conversations and their one-turn-at-a-time claims."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import islice

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ClaimHolder,
    ContextFence,
    Fence,
    LeaseLost,
    MessageStore,
)
from stores.codec import dump_message, load_message
from stores.memory.support import MAX_TASKS, IdleSweeper, room_to_make
from stores.models import ChatMessage

logger = logging.getLogger(__name__)


@dataclass
class _Conversation:
    messages: list[bytes] = field(default_factory=list)  # stored form, as in Redis
    units: dict[str, None] = field(default_factory=dict)  # in order: the oldest go first
    touched: float = 0.0


@dataclass
class _Claim:
    task_id: str
    fence: Fence | None  # the latest fence of its task (None: claimed without one)

    def admits(self, fence: Fence) -> bool:
        """Its task may write under `fence`: the claim has none yet, an earlier one, or this
        one (epochs only grow); the fence is recorded."""
        held = self.fence
        if held is not None and (
            held.epoch > fence.epoch or (held.epoch == fence.epoch and held != fence)
        ):
            return False
        self.fence = fence
        return True


class InMemoryMessageStore(MessageStore):
    """Conversations by context, at most `max_conversations` of them (as many as the task store
    keeps tasks, so the store stays bounded under sustained load, not only after the TTL):
    beyond, the ones written to longest ago go, a hundredth of the limit at once, except a
    conversation a turn is running in (its context claimed).

    With `window_max` (the most messages a turn reads, AGENT_HISTORY_MAX_MESSAGES), each keeps
    its last `window_max` to `2 * window_max` messages and as many unit ids (a retried append is
    of a recent unit): a context that goes on for thousands of turns does not grow the process
    with messages no turn will read again."""

    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TASK_TTL_S,
        max_conversations: int = MAX_TASKS,
        window_max: int | None = None,
    ) -> None:
        self._sweeper = IdleSweeper(ttl_s)
        # Least recently written first: a write moves its conversation to the end.
        self._conversations: OrderedDict[tuple[str, str], _Conversation] = OrderedDict()
        self._claims: dict[tuple[str, str], _Claim] = {}
        self._max_conversations = max_conversations
        self._window_max = window_max

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        conversation = self._conversations.get((owner, context_id))
        if conversation is None or limit <= 0:
            return []
        return [load_message(raw) for raw in conversation.messages[-limit:]]

    async def append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        fence: ContextFence | None = None,
    ) -> bool:
        key = (owner, context_id)
        if fence is not None:
            claim = self._claims.get(key)
            if claim is None or claim.task_id != fence.task_id or not claim.admits(fence.fence):
                raise LeaseLost(fence.task_id, fence.fence)
        self._sweeper.sweep(self._conversations)
        conversation = self._conversations.get(key)
        if conversation is None:
            if len(self._conversations) >= self._max_conversations:
                self._make_room()
            conversation = self._conversations[key] = _Conversation()
        else:
            self._conversations.move_to_end(key)
        conversation.touched = time.monotonic()
        if unit_id in conversation.units:
            return False
        conversation.units[unit_id] = None
        conversation.messages.extend(dump_message(message) for message in messages)
        if self._window_max is not None:
            self._trim(conversation, self._window_max)
        return True

    @staticmethod
    def _trim(conversation: _Conversation, keep: int) -> None:
        """Down to the last `keep` messages (and unit ids) once there are twice as many: a
        trim every `keep` messages, not one per append."""
        if len(conversation.messages) > 2 * keep:
            del conversation.messages[:-keep]
        if len(conversation.units) > 2 * keep:
            conversation.units = dict.fromkeys(
                islice(conversation.units, len(conversation.units) - keep, None)
            )

    def _make_room(self) -> None:
        wanted = room_to_make(len(self._conversations), self._max_conversations)
        dropped = [
            key for key in islice(self._conversations, wanted * 2) if key not in self._claims
        ][:wanted]
        for key in dropped:
            del self._conversations[key]
        if dropped:  # else every one of the oldest is in a running turn: the limit waits
            logger.info(
                "dropped %d conversations written to longest ago: the store is at its limit",
                len(dropped),
            )

    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        key = (owner, context_id)
        claim = self._claims.get(key)
        if claim is None:
            self._claims[key] = _Claim(task_id, fence)
            return None
        if claim.task_id != task_id:
            return ClaimHolder(claim.task_id, fenced=claim.fence is not None)
        if fence is not None and not claim.admits(fence):
            raise LeaseLost(task_id, fence)
        return None

    async def replace_claim(
        self,
        context_id: str,
        stale_holder: str,
        task_id: str,
        *,
        owner: str,
        fence: Fence | None = None,
    ) -> bool:
        key = (owner, context_id)
        claim = self._claims.get(key)
        if claim is None or claim.task_id != stale_holder:
            return False
        self._claims[key] = _Claim(task_id, fence)
        return True

    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        key = (owner, context_id)
        claim = self._claims.get(key)
        if claim is None or claim.task_id != task_id:
            return False
        if fence is not None and not claim.admits(fence):
            return False
        del self._claims[key]
        return True

    def forget_task(self, owner: str, task_id: str, context_id: str) -> None:
        """The task store dropped the task (idle past the TTL while waiting for input): its
        claim on the context goes with it. The conversation stays: it is the context's, which
        a client may still continue (it goes by its own bound)."""
        claim = self._claims.get((owner, context_id))
        if claim is not None and claim.task_id == task_id:
            del self._claims[(owner, context_id)]
