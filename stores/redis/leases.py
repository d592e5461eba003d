"""RedisLeaseStore: which process runs which turn, cancel flags, and the cancel channel.

    acquire / renew --EVALSHA (slot {task}: lease + cancel flag)--> epoch, expiry (server time)
            |  if held: ZADD p:leases:{b<n>} "<owner>:<task>" expiry (acquire: in the script on
            |  one Redis; a second step on a cluster, where the bucket is in another slot)
            v
    expired() --> ZRANGEBYSCORE p:leases:{b<n>} -inf <now> for every bucket n (one pipeline),
                  each candidate checked against its lease hash (by that shard's clock)

    request_cancel --> SET the cancel flag if the lease exists + PUBLISH p:cancel
                  --> every `cancel_requests()` listener (pub/sub), and the holder's next renew

The lease hash is the truth; the running-leases index (LEASE_BUCKETS keys, each its own slot, so
no one key takes every renewal of every replica) is updated as a second step because it is in
another slot than the task's (on one Redis, acquire and release update it in their own script).
Expiry is decided by the hash's `expires` field against Redis server time (TIME in the script),
so process clocks never matter. The hash itself carries the TTL of its task (it is garbage, not a
lease, once that long has passed), so a holder that renews late still holds its lease unless
another holder took it (LeaseStatus.LOST means taken or released, as the in-memory store has
it).

Fencing: every acquire increments the hash's `epoch`; a release removes only `holder`, so the
epoch outlives it and only ever grows while the task lives. The task store's fenced writes (a
turn's journal entries and checkpoints, which share the `{task}` slot) check holder and epoch in
the same script as the write, so a holder that lost its lease cannot write after the takeover.

`expired()` checks each candidate against its hash: a stale index score (a renew whose index step
was lost) is skipped, and an entry whose lease has no holder (released, or garbage-collected) is
dropped. A process that dies between an acquire's two steps leaves a lease the index does not
know; that is harmless because a lease is always taken before the write it guards: a new task is
created only after its lease is indexed, and an answered task moves to SUBMITTED only after that.

Processes known to be gone: every process heartbeats into `p:processes` (score: when its
heartbeat lapses). A process killed outright stops heartbeating long before its leases expire;
the first heartbeat of another process to see that removes it and gets its name, and hands its
leases over (each made to expire now, as a graceful shutdown does), so the takeover does not wait
for the whole lease. A paused process wrongly taken for dead loses nothing: the fence stops it.

Pub/sub is fire-and-forget: a message sent while a listener is reconnecting is lost to it, which
is why the flag exists: the holder also learns of the cancel at its next renew.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores.base import LeaseStatus, LeaseStore, TaskRef
from stores.redis.keys import LEASE_BUCKETS
from stores.redis.scripts import (
    ACQUIRE_TOUCHING_LEASE,
    EXPIRED_LEASES,
    FLAG_CANCEL,
    HAND_OVER_LEASE,
    HEARTBEAT,
    LEASE_IS_HELD,
    LEASE_STATE,
    RELEASE_LEASE,
    RENEW_LEASE,
)
from stores.redis.store import RedisStore
from stores.redis.support import (
    AnyPipeline,
    ready,
    redis_available,
    run_pipeline,
    text,
)

logger = logging.getLogger(__name__)


_STATUS = {0: LeaseStatus.LOST, 1: LeaseStatus.HELD, 2: LeaseStatus.CANCEL_REQUESTED}


class RedisLeaseStore(RedisStore, LeaseStore):
    """Leases in Redis. A turn's acquire and release (not renewals: those keep the store's own
    client, so that a flood of commands never starves them) go out with the stores' other writes
    when the factory gives them one batcher. On one Redis a script names the index bucket beside
    the task's keys (one round trip for an acquire or a release instead of two); a cluster keeps
    the index a second step."""

    def _task_keys(self, owner: str, task_id: str) -> list[str]:
        return [self._keys.lease(owner, task_id), self._keys.cancel_flag(owner, task_id)]

    def _keys_and_member(self, owner: str, task_id: str) -> tuple[list[str], str]:
        """The task's lease keys (and, on one Redis, its index bucket) and its index member."""
        member = self._keys.lease_member(owner, task_id)
        keys = self._task_keys(owner, task_id)
        if self._single_node:
            keys.append(self._index_key(member))
        return keys, member

    def _key_ttl_ms(self, lease_ttl_s: float) -> int:
        return max(self._ttl_ms, int(lease_ttl_s * 1000))

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        keys, member = self._keys_and_member(owner, task_id)
        args = [holder, int(ttl_s * 1000), self._key_ttl_ms(ttl_s), member]
        with redis_available():
            epoch, expires = await self._batcher.run_script(ACQUIRE_TOUCHING_LEASE, keys, args)
            if int(epoch) and not self._single_node:
                await self._index({member: int(expires)})
        return int(epoch)

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        return (await self.renew_many([(TaskRef(owner, task_id), holder)], ttl_s=ttl_s))[0]

    async def renew_many(
        self, held: list[tuple[TaskRef, str]], *, ttl_s: float
    ) -> list[LeaseStatus]:
        """Every renewal in one round trip, then every index update in a second one."""
        if not held:
            return []
        ttls = [int(ttl_s * 1000), self._key_ttl_ms(ttl_s)]

        def build(pipe: AnyPipeline) -> None:
            for ref, holder in held:
                RENEW_LEASE.queue(pipe, self._task_keys(ref.owner, ref.task_id), [holder, *ttls])

        with redis_available():
            replies = await run_pipeline(self._redis, build, scripts=[RENEW_LEASE])
            renewed = {
                self._keys.lease_member(ref.owner, ref.task_id): int(expires)
                for (ref, _), (status, expires) in zip(held, replies, strict=True)
                if int(status)
            }
            if renewed:
                await self._index(renewed)
        return [_STATUS[int(status)] for status, _ in replies]

    async def is_held(self, task_id: str, *, owner: str) -> bool:
        with redis_available():
            return bool(await LEASE_IS_HELD(self._redis, [self._keys.lease(owner, task_id)], []))

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        keys, member = self._keys_and_member(owner, task_id)
        with redis_available():
            released = await self._batcher.run_script(RELEASE_LEASE, keys, [holder, member])
            if released and not self._single_node:
                await self._redis.zrem(self._index_key(member), member)

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        with redis_available():
            now = int(
                await HAND_OVER_LEASE(self._redis, [self._keys.lease(owner, task_id)], [holder])
            )
            if now:
                await self._index({self._keys.lease_member(owner, task_id): now})

    async def heartbeat(self, process: str, *, ttl_s: float) -> list[str]:
        args = [process, int(ttl_s * 1000), self._key_ttl_ms(ttl_s)]
        with redis_available():
            lapsed = await HEARTBEAT(self._redis, [self._keys.processes()], args)
        return [text(name) for name in lapsed]

    async def hand_over_process(self, process: str) -> int:
        """Scans the running leases (one member per running turn, on every replica): this runs
        only when a process is found dead, not on every sweep."""
        with redis_available():

            def every_bucket(pipe: AnyPipeline) -> None:
                for bucket in range(LEASE_BUCKETS):
                    pipe.zrange(self._keys.running_leases(bucket), 0, -1)

            buckets = await run_pipeline(self._redis, every_bucket)
            refs = [
                TaskRef(*self._keys.parse_lease_member(text(member)))
                for members in buckets
                for member in members
            ]

            def holders(pipe: AnyPipeline) -> None:
                for ref in refs:
                    pipe.hget(self._keys.lease(ref.owner, ref.task_id), "holder")

            held_by = await run_pipeline(self._redis, holders) if refs else []
            count = 0
            for ref, holder in zip(refs, held_by, strict=True):
                if holder is not None and _process_of(text(holder)) == process:
                    await self.hand_over(ref.task_id, owner=ref.owner, holder=text(holder))
                    count += 1
        return count

    async def leave(self, process: str) -> None:
        with redis_available():
            await self._redis.zrem(self._keys.processes(), process)

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        message = json.dumps({"owner": owner, "taskId": task_id})

        with redis_available():
            # Two round trips: a cluster pipeline takes no PUBLISH (it has no key to route by).
            await FLAG_CANCEL(self._redis, self._task_keys(owner, task_id), [self._ttl_ms])
            await self._redis.publish(self._keys.cancel_channel(), message)

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        """Listen on the cancel channel with a pub/sub connection of its own, for good.

        A lost connection is re-established (with backoff up to 5 s) and logged, never raised:
        the holder's renew sees the cancel flag anyway.
        """
        backoff = 0.1
        while True:
            pubsub = None
            try:
                await ready(self._redis)
                pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
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
                if pubsub is not None:
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        """Every bucket's candidates in one pipelined round trip (a script per bucket, each in its
        slot), then each candidate checked against its lease hash in a second one."""

        def sweep(pipe: AnyPipeline) -> None:
            for bucket in range(LEASE_BUCKETS):
                EXPIRED_LEASES.queue(
                    pipe, [self._keys.running_leases(bucket)], [limit, self._ttl_ms]
                )

        with redis_available():
            buckets = await run_pipeline(self._redis, sweep, scripts=[EXPIRED_LEASES])
            candidates = [
                self._keys.parse_lease_member(text(member))
                for members in buckets
                for member in members
            ][:limit]
            if not candidates:
                return []

            def check(pipe: AnyPipeline) -> None:
                for owner, task_id in candidates:
                    LEASE_STATE.queue(pipe, [self._keys.lease(owner, task_id)], [])

            states = await run_pipeline(self._redis, check, scripts=[LEASE_STATE])
            expired: list[TaskRef] = []
            gone: list[str] = []
            for (owner, task_id), state in zip(candidates, states, strict=True):
                if int(state) == 0:
                    gone.append(self._keys.lease_member(owner, task_id))
                elif int(state) == 2:
                    expired.append(TaskRef(owner, task_id))
            if gone:

                def drop(pipe: AnyPipeline) -> None:
                    for member in gone:
                        pipe.zrem(self._index_key(member), member)

                await run_pipeline(self._redis, drop)
        return expired

    def _index_key(self, member: str) -> str:
        return self._keys.running_leases(self._keys.lease_bucket(member))

    async def _index(self, expiries: dict[str, int]) -> None:
        """Record held leases' expiries (member -> ms) in the running-leases index, each in its
        bucket (one round trip; on a cluster, split by shard)."""
        by_key: dict[str, dict[str, int]] = {}
        for member, expiry in expiries.items():
            by_key.setdefault(self._index_key(member), {})[member] = expiry

        def build(pipe: AnyPipeline) -> None:
            for key, members in by_key.items():
                pipe.zadd(key, members)
                pipe.pexpire(key, self._ttl_ms)

        await run_pipeline(self._redis, build)


def _process_of(holder: str) -> str:
    """The process part of a holder name (`<process>/<nonce>`)."""
    return holder.split("/", 1)[0]


def _parse_cancel(data: Any) -> TaskRef | None:
    try:
        payload = json.loads(data)
        return TaskRef(str(payload["owner"]), str(payload["taskId"]))
    except (ValueError, KeyError, TypeError):
        logger.warning("ignoring a malformed message on the cancel channel")
        return None
