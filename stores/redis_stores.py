"""Redis stores: conversations, checkpoints, and the factory that builds all four from a URL.

The task store lives in `redis_tasks`, the lease store in `redis_leases`, every key in
`redis_keys`. All take an injected `redis.asyncio.Redis` (either `decode_responses` works; the
factory uses bytes), a key prefix and a TTL; every key they write carries that TTL, refreshed when
the thing it belongs to is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from stores.base import CheckpointStore, MessageStore
from stores.models import ChatMessage
from stores.redis_keys import RedisKeys
from stores.redis_leases import RedisLeaseStore
from stores.redis_support import (
    LuaScript,
    dump_message,
    load_message,
    redis_available,
    text,
)
from stores.redis_tasks import RedisTaskStore

__all__ = [
    "RedisCheckpointStore",
    "RedisLeaseStore",
    "RedisMessageStore",
    "RedisStores",
    "RedisTaskStore",
    "create_redis_stores",
]

DEFAULT_TTL_S = 7 * 24 * 3600

# KEYS: conversation, units. ARGV: unit id, ttl ms, messages... Returns 0 if the unit was there.
_APPEND = LuaScript(
    """
local added = redis.call('SADD', KEYS[2], ARGV[1])
if added == 1 then
  for i = 3, #ARGV, 1000 do  -- in batches: unpack() is bounded by Lua's C stack
    redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return added
"""
)

# KEYS: claim. ARGV: task id. Deletes the claim only if this task holds it.
_RELEASE_CLAIM = LuaScript(
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
)


class RedisMessageStore(MessageStore):
    """A context's conversation as a LIST of ChatMessage JSON, the ids of the units appended to
    it as a SET, its claim as a string; all in the context's slot."""

    def __init__(self, client: Redis, *, prefix: str = "a2a", ttl_s: int = DEFAULT_TTL_S) -> None:
        self._redis = client
        self._keys = RedisKeys(prefix)
        self._ttl_ms = int(ttl_s * 1000)

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        if limit <= 0:
            return []
        with redis_available():
            raw = await self._redis.lrange(self._keys.conversation(owner, context_id), -limit, -1)
        return [load_message(item) for item in raw]

    async def append(
        self, context_id: str, messages: list[ChatMessage], *, owner: str, unit_id: str
    ) -> bool:
        """One script: record the unit id, and only if it is new, RPUSH all its messages."""
        keys = [self._keys.conversation(owner, context_id), self._keys.units(owner, context_id)]
        args = [unit_id, self._ttl_ms, *[dump_message(message) for message in messages]]
        with redis_available():
            return bool(await _APPEND(self._redis, keys, args))

    async def claim(self, context_id: str, task_id: str, *, owner: str) -> str | None:
        with redis_available():
            holder = await self._redis.set(
                self._keys.claim(owner, context_id), task_id, nx=True, get=True, px=self._ttl_ms
            )
        if holder is None or text(holder) == task_id:
            return None
        return text(holder)

    async def release(self, context_id: str, task_id: str, *, owner: str) -> None:
        with redis_available():
            await _RELEASE_CLAIM(self._redis, [self._keys.claim(owner, context_id)], [task_id])


class RedisCheckpointStore(CheckpointStore):
    """One string per task, expiring `ttl_s` after it was last saved."""

    def __init__(self, client: Redis, *, prefix: str = "a2a", ttl_s: int = DEFAULT_TTL_S) -> None:
        self._redis = client
        self._keys = RedisKeys(prefix)
        self._ttl_ms = int(ttl_s * 1000)

    async def save(self, task_id: str, checkpoint: str, *, owner: str) -> None:
        with redis_available():
            await self._redis.set(
                self._keys.checkpoint(owner, task_id), checkpoint, px=self._ttl_ms
            )

    async def load(self, task_id: str, *, owner: str) -> str | None:
        with redis_available():
            raw = await self._redis.get(self._keys.checkpoint(owner, task_id))
        return None if raw is None else text(raw)

    async def delete(self, task_id: str, *, owner: str) -> None:
        with redis_available():
            await self._redis.delete(self._keys.checkpoint(owner, task_id))


@dataclass(frozen=True, kw_only=True)
class RedisStores:
    """The four Redis stores over two clients: one for commands, one for blocking reads."""

    tasks: RedisTaskStore
    messages: RedisMessageStore
    checkpoints: RedisCheckpointStore
    leases: RedisLeaseStore
    client: Redis
    read_client: Redis

    async def ping(self) -> None:
        """Raise StoreUnavailable unless Redis answers."""
        with redis_available():
            await self.client.ping()

    async def aclose(self) -> None:
        await self.read_client.aclose()
        await self.client.aclose()


def create_redis_stores(
    url: str,
    *,
    prefix: str = "a2a",
    ttl_s: int = DEFAULT_TTL_S,
    journal_max: int = 10_000,
    max_connections: int = 50,
    max_readers: int = 1000,
) -> RedisStores:
    """Build the Redis stores for a `redis://` or `rediss://` URL (TLS with the latter).

    Two connection pools. Commands share `max_connections` connections (a caller waits up to 5 s
    for a free one). Blocking journal reads, each of which holds a connection while it waits, get
    a pool of their own of up to `max_readers` connections, so a crowd of idle SSE streams never
    starves publishes; a reader beyond that waits for a free connection. The read pool has no
    socket timeout (a read blocks for up to its `timeout_s`); the store bounds each read itself.
    Nothing connects until the first command (`ping` checks).
    """
    if not url.startswith(("redis://", "rediss://")):
        raise ValueError(
            f"REDIS_URL must start with redis:// or rediss:// (got {url.split(':')[0]!r})"
        )
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=3)
    common = {"socket_connect_timeout": 5.0, "health_check_interval": 30, "decode_responses": False}
    client = Redis.from_pool(
        BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=5,
            socket_timeout=5.0,
            retry=retry,
            **common,
        )
    )
    read_client = Redis.from_pool(
        BlockingConnectionPool.from_url(
            url,
            max_connections=max_readers,
            timeout=None,
            socket_timeout=None,
            retry=retry,
            **common,
        )
    )
    return RedisStores(
        tasks=RedisTaskStore(
            client, prefix=prefix, ttl_s=ttl_s, journal_max=journal_max, read_client=read_client
        ),
        messages=RedisMessageStore(client, prefix=prefix, ttl_s=ttl_s),
        checkpoints=RedisCheckpointStore(client, prefix=prefix, ttl_s=ttl_s),
        leases=RedisLeaseStore(client, prefix=prefix, ttl_s=ttl_s),
        client=client,
        read_client=read_client,
    )
