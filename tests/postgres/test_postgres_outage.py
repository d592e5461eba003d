"""The database away: every call fails with StoreUnavailable within about one command timeout
(never an asyncpg exception, never a hang), and the stores recover by themselves once it is
back; a reader waiting while its replica's connections are cut misses no entry."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import asyncpg
import pytest

from stores.base import JournalWrite, StoreUnavailable
from tests.unit.test_store_contract import chunk_event, make_task

from .conftest import Replicas


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a frozen or partitioned server)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


async def _unavailable_within(call: object, seconds: float) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await call  # type: ignore[misc]
    assert time.monotonic() - started < seconds


async def test_a_closed_port_is_unavailable_at_once_every_time(replicas: Replicas) -> None:
    stores = replicas(url=f"postgresql://postgres@127.0.0.1:{_closed_port()}/x")
    for _ in range(2):  # the second call tries again, and fails the same way
        await _unavailable_within(stores.tasks.get("t1", owner="alice"), 2)
    await _unavailable_within(stores.ping(), 2)
    await _unavailable_within(stores.leases.acquire("t1", owner="a", holder="h", ttl_s=5), 2)


async def test_a_silent_server_is_unavailable_within_the_command_timeout(
    replicas: Replicas, silent_port: int
) -> None:
    stores = replicas(url=f"postgresql://postgres@127.0.0.1:{silent_port}/x", command_timeout_s=0.5)
    await _unavailable_within(stores.tasks.get("t1", owner="alice"), 2)
    await _unavailable_within(stores.tasks.read("t1", owner="alice", after=0, timeout_s=30), 2)


async def test_callers_during_an_outage_share_one_connection_attempt(
    replicas: Replicas, silent_port: int
) -> None:
    """Twenty requests at once on a silent server all fail within about one command timeout:
    they wait for the same attempt to connect, not for each other's in turn."""
    stores = replicas(url=f"postgresql://postgres@127.0.0.1:{silent_port}/x", command_timeout_s=0.5)
    started = time.monotonic()
    results = await asyncio.gather(
        *(stores.tasks.get(f"t{i}", owner="alice") for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(result, StoreUnavailable) for result in results), results
    assert time.monotonic() - started < 2


async def _terminate_connections(database: str) -> int:
    admin = await asyncpg.connect(database)
    try:
        return int(
            await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
    finally:
        await admin.close()


async def test_cut_connections_are_replaced(replicas: Replicas, database: str) -> None:
    stores = replicas()
    task = make_task()
    await stores.tasks.create(task, owner="alice")
    assert await _terminate_connections(database) >= 1
    for _ in range(3):  # a call on a cut connection may fail; the pool replaces it
        try:
            record = await stores.tasks.get(task.id, owner="alice")
            break
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the stores did not recover from cut connections")
    assert record is not None and record.task == task
    await stores.ping()


async def test_a_waiting_reader_misses_nothing_when_its_connections_are_cut(
    replicas: Replicas, database: str
) -> None:
    writer, reader = replicas(), replicas()
    task = make_task()
    await writer.tasks.create(task, owner="alice")
    reading = asyncio.create_task(reader.tasks.read(task.id, owner="alice", after=1, timeout_s=20))
    await asyncio.sleep(0.5)  # waiting, on the reader's listening connection
    await _terminate_connections(database)
    await asyncio.sleep(0.5)  # the reader reads again and listens anew
    assert not reading.done(), "the reader stopped waiting"
    for _ in range(3):  # the writer's own pooled connection was cut too
        try:
            await writer.tasks.publish(task.id, JournalWrite(chunk_event(task, "x")), owner="alice")
            break
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    entries = await asyncio.wait_for(reading, 3)
    assert [entry.position for entry in entries] == [2]
