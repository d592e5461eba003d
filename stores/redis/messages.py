"""RedisMessageStore: a context's conversation, and its one-turn-at-a-time claim, in its slot."""

from __future__ import annotations

from stores.base import MessageStore
from stores.codec import dump_message, load_message
from stores.models import ChatMessage
from stores.redis.scripts import APPEND_MESSAGES, RELEASE_CLAIM, REPLACE_CLAIM
from stores.redis.store import RedisStore
from stores.redis.support import redis_available, text


class RedisMessageStore(RedisStore, MessageStore):
    """A context's conversation as a LIST of ChatMessage JSON, the ids of the units appended to
    it as a SET, its claim as a string; all in the context's slot."""

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        if limit <= 0:
            return []
        with redis_available():
            key = self._keys.conversation(owner, context_id)
            raw = await self._batcher.run_args("LRANGE", key, -limit, -1)
        return [load_message(item) for item in raw]

    async def append(
        self, context_id: str, messages: list[ChatMessage], *, owner: str, unit_id: str
    ) -> bool:
        """One script: record the unit id, and only if it is new, RPUSH all its messages."""
        added, _ = await self._append(owner, context_id, unit_id, messages, 0)
        return bool(added)

    async def window_then_append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        limit: int,
    ) -> list[ChatMessage]:
        _, window = await self._append(owner, context_id, unit_id, messages, limit)
        return [load_message(item) for item in window]

    async def _append(
        self, owner: str, context_id: str, unit_id: str, messages: list[ChatMessage], window: int
    ) -> tuple[int, list[bytes]]:
        """`APPEND_MESSAGES`: whether the unit was new, and the last `window` messages before it
        (none for a window of 0 or less)."""
        keys = [self._keys.conversation(owner, context_id), self._keys.units(owner, context_id)]
        args = [window, unit_id, self._ttl_ms, *[dump_message(message) for message in messages]]
        with redis_available():
            added, before = await self._batcher.run_script(APPEND_MESSAGES, keys, args)
        return added, before

    async def claim(self, context_id: str, task_id: str, *, owner: str) -> str | None:
        with redis_available():
            key, ttl_ms = self._keys.claim(owner, context_id), self._ttl_ms
            holder = await self._batcher.run_args(
                "SET", key, task_id, "NX", "GET", "PX", ttl_ms, get=True
            )
        if holder is None or text(holder) == task_id:
            return None
        return text(holder)

    async def replace_claim(
        self, context_id: str, stale_holder: str, task_id: str, *, owner: str
    ) -> bool:
        with redis_available():
            return bool(
                await self._batcher.run_script(
                    REPLACE_CLAIM,
                    [self._keys.claim(owner, context_id)],
                    [stale_holder, task_id, self._ttl_ms],
                )
            )

    async def release(self, context_id: str, task_id: str, *, owner: str) -> None:
        with redis_available():
            await self._batcher.run_script(
                RELEASE_CLAIM, [self._keys.claim(owner, context_id)], [task_id]
            )
