"""The factory's three clients: pools sized from the admission limits, kept apart so that a flood
on one never starves another (a caller of a full pool waits, it does not fail), and failing fast
(one command timeout, never retried) when Redis hangs."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis._parsers.encoders import Encoder
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from stores.base import JournalWrite, LeaseStatus, StoreUnavailable
from stores.models import JournalEntry, StatusUpdate, Task, TaskState, TaskStatus
from stores.redis.factory import PoolSizes, create_redis_stores
from stores.redis.journal_mux import SHARD_JOURNALS
from stores.redis.support import HiredisConnection, HiredisSSLConnection
from tests.e2e_redis.support import RedisServer
from tests.loop_timers import live_timers
from tests.redis.conftest import REDIS_URL, TTL_S

pytestmark = pytest.mark.redis

OWNER = "o:{1}"


async def blocked_in(url: str, command: str) -> int:
    """How many connections of the Redis at `url` are blocked in `command` now (CLIENT LIST)."""
    observer = Redis.from_url(url)
    try:
        clients = await observer.client_list()
        return sum(1 for c in clients if c.get("cmd") == command and "b" in c.get("flags", ""))
    finally:
        await observer.aclose()


async def until_blocked(url: str, command: str, count: int) -> None:
    """Wait until `count` connections of the Redis at `url` are blocked in `command`."""
    observer = Redis.from_url(url)
    try:
        for _ in range(200):
            clients = await observer.client_list()
            if sum(1 for client in clients if client.get("cmd") == command) >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"fewer than {count} connections ever blocked in {command}")
    finally:
        await observer.aclose()


def new_task(task_id: str) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.SUBMITTED))


def test_pool_sizes_follow_the_limits() -> None:
    defaults = PoolSizes.for_limits(max_running_turns=64, max_streams=1000)
    assert (defaults.commands, defaults.readers, defaults.leases) == (346, 1016, 72)
    # Raised for a load test: more connections would only be more connection attempts.
    big = PoolSizes.for_limits(max_running_turns=4096, max_streams=20000)
    assert (big.commands, big.readers, big.leases) == (512, 20016, 256)
    small = PoolSizes.for_limits(max_running_turns=1, max_streams=4)
    assert (small.commands, small.readers, small.leases) == (34, 20, 9)


@pytest.mark.parametrize(
    ("url", "packing"),
    [(REDIS_URL, HiredisConnection), ("rediss://127.0.0.1:6380/0", HiredisSSLConnection)],
)
async def test_every_client_packs_its_commands_with_hiredis(url: str, packing: type) -> None:
    """Plain or TLS, as the URL says (nothing connects here)."""
    stores = create_redis_stores(url, max_running_turns=1, max_streams=4)
    try:
        for client in (stores.client, stores.read_client, stores.lease_client, stores.batch_client):
            assert isinstance(client, Redis)
            assert client.connection_pool.connection_class is packing
    finally:
        await stores.aclose()


@pytest.mark.parametrize(
    "command",
    [
        ("EVALSHA", "f" * 40, 2, "a2a:{t}:task", "a2a:{t}:journal", 604_800_000, 0, 1.5, "é"),
        ("SET", b'{"kind":"artifact-update","text":"\\u00e9 \r\n"}', memoryview(b"view")),
        ("CLIENT SETNAME", "a2a-replica"),  # a command name of two words
        (b"XREAD", "BLOCK", 100, "STREAMS", "a2a:{t}:journal", "3-1"),
        ("ZADD", "a2a:index", 1_795_656_009_123.5, "t" * 70_000),  # past the chunking cut
    ],
)
def test_hiredis_packs_the_bytes_redis_py_packs(command: tuple[object, ...]) -> None:
    python, hiredis = Connection(), HiredisConnection()
    assert b"".join(hiredis.pack_command(*command)) == b"".join(python.pack_command(*command))


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """A Redis only this module talks to: CLIENT LIST there counts its tests' connections alone
    (the shared one also serves the other test processes' servers), and it can be frozen."""
    with RedisServer(persistent=False) as server:
        yield server


async def test_a_flood_of_commands_never_starves_a_lease_renewal(
    own_redis: RedisServer, prefix: str
) -> None:
    """What keeps running turns alive (renewals, the readiness probe) has connections of its
    own, and so has the shared batcher (the turns' writes, their leases' acquire and release)."""
    stores = create_redis_stores(
        own_redis.url, prefix=prefix, ttl_s=TTL_S, max_running_turns=1, max_streams=4
    )
    sizes = PoolSizes.for_limits(max_running_turns=1, max_streams=4)
    try:
        assert await stores.leases.acquire("t", owner=OWNER, holder="h", ttl_s=5)
        # Every command connection busy (BLPOP holds one for a second).
        flood = [
            asyncio.create_task(stores.client.blpop([f"{prefix}:nothing"], timeout=1))
            for _ in range(sizes.commands)
        ]
        await until_blocked(own_redis.url, "blpop", sizes.commands)
        queued = asyncio.create_task(stores.client.get(f"{prefix}:nothing-here"))
        renewed = await stores.leases.renew("t", owner=OWNER, holder="h", ttl_s=5)
        assert renewed == LeaseStatus.HELD
        await stores.ping()
        await stores.checkpoints.save("t", "state", owner=OWNER)  # through the batcher
        assert await stores.checkpoints.load("t", owner=OWNER) == "state"
        assert not any(job.done() for job in flood), "the flood ended before the renewal"
        assert not queued.done(), "a command got through the flood"
        assert await asyncio.gather(*flood) == [None] * sizes.commands
        assert await queued is None  # it waited for a connection, it did not fail
    finally:
        await stores.aclose()


async def test_readers_of_many_journals_share_one_blocking_read(
    own_redis: RedisServer, prefix: str
) -> None:
    """Streams on 300 different tasks are four Redis connections blocked in XREAD, not 300 (the
    first reader reads alone, the 299 others share reads of 128 journals each); each reader still
    gets its own task's entries, whenever it comes and from wherever it is."""
    stores = create_redis_stores(
        own_redis.url, prefix=prefix, ttl_s=TTL_S, max_running_turns=1, max_streams=200
    )

    async def publish(task_id: str) -> int:
        update = Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.WORKING))
        event = StatusUpdate(task_id=task_id, context_id="c", status=update.status)
        return await stores.tasks.publish(
            task_id, JournalWrite(event, snapshot=update), owner=OWNER
        )

    def reader(task_id: str, after: int = 1) -> asyncio.Task[list[JournalEntry]]:
        return asyncio.create_task(
            stores.tasks.read(task_id, owner=OWNER, after=after, timeout_s=4)
        )

    try:
        names = [f"t{n}" for n in range(300)]
        for name in names:
            await stores.tasks.create(new_task(name), owner=OWNER)
        timers = live_timers(asyncio.get_running_loop())
        readers = [reader(name) for name in names]
        await until_blocked(own_redis.url, "xread", 4)
        await asyncio.sleep(0.2)
        assert await blocked_in(own_redis.url, "xread") == 1 + math.ceil(299 / SHARD_JOURNALS) == 4
        # Their deadlines share timers (CoarseDeadlines): a few, not one per reader.
        assert live_timers(asyncio.get_running_loop()) - timers < 10
        assert await publish("t0") == 2
        assert [entry.position for entry in await readers[0]] == [2]
        # A reader of a task the read in flight does not cover yet: the read is started again
        # for it (its entry comes long before the read's own 15 s block would end).
        await stores.tasks.create(new_task("late"), owner=OWNER)
        late = reader("late")
        await asyncio.sleep(0.1)
        assert await publish("late") == 2
        assert [entry.position for entry in await late] == [2]
        # A reader behind the position the read waits from gets what is already there.
        assert [entry.position for entry in await reader("t0", after=0)] == [1, 2]
        # The others waited on, undisturbed, and got nothing at their own timeout.
        assert await asyncio.gather(*readers[1:]) == [[]] * 299
    finally:
        await stores.aclose()


async def test_readers_of_one_journal_share_one_blocking_read(
    own_redis: RedisServer, prefix: str
) -> None:
    """10,000 subscribers of one task must not be 10,000 Redis connections."""
    stores = create_redis_stores(
        own_redis.url, prefix=prefix, ttl_s=TTL_S, max_running_turns=1, max_streams=1000
    )
    try:
        await stores.tasks.create(new_task("t"), owner=OWNER)

        def reader(timeout_s: float = 10) -> asyncio.Task[list[JournalEntry]]:
            return asyncio.create_task(
                stores.tasks.read("t", owner=OWNER, after=1, timeout_s=timeout_s)
            )

        readers = [reader() for _ in range(1000)]
        await until_blocked(own_redis.url, "xread", 1)
        await asyncio.sleep(0.2)
        assert await blocked_in(own_redis.url, "xread") == 1
        # One leaves (its client went away), one asks for a shorter wait: the rest are untouched.
        readers.pop().cancel()
        started = time.monotonic()
        assert await reader(timeout_s=0.3) == []
        assert time.monotonic() - started < 2
        update = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.WORKING))
        event = StatusUpdate(task_id="t", context_id="c", status=update.status)
        assert (
            await stores.tasks.publish("t", JournalWrite(event, snapshot=update), owner=OWNER) == 2
        )
        results = await asyncio.wait_for(asyncio.gather(*readers), 5)
        assert {tuple(entry.position for entry in found) for found in results} == {(2,)}
        # Readers that leave (their clients went away) leave no read behind: newcomers, on this
        # task and on another, join the one read there is.
        leaving = [reader() for _ in range(10)]
        await asyncio.sleep(0.1)
        for job in leaving:
            job.cancel()
        await asyncio.gather(*leaving, return_exceptions=True)
        await stores.tasks.create(new_task("u"), owner=OWNER)
        later = [reader() for _ in range(10)] + [
            asyncio.create_task(stores.tasks.read("u", owner=OWNER, after=1, timeout_s=10))
        ]
        await asyncio.sleep(0.2)
        assert await blocked_in(own_redis.url, "xread") == 1
        for job in later:
            job.cancel()
        await asyncio.gather(*later, return_exceptions=True)
    finally:
        await stores.aclose()
    # A closed store's read does not hold its connection until it times out.
    for _ in range(100):
        if await blocked_in(own_redis.url, "xread") == 0:
            break
        await asyncio.sleep(0.02)
    assert await blocked_in(own_redis.url, "xread") == 0, "a closed store's read still blocks"


_HANDSHAKE = {b"HELLO", b"AUTH", b"SELECT", b"CLIENT"}


async def test_a_frozen_redis_fails_within_one_command_timeout(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout_s = 1.0
    sent: list[object] = []
    send = Connection.send_packed_command

    async def counted(self: Connection, command: object, check_health: bool = True) -> None:
        packed = b"".join(command) if isinstance(command, list) else command
        if not isinstance(packed, bytes) or packed.split(b"\r\n")[2] not in _HANDSHAKE:
            sent.append(command)  # a connection's handshake (after a drop) is no resend
        await send(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counted)
    stores = create_redis_stores(
        own_redis.url,
        prefix="a2a-test-frozen",
        ttl_s=TTL_S,
        command_timeout_s=timeout_s,
        max_running_turns=64,
        max_streams=1000,
    )
    try:
        await stores.tasks.create(new_task("t"), owner=OWNER)
        await stores.ping()
        own_redis.freeze()
        try:
            for name, call in {
                "tasks.get": lambda: stores.tasks.get("t", owner=OWNER),
                "leases.acquire": lambda: stores.leases.acquire(
                    "t", owner=OWNER, holder="h", ttl_s=5
                ),
                "ping": stores.ping,
            }.items():
                sent.clear()
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await call()
                took = time.monotonic() - started
                # Sent at most once and timed out once: a timeout is never retried (that is
                # what made a frozen Redis a 20 s wait); a connection dropped by an earlier
                # timeout times out in its handshake. The bound is the 2 s, doubled.
                assert len(sent) <= 1, f"{name} was sent {len(sent)} times to a frozen Redis"
                assert took < 4 * timeout_s, f"{name} took {took:.2f}s on a frozen Redis"
        finally:
            own_redis.thaw()
        record = await stores.tasks.get("t", owner=OWNER)
        assert record is not None and record.task.id == "t"
        await stores.ping()
    finally:
        await stores.aclose()


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "0123abcd", 2, "a2a:{t}:task", b"a2a:{t}:journal", 1.5, -3, ""),
        ("SET", "key", "d\u00e9j\u00e0 vu \u2713"),
        ("CLIENT SETNAME", "a2a-agent-server"),  # a name of two words: split
        (b"GET", b"key"),
        ("SET", bytearray(b"key"), memoryview(b"value")),  # converted by redis-py's serializer
    ],
)
def test_commands_are_packed_as_redis_py_packs_them(args: tuple[Any, ...]) -> None:
    ours = HiredisConnection().pack_command(*args)
    assert b"".join(ours) == b"".join(
        PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode).pack(*args)
    )


def test_a_value_redis_cannot_take_is_refused_as_redis_py_refuses_it() -> None:
    with pytest.raises(DataError):
        HiredisConnection().pack_command("SET", "key", None)
