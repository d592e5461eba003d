"""Push-notification configs in Redis: one hash per task (config id -> stored JSON) and the
delivery cursor beside it, both in the task's hash-tag slot and expiring with the task's TTL."""

from __future__ import annotations

import builtins

from stores.base import PushConfigStore
from stores.models import PushConfig
from stores.redis.keys import RedisKeys
from stores.redis.support import LuaScript, RedisClient, redis_available

# The cursor only moves forward: a replica that took the task over and one still finishing a
# delivery may both record progress, and the earlier position must not win.
_ADVANCE = LuaScript("""
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
""")


class RedisPushConfigStore(PushConfigStore):
    def __init__(self, client: RedisClient, *, prefix: str = "a2a", ttl_s: float = 86_400) -> None:
        self._redis = client
        self._keys = RedisKeys(prefix)
        self._ttl_ms = int(ttl_s * 1000)

    async def put(self, config: PushConfig, *, owner: str) -> None:
        key = self._keys.push_configs(owner, config.task_id)
        stored = config.model_dump_json(by_alias=True, exclude_none=True)
        with redis_available():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, config.id, stored)
                pipe.pexpire(key, self._ttl_ms)
                await pipe.execute()

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        with redis_available():
            raw = await self._redis.hget(self._keys.push_configs(owner, task_id), config_id)
        return None if raw is None else PushConfig.model_validate_json(raw)

    async def list(self, task_id: str, *, owner: str) -> builtins.list[PushConfig]:
        with redis_available():
            stored = await self._redis.hvals(self._keys.push_configs(owner, task_id))
        return [PushConfig.model_validate_json(raw) for raw in stored]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        with redis_available():
            removed = await self._redis.hdel(self._keys.push_configs(owner, task_id), config_id)
        return bool(removed)

    async def cursor(self, task_id: str, *, owner: str) -> int:
        with redis_available():
            raw = await self._redis.get(self._keys.push_cursor(owner, task_id))
        return int(raw) if raw is not None else 0

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        key = self._keys.push_cursor(owner, task_id)
        with redis_available():
            await _ADVANCE(self._redis, [key], [position, self._ttl_ms])
