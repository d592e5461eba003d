"""RedisCheckpointStore: a running turn's saved state, one string per task, fenced."""

from __future__ import annotations

from typing import Any

from stores.base import CheckpointStore, Fence, LeaseLost
from stores.redis.scripts import SAVE_CHECKPOINT
from stores.redis.store import RedisStore
from stores.redis.support import redis_available, text


class RedisCheckpointStore(RedisStore, CheckpointStore):
    """One string per task, expiring `ttl_s` after it was last saved."""

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        keys = [self._keys.checkpoint(owner, task_id), self._keys.lease(owner, task_id)]
        args: list[Any] = [checkpoint, self._ttl_ms]
        if fence is not None:
            args += [fence.holder, fence.epoch]
        with redis_available():
            saved = await self._batcher.run_script(SAVE_CHECKPOINT, keys, args)
        if not saved:
            assert fence is not None
            raise LeaseLost(task_id, fence)

    async def load(self, task_id: str, *, owner: str) -> str | None:
        with redis_available():
            key = self._keys.checkpoint(owner, task_id)
            raw = await self._batcher.run_args("GET", key)
        return None if raw is None else text(raw)

    async def delete(self, task_id: str, *, owner: str) -> None:
        with redis_available():
            key = self._keys.checkpoint(owner, task_id)
            await self._batcher.run_args("DEL", key)
