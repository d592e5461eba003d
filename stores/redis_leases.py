"""RedisLeaseStore: which process runs which turn, cancel flags, and the cancel channel.

    acquire / renew --EVALSHA (slot {task}: lease + cancel flag)--> expiry (Redis server time)
            |  then, only if held: ZADD p:leases "<owner>:<task>" expiry     (second step)
            v
    expired() --> ZRANGEBYSCORE p:leases -inf <now>, each checked against its lease hash

    request_cancel --> SET the cancel flag if the lease exists + PUBLISH p:cancel
                  --> every `cancel_requests()` listener (pub/sub), and the holder's next renew

The lease hash is the truth; `p:leases` is an index of it, updated as a second step because it is
one global key (another slot than the task's). Expiry is decided by the hash's `expires` field
against Redis server time (TIME in the script), so process clocks never matter. The hash itself
carries the TTL of its task (it is garbage, not a lease, once that long has passed), so a holder
that renews late still holds its lease unless another holder took it (LeaseStatus.LOST means
taken or released, as the in-memory store has it).

`expired()` checks each candidate against its hash: a stale index score (a renew whose index step
was lost) is skipped, and an entry whose hash is gone (released, or garbage-collected) is dropped.
A process that dies between an acquire's two steps leaves a lease the index does not know: its
turn is not found by `expired()`. The window is one round trip.

Pub/sub is fire-and-forget: a message sent while a listener is reconnecting is lost to it, which
is why the flag exists: the holder also learns of the cancel at its next renew.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.base import LeaseStatus, LeaseStore, TaskRef
from stores.redis_keys import RedisKeys
from stores.redis_support import LuaScript, redis_available, run_pipeline, text

logger = logging.getLogger(__name__)

_NOW_MS = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# KEYS: lease, cancel flag. ARGV: holder, lease ttl ms, key ttl ms. Returns the expiry, or 0.
_ACQUIRE = LuaScript(
    _NOW_MS
    + """
local lease = redis.call('HMGET', KEYS[1], 'holder', 'expires')
if lease[1] then
  if lease[1] ~= ARGV[1] and tonumber(lease[2]) > now then return 0 end
else
  redis.call('DEL', KEYS[2])
end
local expires = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'expires', expires)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return expires
"""
)

# Same KEYS and ARGV. Returns {0: lost | 1: held | 2: held, cancel requested, expiry}.
_RENEW = LuaScript(
    _NOW_MS
    + """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return {0, 0} end
local expires = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires', expires)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local cancel = redis.call('EXISTS', KEYS[2])
if cancel == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
return {1 + cancel, expires}
"""
)

# KEYS: lease, cancel flag. ARGV: holder. Returns 1 if it was ours (and is now gone).
_RELEASE = LuaScript(
    """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""
)

# KEYS: lease. ARGV: holder. Returns the new expiry (now) if the lease was ours, else 0.
_HAND_OVER = LuaScript(
    _NOW_MS
    + """
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'expires', now)
return now
"""
)

# KEYS: lease, cancel flag. ARGV: key ttl ms. Flags only a lease that exists (it dies with it).
_FLAG_CANCEL = LuaScript(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1
"""
)

# KEYS: running leases. ARGV: limit, key ttl ms. Returns {now, members expired by now}.
_EXPIRED = LuaScript(
    _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))}
"""
)

_STATUS = {0: LeaseStatus.LOST, 1: LeaseStatus.HELD, 2: LeaseStatus.CANCEL_REQUESTED}


class RedisLeaseStore(LeaseStore):
    def __init__(self, client: Redis, *, prefix: str = "a2a", ttl_s: int = 7 * 24 * 3600) -> None:
        self._redis = client
        self._keys = RedisKeys(prefix)
        self._ttl_ms = int(ttl_s * 1000)

    def _task_keys(self, owner: str, task_id: str) -> list[str]:
        return [self._keys.lease(owner, task_id), self._keys.cancel_flag(owner, task_id)]

    def _key_ttl_ms(self, lease_ttl_s: float) -> int:
        return max(self._ttl_ms, int(lease_ttl_s * 1000))

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> bool:
        args = [holder, int(ttl_s * 1000), self._key_ttl_ms(ttl_s)]
        with redis_available():
            expires = int(await _ACQUIRE(self._redis, self._task_keys(owner, task_id), args))
            if expires:
                await self._index(owner, task_id, expires)
        return expires != 0

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        args = [holder, int(ttl_s * 1000), self._key_ttl_ms(ttl_s)]
        with redis_available():
            status, expires = await _RENEW(self._redis, self._task_keys(owner, task_id), args)
            if status:
                await self._index(owner, task_id, int(expires))
        return _STATUS[int(status)]

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        with redis_available():
            if await _RELEASE(self._redis, self._task_keys(owner, task_id), [holder]):
                await self._redis.zrem(
                    self._keys.running_leases(), self._keys.lease_member(owner, task_id)
                )

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        with redis_available():
            now = int(await _HAND_OVER(self._redis, [self._keys.lease(owner, task_id)], [holder]))
            if now:
                await self._index(owner, task_id, now)

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        message = json.dumps({"owner": owner, "taskId": task_id})

        def build(pipe: Pipeline) -> None:
            _FLAG_CANCEL.queue(pipe, self._task_keys(owner, task_id), [self._ttl_ms])
            pipe.publish(self._keys.cancel_channel(), message)

        with redis_available():
            await run_pipeline(self._redis, build, scripts=[_FLAG_CANCEL])

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        """Listen on the cancel channel with a pub/sub connection of its own, for good.

        A lost connection is re-established (with backoff up to 5 s) and logged, never raised:
        the holder's renew sees the cancel flag anyway.
        """
        backoff = 0.1
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.cancel_channel())
                backoff = 0.1
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is None or message.get("type") != "message":
                        continue
                    ref = _parse_cancel(message["data"])
                    if ref is not None:
                        yield ref
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                logger.warning("error=<%s> | cancel channel lost; resubscribing", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        with redis_available():
            now, members = await _EXPIRED(
                self._redis, [self._keys.running_leases()], [limit, self._ttl_ms]
            )
            candidates = [self._keys.parse_lease_member(text(member)) for member in members]
            if not candidates:
                return []

            def check(pipe: Pipeline) -> None:
                for owner, task_id in candidates:
                    pipe.hget(self._keys.lease(owner, task_id), "expires")

            leases = await run_pipeline(self._redis, check)
            expired: list[TaskRef] = []
            gone: list[str] = []
            for (owner, task_id), expires in zip(candidates, leases, strict=True):
                if expires is None:
                    gone.append(self._keys.lease_member(owner, task_id))
                elif int(expires) <= int(now):
                    expired.append(TaskRef(owner, task_id))
            if gone:
                await self._redis.zrem(self._keys.running_leases(), *gone)
        return expired

    async def _index(self, owner: str, task_id: str, expires_ms: int) -> None:
        def build(pipe: Pipeline) -> None:
            pipe.zadd(
                self._keys.running_leases(), {self._keys.lease_member(owner, task_id): expires_ms}
            )
            pipe.pexpire(self._keys.running_leases(), self._ttl_ms)

        await run_pipeline(self._redis, build)


def _parse_cancel(data: Any) -> TaskRef | None:
    try:
        payload = json.loads(data)
        return TaskRef(str(payload["owner"]), str(payload["taskId"]))
    except (ValueError, KeyError, TypeError):
        logger.warning("ignoring a malformed message on the cancel channel")
        return None
