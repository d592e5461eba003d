"""The token bucket in Redis, so a principal's limit holds across every replica.

One key per principal, `p:rate:{<principal>}` (`<x>` percent-encoded as in stores.redis.keys):
a HASH of `tokens` (float) and `at` (ms, Redis server time). One Lua script reads, refills, takes
and writes it atomically, on the clock of Redis, so replicas with skewed clocks agree. The key
expires once the bucket would be full again: an expired key and a full bucket are the same.
"""

from __future__ import annotations

import math

from stores.rate_limit import RateDecision, RateLimit, RateLimiter
from stores.redis.keys import RedisKeys
from stores.redis.support import LUA_NOW_MS, LuaScript, RedisClient, redis_available

# KEYS[1] the bucket; ARGV: capacity, tokens per ms, TTL (ms). Returns {allowed, wait ms}.
_TAKE = LuaScript(
    LUA_NOW_MS
    + """
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)
local allowed, wait = 0, 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait = math.ceil((1 - tokens) / per_ms)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {allowed, wait}
"""
)


class RedisRateLimiter(RateLimiter):
    """Buckets in Redis, shared by every replica that uses the same prefix.

    Raises StoreUnavailable when Redis cannot be reached (the caller decides whether that refuses
    the request or lets it through).
    """

    def __init__(self, client: RedisClient, limit: RateLimit, *, prefix: str = "a2a") -> None:
        super().__init__(limit)
        self._client = client
        self._keys = RedisKeys(prefix)
        self._per_ms = repr(limit.tokens_per_s / 1000)
        # Refilling from empty takes one period; a second more covers the rounding.
        self._ttl_ms = math.ceil(limit.period_s * 1000) + 1000

    async def acquire(self, key: str) -> RateDecision:
        with redis_available():
            allowed, wait_ms = await _TAKE(
                self._client,
                [self._keys.rate_bucket(key)],
                [self.limit.requests, self._per_ms, self._ttl_ms],
            )
        if int(allowed):
            return RateDecision(allowed=True)
        return RateDecision(allowed=False, retry_after_s=int(wait_ms) / 1000)
