"""What every Redis store is built from: a client, the prefix of its keys, the TTL they carry and
the batcher its writes share round trips through."""

from __future__ import annotations

from redis.asyncio import Redis

from stores.base import DEFAULT_TASK_TTL_S
from stores.redis.batch import CommandBatcher
from stores.redis.keys import RedisKeys
from stores.redis.support import RedisClient


class RedisStore:
    """Takes an injected client (either `decode_responses` works; the factory uses bytes); every
    key a store writes carries `ttl_s`, refreshed when the thing it belongs to is written (by the
    scripts, once it has run down by a sixteenth: `stores.redis.support.LUA_TOUCH`)."""

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "a2a",
        ttl_s: float = DEFAULT_TASK_TTL_S,
        batcher: CommandBatcher | None = None,
    ) -> None:
        self._redis = client
        self._keys = RedisKeys(prefix)
        self._ttl_ms = int(ttl_s * 1000)
        # A turn's writes share round trips, with the other stores' too when the factory gives
        # them one batcher.
        self._batcher = batcher or CommandBatcher(client)
        # One Redis, not a cluster: a script may name keys of more than one hash slot (a task's
        # keys and the index bucket beside them), one round trip instead of two.
        self._single_node = isinstance(client, Redis)
