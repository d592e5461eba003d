"""RedisLeaseStore: expiry on server time, takeover, the expired index, cancel flag and channel."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from stores.base import LeaseStatus, TaskRef
from stores.redis.keys import LEASE_BUCKETS, RedisKeys
from stores.redis.leases import RedisLeaseStore
from tests.redis.conftest import REDIS_URL, TTL_S, keys_with_prefix

pytestmark = pytest.mark.redis

OWNER = "owner:{1}"
TASK = "task:{1}"


async def test_acquire_renew_release(leases: RedisLeaseStore) -> None:
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=10)
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=10)  # ours already
    assert not await leases.acquire(TASK, owner=OWNER, holder="b", ttl_s=10)
    assert await leases.acquire(TASK, owner="someone else", holder="b", ttl_s=10)  # not the same
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=10) == LeaseStatus.HELD
    assert await leases.renew(TASK, owner=OWNER, holder="b", ttl_s=10) == LeaseStatus.LOST
    await leases.release(TASK, owner=OWNER, holder="b")  # not the holder: no effect
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=10) == LeaseStatus.HELD
    await leases.release(TASK, owner=OWNER, holder="a")
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=10) == LeaseStatus.LOST
    assert await leases.acquire(TASK, owner=OWNER, holder="b", ttl_s=10)


async def test_expiry_takeover_and_the_expired_listing(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    assert await leases.acquire(TASK, owner=OWNER, holder="dead", ttl_s=0.05)
    assert await leases.acquire("alive", owner=OWNER, holder="live", ttl_s=30)
    assert await leases.expired() == []
    await asyncio.sleep(0.1)

    assert await leases.expired() == [TaskRef(OWNER, TASK)]
    assert await leases.expired(limit=0) == []
    assert await leases.acquire(TASK, owner=OWNER, holder="rescuer", ttl_s=30)
    assert await leases.expired() == []  # taken over: live again
    assert await leases.renew(TASK, owner=OWNER, holder="dead", ttl_s=30) == LeaseStatus.LOST
    await leases.release(TASK, owner=OWNER, holder="dead")  # too late: not its lease any more
    assert await leases.renew(TASK, owner=OWNER, holder="rescuer", ttl_s=30) == LeaseStatus.HELD

    assert await indexed(client, prefix) == 2
    await leases.release(TASK, owner=OWNER, holder="rescuer")
    await leases.release("alive", owner=OWNER, holder="live")
    assert await indexed(client, prefix) == 0


async def test_a_late_renew_still_holds_if_nobody_took_over(leases: RedisLeaseStore) -> None:
    assert await leases.acquire(TASK, owner=OWNER, holder="slow", ttl_s=0.05)
    await asyncio.sleep(0.1)
    assert await leases.expired() == [TaskRef(OWNER, TASK)]
    assert await leases.renew(TASK, owner=OWNER, holder="slow", ttl_s=30) == LeaseStatus.HELD
    assert await leases.expired() == []


async def test_expired_skips_stale_and_released_index_entries(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    keys = RedisKeys(prefix)
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=30)
    member = keys.lease_member(OWNER, TASK)
    released = keys.lease_member(OWNER, "released")
    await client.zadd(index_of(keys, member), {member: 1})  # a stale score: the lease is live
    await client.zadd(index_of(keys, released), {released: 1})  # no lease behind it
    assert await leases.expired() == []
    assert await client.zscore(index_of(keys, released), released) is None


async def test_cancel_flag_is_seen_by_renew_and_dies_with_the_lease(
    leases: RedisLeaseStore,
) -> None:
    await leases.request_cancel(TASK, owner=OWNER)  # no lease yet: nothing to flag
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=30)
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=30) == LeaseStatus.HELD

    await leases.request_cancel(TASK, owner="another owner")
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=30) == LeaseStatus.HELD
    await leases.request_cancel(TASK, owner=OWNER)
    assert (
        await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=30) == LeaseStatus.CANCEL_REQUESTED
    )
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=30)  # re-acquire keeps it
    assert (
        await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=30) == LeaseStatus.CANCEL_REQUESTED
    )
    await leases.release(TASK, owner=OWNER, holder="a")
    assert await leases.acquire(TASK, owner=OWNER, holder="b", ttl_s=30)
    assert await leases.renew(TASK, owner=OWNER, holder="b", ttl_s=30) == LeaseStatus.HELD


async def test_lease_keys_have_ttls(leases: RedisLeaseStore, client: Redis, prefix: str) -> None:
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=0.5)
    await leases.request_cancel(TASK, owner=OWNER)
    assert await leases.renew(TASK, owner=OWNER, holder="a", ttl_s=0.5)
    keys = await keys_with_prefix(client, prefix)
    assert len(keys) == 3  # lease, cancel flag, running-leases index
    for key in keys:
        assert 0 < await client.ttl(key) <= TTL_S, key


@contextlib.asynccontextmanager
async def listening(
    store: RedisLeaseStore, client: Redis, prefix: str
) -> AsyncIterator[asyncio.Queue[TaskRef]]:
    received: asyncio.Queue[TaskRef] = asyncio.Queue()

    async def listen() -> None:
        async for ref in store.cancel_requests():
            received.put_nowait(ref)

    listener = asyncio.create_task(listen())
    await subscribed(client, prefix, 1)
    try:
        yield received
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


async def subscribed(client: Redis, prefix: str, count: int) -> None:
    channel = RedisKeys(prefix).cancel_channel()
    for _ in range(200):
        ((_, subscribers),) = await client.pubsub_numsub(channel)
        if subscribers == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{channel} never had {count} subscriber(s)")


async def test_cancel_is_heard_on_another_client_within_milliseconds(
    leases: RedisLeaseStore, other_client: Redis, client: Redis, prefix: str
) -> None:
    elsewhere = RedisLeaseStore(other_client, prefix=prefix, ttl_s=TTL_S)
    async with listening(elsewhere, client, prefix) as received:
        started = time.monotonic()
        await leases.request_cancel(TASK, owner=OWNER)
        ref = await asyncio.wait_for(received.get(), 2)
        heard_after = time.monotonic() - started
    assert ref == TaskRef(OWNER, TASK)
    assert heard_after < 0.1, f"heard {heard_after * 1000:.0f} ms after the request"
    await subscribed(client, prefix, 0)  # the listener's connection is gone with it


async def test_the_listener_survives_a_lost_connection(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    name = f"listener-{uuid.uuid4().hex}"
    listener_client = Redis.from_url(REDIS_URL, client_name=name)
    elsewhere = RedisLeaseStore(listener_client, prefix=prefix, ttl_s=TTL_S)
    try:
        async with listening(elsewhere, client, prefix) as received:
            killed = 0
            for entry in await client.client_list(_type="pubsub"):
                if entry.get("name") == name:
                    killed += await client.client_kill_filter(_id=entry["id"])
            assert killed == 1
            await subscribed(client, prefix, 0)
            # Pub/sub is lossy while the listener reconnects (the renew's flag covers that gap),
            # so ask until it is heard again.
            for _ in range(100):
                await leases.request_cancel(TASK, owner=OWNER)
                with contextlib.suppress(TimeoutError):
                    assert await asyncio.wait_for(received.get(), 0.05) == TaskRef(OWNER, TASK)
                    break
            else:
                raise AssertionError("the listener never heard a cancel after reconnecting")
    finally:
        await listener_client.aclose()


async def test_malformed_cancel_messages_are_ignored(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    async with listening(leases, client, prefix) as received:
        await client.publish(RedisKeys(prefix).cancel_channel(), "not json")
        await client.publish(RedisKeys(prefix).cancel_channel(), '{"owner": "o"}')
        await leases.request_cancel(TASK, owner=OWNER)
        assert await asyncio.wait_for(received.get(), 2) == TaskRef(OWNER, TASK)
        assert received.empty()


async def test_hand_over_makes_the_lease_expire_now(leases: RedisLeaseStore) -> None:
    assert await leases.acquire(TASK, owner=OWNER, holder="stopping", ttl_s=60)
    await leases.hand_over(TASK, owner=OWNER, holder="someone else")  # not ours: no effect
    assert await leases.expired() == []
    await leases.hand_over(TASK, owner=OWNER, holder="stopping")
    assert await leases.expired() == [TaskRef(OWNER, TASK)]
    assert await leases.acquire(TASK, owner=OWNER, holder="successor", ttl_s=60)
    assert await leases.expired() == []
    assert await leases.renew(TASK, owner=OWNER, holder="stopping", ttl_s=60) == LeaseStatus.LOST


async def test_renewals_move_the_expiry_index_and_lost_leases_stay_out(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    """The sweep finds expired turns through the index: a renewal must push its score forward
    (or a long turn would be pruned from the index and never recovered), a lost one must not
    come back into it."""
    keys = RedisKeys(prefix)
    assert await leases.acquire(TASK, owner=OWNER, holder="a", ttl_s=1)
    assert await leases.acquire("other", owner=OWNER, holder="b", ttl_s=60)
    await leases.release("other", owner=OWNER, holder="b")
    seconds, micros = await client.time()
    now_ms = seconds * 1000 + micros // 1000
    statuses = await leases.renew_many(
        [(TaskRef(OWNER, TASK), "a"), (TaskRef(OWNER, "other"), "b")], ttl_s=60
    )
    assert statuses == [LeaseStatus.HELD, LeaseStatus.LOST]
    member, other = keys.lease_member(OWNER, TASK), keys.lease_member(OWNER, "other")
    score = await client.zscore(index_of(keys, member), member)
    assert score is not None and score >= now_ms + 59_000
    assert await client.zscore(index_of(keys, other), other) is None


async def test_a_lapsed_heartbeat_is_reported_once_and_its_leases_expire_now(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    """A process killed outright: the first heartbeat of another process after its heartbeat
    lapsed learns its name (and no later one does), and handing its leases over makes exactly
    its leases expire now, long before their TTL."""
    assert await leases.heartbeat("dead", ttl_s=0.2) == []
    assert await leases.heartbeat("alive", ttl_s=60) == []
    assert await leases.acquire(TASK, owner=OWNER, holder="dead/1", ttl_s=60)
    assert await leases.acquire("t2", owner=OWNER, holder="dead/2", ttl_s=60)
    assert await leases.acquire("t3", owner=OWNER, holder="alive/1", ttl_s=60)
    assert await leases.acquire("t4", owner=OWNER, holder="dead-not/1", ttl_s=60)
    await asyncio.sleep(0.3)

    assert await leases.heartbeat("alive", ttl_s=60) == ["dead"]
    assert await leases.heartbeat("other", ttl_s=60) == []  # reported once
    assert await leases.expired() == []
    assert await leases.hand_over_process("dead") == 2
    assert sorted(ref.task_id for ref in await leases.expired()) == sorted([TASK, "t2"])
    assert await leases.acquire(TASK, owner=OWNER, holder="alive/2", ttl_s=60)
    assert await leases.renew("t3", owner=OWNER, holder="alive/1", ttl_s=60) == LeaseStatus.HELD
    assert await leases.renew("t4", owner=OWNER, holder="dead-not/1", ttl_s=60) == LeaseStatus.HELD
    assert await client.pttl(RedisKeys(prefix).processes()) > 0


async def test_a_process_that_leaves_is_never_reported(leases: RedisLeaseStore) -> None:
    assert await leases.heartbeat("stopping", ttl_s=0.1) == []
    await leases.leave("stopping")
    await asyncio.sleep(0.2)
    assert await leases.heartbeat("alive", ttl_s=60) == []


def index_of(keys: RedisKeys, member: str) -> str:
    """The running-leases bucket that holds `member`."""
    return keys.running_leases(keys.lease_bucket(member))


async def indexed(client: Redis, prefix: str) -> int:
    """Members in every bucket of the running-leases index."""
    keys = RedisKeys(prefix)
    return sum([await client.zcard(keys.running_leases(n)) for n in range(LEASE_BUCKETS)])


async def test_renewals_spread_over_the_buckets_of_the_index(
    leases: RedisLeaseStore, client: Redis, prefix: str
) -> None:
    """No one key takes every renewal: 64 leases land in most of the 16 buckets, and the sweep
    still finds the expired ones in all of them."""
    for n in range(64):
        assert await leases.acquire(f"t{n}", owner=OWNER, holder="h", ttl_s=0.05)
    keys = RedisKeys(prefix)
    used = [n for n in range(LEASE_BUCKETS) if await client.zcard(keys.running_leases(n))]
    assert len(used) >= 12, used
    await asyncio.sleep(0.1)
    assert sorted(ref.task_id for ref in await leases.expired(limit=100)) == sorted(
        f"t{n}" for n in range(64)
    )
