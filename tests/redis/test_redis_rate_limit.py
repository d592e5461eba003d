"""The token bucket in a real Redis: atomic, shared by replicas, keyed per principal, expiring."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from stores.base import StoreUnavailable
from stores.rate_limit import RateLimit
from stores.redis.keys import RedisKeys
from stores.redis.rate_limit import RedisRateLimiter
from tests.redis.conftest import keys_with_prefix

pytestmark = pytest.mark.redis


async def test_a_burst_up_to_the_limit_passes_then_one_is_refused(
    client: Redis, prefix: str
) -> None:
    limiter = RedisRateLimiter(client, RateLimit.parse("5/minute"), prefix=prefix)
    decisions = [await limiter.acquire("alice") for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    # One token comes back every 12 s; a little of that has passed already.
    assert 11.0 < decisions[-1].retry_after_s <= 12.0
    assert decisions[-1].retry_after_header == "12"


async def test_two_replicas_share_one_bucket(
    client: Redis, other_client: Redis, prefix: str
) -> None:
    limit = RateLimit.parse("20/minute")
    replica_a = RedisRateLimiter(client, limit, prefix=prefix)
    replica_b = RedisRateLimiter(other_client, limit, prefix=prefix)
    decisions = await asyncio.gather(
        *(limiter.acquire("alice") for _ in range(25) for limiter in (replica_a, replica_b))
    )
    assert sum(d.allowed for d in decisions) == 20
    assert not (await replica_a.acquire("alice")).allowed
    assert not (await replica_b.acquire("alice")).allowed


async def test_each_principal_has_its_own_bucket(client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(client, RateLimit.parse("2/minute"), prefix=prefix)
    assert [(await limiter.acquire("alice")).allowed for _ in range(3)] == [True, True, False]
    assert [(await limiter.acquire("bob")).allowed for _ in range(3)] == [True, True, False]


async def test_tokens_come_back_at_the_rate(client: Redis, prefix: str) -> None:
    # 2/second: a token every 500 ms, so the three calls below land well inside one refill.
    limiter = RedisRateLimiter(client, RateLimit.parse("2/second"), prefix=prefix)
    assert all([(await limiter.acquire("alice")).allowed for _ in range(2)])
    refused = await limiter.acquire("alice")
    assert not refused.allowed
    assert 0 < refused.retry_after_s <= 0.5
    await asyncio.sleep(refused.retry_after_s + 0.05)
    assert (await limiter.acquire("alice")).allowed


async def test_one_key_per_principal_with_a_ttl(client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(client, RateLimit.parse("60/minute"), prefix=prefix)
    principal = "api-key:te:am{x}"
    await limiter.acquire(principal)
    key = RedisKeys(prefix).rate_bucket(principal)
    assert key == f"{prefix}:rate:{{api-key%3Ate%3Aam%7Bx%7D}}"
    assert await keys_with_prefix(client, prefix) == [key]
    ttl_ms = await client.pttl(key)
    assert 59_000 < ttl_ms <= 61_000


async def test_an_unreachable_redis_is_store_unavailable(dead_port: int) -> None:
    client = Redis(host="127.0.0.1", port=dead_port, retry=Retry(NoBackoff(), 0))
    limiter = RedisRateLimiter(client, RateLimit.parse("5/minute"), prefix="unused")
    try:
        with pytest.raises(StoreUnavailable):
            await limiter.acquire("alice")
    finally:
        await client.aclose()
