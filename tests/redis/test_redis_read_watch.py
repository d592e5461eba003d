"""Blocking journal reads on a Redis that stops answering end within seconds (ReadWatch).

The stores are built as a replica builds them (`create_redis_stores`), through a TCP proxy
that can black-hole the connection to Redis (tests/e2e_chaos/blackhole.py). Cut: every
blocking read waiting (a lone reader's, and those sharing the multiplexed read) fails with
StoreUnavailable within a few command timeouts, not after its 15 s block. Redis answering:
the reads wait their whole time, and the probe stops once no read waits. Healed: reads work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from stores.base import ANONYMOUS, StoreUnavailable
from stores.models import Task
from stores.redis.factory import RedisStores, create_redis_stores
from stores.redis.read_watch import ReadWatch
from tests.e2e_chaos.blackhole import Blackhole
from tests.redis.conftest import REDIS_URL, _connect, delete_prefix

COMMAND_TIMEOUT_S = 0.5
BLOCK_S = 15.0
ERROR_BOUND_S = 6 * COMMAND_TIMEOUT_S + 2  # ping interval + ping deadline, generously


@pytest.fixture
def proxy() -> Iterator[Blackhole]:
    port = int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    with Blackhole(port) as hole:
        yield hole


@pytest.fixture
async def stores(proxy: Blackhole, prefix: str) -> AsyncIterator[RedisStores]:
    built = create_redis_stores(
        proxy.url,
        prefix=prefix,
        ttl_s=600,
        max_running_turns=8,
        max_streams=32,
        command_timeout_s=COMMAND_TIMEOUT_S,
    )
    try:
        yield built
    finally:
        proxy.heal()
        await built.aclose()
        direct = await _connect()
        await delete_prefix(direct, prefix)
        await direct.aclose()


async def working(stores: RedisStores, task_id: str) -> int:
    task = Task.model_validate(
        {"id": task_id, "contextId": f"c-{task_id}", "status": {"state": "TASK_STATE_WORKING"}}
    )
    return (await stores.tasks.create(task, owner=ANONYMOUS)).position


def watch_of(stores: RedisStores) -> ReadWatch:
    watch = stores.tasks._read_watch
    assert watch is not None
    return watch


async def test_reads_waiting_on_a_cut_off_redis_fail_within_seconds(
    stores: RedisStores, proxy: Blackhole
) -> None:
    after = {t: await working(stores, t) for t in ("alone", "m1", "m2", "m3")}
    lone = asyncio.ensure_future(
        stores.tasks.read("alone", owner=ANONYMOUS, after=after["alone"], timeout_s=BLOCK_S)
    )
    await asyncio.sleep(0.2)  # the lone reader's XREAD is out; the others share one read
    shared = [
        asyncio.ensure_future(
            stores.tasks.read(t, owner=ANONYMOUS, after=after[t], timeout_s=BLOCK_S)
        )
        for t in ("m1", "m2", "m3")
    ]
    await asyncio.sleep(0.2)
    assert not any(read.done() for read in [lone, *shared])

    proxy.cut()
    t0 = time.monotonic()
    outcomes = await asyncio.wait_for(
        asyncio.gather(lone, *shared, return_exceptions=True), BLOCK_S
    )
    took = time.monotonic() - t0
    assert all(isinstance(o, StoreUnavailable) for o in outcomes), outcomes
    assert took < ERROR_BOUND_S, f"the reads failed after {took:.1f}s"
    with pytest.raises(StoreUnavailable):  # a new read on the cut-off Redis fails too
        await stores.tasks.read("alone", owner=ANONYMOUS, after=0, timeout_s=BLOCK_S)

    proxy.heal()
    found = await stores.tasks.read("alone", owner=ANONYMOUS, after=0, timeout_s=BLOCK_S)
    assert [entry.position for entry in found] == [after["alone"]]


async def test_with_redis_answering_reads_wait_their_time_and_the_probe_stops(
    stores: RedisStores,
) -> None:
    after = await working(stores, "quiet")
    pings = 0
    watch = watch_of(stores)
    real_ping = watch._ping

    async def counted() -> None:
        nonlocal pings
        pings += 1
        await real_ping()

    watch._ping = counted
    t0 = time.monotonic()
    found = await stores.tasks.read("quiet", owner=ANONYMOUS, after=after, timeout_s=2.0)
    assert found == [] and time.monotonic() - t0 >= 1.9
    assert pings >= 2  # pinged while the read waited (every command timeout)
    await asyncio.sleep(3 * COMMAND_TIMEOUT_S)
    assert watch._probe is not None and watch._probe.done()  # no read waits: no more pings
    settled = pings
    await asyncio.sleep(2 * COMMAND_TIMEOUT_S)
    assert pings == settled
