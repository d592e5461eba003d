"""Every row expires the TTL after it was last written: invisible at once, deleted by the sweep."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from stores.base import JournalWrite, TaskQuery, TaskRef
from stores.models import ChatMessage, PushConfig
from stores.sqlite.factory import create_sqlite_stores
from stores.sqlite.schema import EXPIRING_TABLES
from tests.unit.test_store_contract import chunk_event, make_task

pytestmark = pytest.mark.sqlite

TABLES = (*EXPIRING_TABLES, "journal", "messages", "units")


class Clock:
    """Wall-clock seconds that a test moves."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _rows(db_path: str) -> dict[str, int]:
    with sqlite3.connect(db_path) as raw:
        return {
            table: raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES
        }


async def test_expired_rows_are_invisible_at_once_then_swept(db_path: str) -> None:
    clock = Clock()
    stores = create_sqlite_stores(db_path, ttl_s=60, clock=clock)
    try:
        task = make_task("t-1")
        await stores.leases.acquire(task.id, owner="alice", holder="h", ttl_s=30)
        await stores.tasks.create(task, owner="alice")
        await stores.tasks.publish(task.id, JournalWrite(chunk_event(task, "x")), owner="alice")
        message = ChatMessage(role="user", content="hi")
        await stores.messages.append("ctx-a", [message], owner="alice", unit_id="u1")
        assert await stores.messages.claim("ctx-a", task.id, owner="alice") is None
        await stores.checkpoints.save(task.id, "{}", owner="alice")
        config = PushConfig(id="p1", task_id=task.id, url="https://hooks.example/p1")
        await stores.pushes.put(config, owner="alice")
        await stores.pushes.advance(task.id, 2, owner="alice")
        assert all(_rows(db_path).values()), _rows(db_path)

        clock.now += 59  # written to again before its TTL: it lives on
        await stores.tasks.publish(task.id, JournalWrite(chunk_event(task, "y")), owner="alice")
        clock.now += 2
        assert await stores.tasks.get(task.id, owner="alice") is not None
        assert await stores.checkpoints.load(task.id, owner="alice") is None  # saved 61 s ago

        clock.now += 60
        assert await stores.tasks.get(task.id, owner="alice") is None
        assert await stores.tasks.read(task.id, owner="alice", after=0, timeout_s=0) == []
        page = await stores.tasks.list(TaskQuery(), owner="alice")
        assert (page.tasks, page.total_size) == ([], 0)
        assert await stores.messages.window("ctx-a", owner="alice", limit=10) == []
        assert await stores.pushes.get(task.id, "p1", owner="alice") is None
        assert await stores.pushes.list(task.id, owner="alice") == []
        assert await stores.pushes.cursor(task.id, owner="alice") == 0
        assert not await stores.leases.is_held(task.id, owner="alice")
        assert await stores.leases.expired() == []  # its row expired with the task's TTL

        assert await stores.sweeper.sweep() > 0
        assert _rows(db_path) == dict.fromkeys(TABLES, 0)
    finally:
        await stores.aclose()


async def test_an_expired_id_starts_afresh(db_path: str) -> None:
    """What a new task, conversation or lease of an expired one's id finds: nothing of it."""
    clock = Clock()
    stores = create_sqlite_stores(db_path, ttl_s=60, clock=clock)
    try:
        first = await stores.leases.acquire("t-1", owner="alice", holder="a", ttl_s=30)
        old = ChatMessage(role="user", content="old")
        await stores.messages.append("ctx-a", [old], owner="alice", unit_id="u1")
        clock.now += 61
        assert await stores.leases.acquire("t-1", owner="alice", holder="b", ttl_s=30) == first
        new = ChatMessage(role="user", content="new")
        assert await stores.messages.append("ctx-a", [new], owner="alice", unit_id="u1")
        assert await stores.messages.window("ctx-a", owner="alice", limit=10) == [new]
    finally:
        await stores.aclose()


async def test_the_sweep_runs_by_itself_once_the_stores_are_used(db_path: str) -> None:
    clock = Clock()
    stores = create_sqlite_stores(db_path, ttl_s=60, clock=clock, sweep_interval_s=0.05)
    try:
        await stores.tasks.create(make_task("t-1"), owner="alice")
        clock.now += 61
        for _ in range(100):
            if _rows(db_path)["tasks"] == 0:
                break
            await asyncio.sleep(0.05)
        assert _rows(db_path)["tasks"] == 0, "no sweep deleted the expired task"
    finally:
        await stores.aclose()


async def test_a_lease_of_a_crashed_server_is_found_expired_after_a_restart(db_path: str) -> None:
    clock = Clock()
    stores = create_sqlite_stores(db_path, clock=clock)
    await stores.leases.acquire("t-1", owner="alice", holder="dead/1", ttl_s=30)
    await stores.aclose()  # (as a crash would leave it: the lease is in the file)
    clock.now += 31
    stores = create_sqlite_stores(db_path, clock=clock)
    try:
        assert await stores.leases.expired() == [TaskRef("alice", "t-1")]
        epoch = await stores.leases.acquire("t-1", owner="alice", holder="new/1", ttl_s=30)
        assert epoch == 2 and await stores.leases.expired() == []
    finally:
        await stores.aclose()
