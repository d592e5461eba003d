"""What the Redis stores share: error mapping, Lua scripts by SHA, pipelines, JSON codecs.

The pools' connections pack commands with hiredis (`packing_with_hiredis`), written against
redis-py 8.1.0: the pool's `connection_class` is replaced by a subclass overriding the public
`pack_command`, and a pool with a class of its own keeps it. No private name of redis-py's is
used here; those of the batcher's reads are fenced in stores.redis.batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import hiredis
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    BlockingConnectionPool,
    Connection,
    SSLConnection,
)
from redis.exceptions import ClusterDownError, NoScriptError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.base import StoreUnavailable
from stores.codec import stored_entry
from stores.models import JournalEntry
from stores.redis.cluster import ClusterClient

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

RedisClient = Redis | RedisCluster
"""One Redis, or a Redis Cluster (the stores use either the same way)."""
AnyPipeline = Pipeline | ClusterPipeline


class _RedisAvailable:
    """Turn "Redis cannot be reached" (refused, lost, timed out; on a cluster also a shard
    without a master, or a failover under way) into StoreUnavailable.

    A class rather than a generator context manager: every store call runs in one (about fifteen
    a turn), and a generator's enter and exit cost far more."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: object
    ) -> None:
        if exc is None:
            return
        if isinstance(exc, _UNREACHABLE) or (
            isinstance(exc, ResponseError) and str(exc).startswith(_UNREACHABLE_REPLIES)
        ):
            raise StoreUnavailable(f"Redis is unavailable: {exc}") from exc


_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)
_UNREACHABLE_REPLIES = ("UNBLOCKED", "MASTERDOWN", "LOADING", "READONLY")
_AVAILABLE = _RedisAvailable()


def redis_available() -> _RedisAvailable:
    """`with redis_available(): ...`: see `_RedisAvailable`."""
    return _AVAILABLE


class _HiredisPacking(Connection):
    """Commands packed by hiredis (a required dependency): redis-py's asyncio connections pack
    in Python, and hiredis gives the same bytes several times faster (a turn sends dozens of
    commands). Straight to hiredis for a one-word command name (all this store sends); anything
    else (a command name of two words, a bytearray argument) is packed by redis-py as before."""

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if isinstance(name, str) and " " not in name:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # a bytearray or memoryview: redis-py converts (or refuses) it
        return super().pack_command(*args)


class HiredisConnection(_HiredisPacking):
    pass


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    pass


def packing_with_hiredis(pool: BlockingConnectionPool) -> BlockingConnectionPool:
    """The pool's connections (plain or TLS, as its URL chose) pack with hiredis."""
    faster: dict[type[AbstractConnection], type[AbstractConnection]] = {
        Connection: HiredisConnection,
        SSLConnection: HiredisSSLConnection,
    }
    pool.connection_class = faster.get(pool.connection_class, pool.connection_class)
    return pool


def text(value: object) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


LUA_NOW_MS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""
"""A script prologue: `now`, Redis server time in ms (so process clocks never matter)."""

LUA_TOUCH = """
local function touch(key, ttl)
  if redis.call('PTTL', key) >= tonumber(ttl) * 15 / 16 then return false end
  redis.call('PEXPIRE', key, ttl)
  return true
end
"""
"""A script prologue: `touch(key, ttl ms)` sets a key's expiry only once it has run down by a
sixteenth (or the key has none), and says whether it did: a PEXPIRE is a write, which Redis
propagates and signals, and costs several times the PTTL read that spares it (bench/RESULTS.md,
issue 53). A key touched so expires between 15/16 of its TTL and its TTL after its last write,
never later."""


class LuaScript:
    """A Lua script run by EVALSHA; loaded on the first NOSCRIPT (one round trip when cached).

    Not redis-py's `Script`: inside a pipeline that one sends SCRIPT EXISTS first on every execute,
    an extra round trip per call.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()

    async def __call__(self, client: RedisClient, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def command(self, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        """The EVALSHA that runs the script, as Redis takes it."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def queue(self, pipe: AnyPipeline, keys: Sequence[str], args: Sequence[Any]) -> None:
        # The command itself: a cluster pipeline refuses `evalsha()` by name, yet routes an
        # EVALSHA by its keys (all of one slot here) like any other command.
        pipe.execute_command(*self.command(keys, args))


async def ready(client: RedisClient) -> None:
    """Before a pipeline or a pub/sub connection (which do not route through the client's
    `execute_command`): a cluster client knows its slot map."""
    if isinstance(client, ClusterClient):
        await client.ready()


async def run_pipeline(
    client: RedisClient, build: Callable[[AnyPipeline], None], *, scripts: Sequence[LuaScript] = ()
) -> list[Any]:
    """Send the commands `build` queues in one round trip (not a transaction) and return replies.

    If Redis does not know a script yet, load `scripts` and send the whole pipeline again: every
    pipeline built here is idempotent apart from its scripts, which did not run.
    """
    await ready(client)
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        build(pipe)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        if attempt == 0 and any(isinstance(reply, NoScriptError) for reply in replies):
            for script in scripts:
                await client.script_load(script.source)
            continue
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies
    raise AssertionError("unreachable")


def xread_streams(reply: Any) -> Iterable[tuple[Any, Any]]:
    """XREAD's reply, RESP2 (a list of pairs) or RESP3 (a map), as (stream key, entries)."""
    if not reply:
        return ()
    return reply.items() if isinstance(reply, dict) else reply


def journal_entries(raw: Sequence[tuple[Any, dict[Any, Any]]]) -> list[JournalEntry]:
    """A journal's entries as XREAD returns them (id "<position>-1", field `e`, the event)."""
    return [
        stored_entry(int(text(entry_id).split("-", 1)[0]), _event_field(fields))
        for entry_id, fields in raw
    ]


def _event_field(fields: dict[Any, Any]) -> bytes:
    value = fields[b"e"] if b"e" in fields else fields["e"]
    return value if isinstance(value, bytes) else value.encode()


def timestamp_ms(moment: datetime) -> int:
    """As the in-memory store computes it, so both order and page identically."""
    return int(moment.timestamp() * 1000)


def timestamp_us(moment: datetime) -> int:
    """Exact microseconds since the epoch (for `status_after`, compared at full precision)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)
