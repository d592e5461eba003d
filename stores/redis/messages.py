"""RedisMessageStore: a context's conversation, and its one-turn-at-a-time claim, in its slot."""

from __future__ import annotations

from typing import Any

from stores.base import ClaimHolder, ContextFence, Fence, LeaseLost, MessageStore
from stores.codec import dump_message, load_message
from stores.models import ChatMessage
from stores.redis.conversation_scripts import (
    APPEND_TOUCHING_MESSAGES,
    CLAIM_CONTEXT,
    RELEASE_FENCED_CLAIM,
    REPLACE_FENCED_CLAIM,
)
from stores.redis.store import RedisStore
from stores.redis.support import redis_available, text


class RedisMessageStore(RedisStore, MessageStore):
    """A context's conversation as a LIST of ChatMessage JSON, the ids of the units appended to
    it as a SET, its claim as a string and the claim's fence as a hash; all in the context's slot
    (stores.redis.conversation_scripts)."""

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        if limit <= 0:
            return []
        with redis_available():
            key = self._keys.conversation(owner, context_id)
            raw = await self._batcher.run_args("LRANGE", key, -limit, -1)
        return [load_message(item) for item in raw]

    async def append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        fence: ContextFence | None = None,
    ) -> bool:
        """One script: check the fence, record the unit id, and only if it is new, RPUSH all
        its messages."""
        added, _ = await self._append(owner, context_id, unit_id, messages, 0, fence)
        return bool(added)

    async def window_then_append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        limit: int,
        fence: ContextFence | None = None,
    ) -> list[ChatMessage]:
        _, window = await self._append(owner, context_id, unit_id, messages, limit, fence)
        return [load_message(item) for item in window]

    async def _append(
        self,
        owner: str,
        context_id: str,
        unit_id: str,
        messages: list[ChatMessage],
        window: int,
        fence: ContextFence | None,
    ) -> tuple[int, list[bytes]]:
        """`APPEND_TOUCHING_MESSAGES`: whether the unit was new, and the last `window` messages
        before it (none for a window of 0 or less); LeaseLost if the claim refuses the fence."""
        keys = [
            self._keys.conversation(owner, context_id),
            self._keys.units(owner, context_id),
            *self._claim_keys(owner, context_id),
        ]
        fenced = (fence.task_id, fence.fence.holder, fence.fence.epoch) if fence else ("", "", "")
        args = [window, unit_id, self._ttl_ms, *fenced, *map(dump_message, messages)]
        with redis_available():
            reply = await self._batcher.run_script(APPEND_TOUCHING_MESSAGES, keys, args)
        if int(reply[0]) < 0:
            assert fence is not None
            raise LeaseLost(fence.task_id, fence.fence)
        return int(reply[0]), reply[1]

    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        args = [task_id, self._ttl_ms, *_fence_args(fence)]
        with redis_available():
            reply = await self._batcher.run_script(
                CLAIM_CONTEXT, self._claim_keys(owner, context_id), args
            )
        status = int(reply[0])
        if status == 0:
            return None
        if status < 0:
            assert fence is not None
            raise LeaseLost(task_id, fence)
        return ClaimHolder(text(reply[1]), fenced=bool(int(reply[2])))

    async def replace_claim(
        self,
        context_id: str,
        stale_holder: str,
        task_id: str,
        *,
        owner: str,
        fence: Fence | None = None,
    ) -> bool:
        args = [stale_holder, task_id, self._ttl_ms, *_fence_args(fence)]
        with redis_available():
            return bool(
                await self._batcher.run_script(
                    REPLACE_FENCED_CLAIM, self._claim_keys(owner, context_id), args
                )
            )

    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        with redis_available():
            return bool(
                await self._batcher.run_script(
                    RELEASE_FENCED_CLAIM,
                    self._claim_keys(owner, context_id),
                    [task_id, *_fence_args(fence)],
                )
            )

    def _claim_keys(self, owner: str, context_id: str) -> list[str]:
        return [self._keys.claim(owner, context_id), self._keys.claim_fence(owner, context_id)]


def _fence_args(fence: Fence | None) -> tuple[Any, Any]:
    return (fence.holder, fence.epoch) if fence is not None else ("", "")
