"""Every row expires `ttl_s` after its last write: invisible from then on, and deleted by the
sweep (which a replica runs by itself) without touching live rows."""

from __future__ import annotations

import asyncio

import asyncpg

from stores.base import Fence, JournalWrite, TaskQuery
from stores.models import ChatMessage, PushConfig
from stores.postgres.factory import PostgresStores
from tests.unit.test_store_contract import chunk_event, make_task

from .conftest import Replicas

_TABLES = ("tasks", "journal", "conversations", "messages", "claims", "checkpoints", "push_configs")


async def _rows(database: str) -> dict[str, int]:
    admin = await asyncpg.connect(database)
    try:
        return {
            table: int(await admin.fetchval(f"SELECT count(*) FROM {table}")) for table in _TABLES
        }
    finally:
        await admin.close()


async def _write_everything(s: PostgresStores, owner: str) -> str:
    task = make_task(context_id=f"ctx-{owner}")
    epoch = await s.leases.acquire(task.id, owner=owner, holder="p/1", ttl_s=0.5)
    await s.tasks.create(task, owner=owner)
    await s.tasks.publish(task.id, JournalWrite(chunk_event(task, "x")), owner=owner)
    await s.messages.append(
        task.context_id, [ChatMessage(role="user", content="hi")], owner=owner, unit_id="u1"
    )
    await s.messages.claim(task.context_id, task.id, owner=owner, fence=Fence("p/1", epoch))
    await s.checkpoints.save(task.id, "{}", owner=owner)
    await s.pushes.put(
        PushConfig(id="c1", task_id=task.id, url="https://hooks.example/c1"), owner=owner
    )
    return task.id


async def test_expired_rows_are_invisible_then_swept(replicas: Replicas, database: str) -> None:
    lasting = replicas(ttl_s=3600)
    expiring = replicas(ttl_s=1, sweep_interval_s=0.3)
    kept = await _write_everything(lasting, "keeper")
    gone = await _write_everything(expiring, "leaver")
    context = "ctx-leaver"
    await asyncio.sleep(1.2)

    assert await expiring.tasks.get(gone, owner="leaver") is None
    page = await expiring.tasks.list(TaskQuery(), owner="leaver")
    assert page.tasks == [] and page.total_size == 0
    assert await expiring.tasks.read(gone, owner="leaver", after=0, timeout_s=0) == []
    assert await expiring.messages.window(context, owner="leaver", limit=10) == []
    assert await expiring.checkpoints.load(gone, owner="leaver") is None
    assert await expiring.pushes.list(gone, owner="leaver") == []
    assert await expiring.messages.claim(context, "another", owner="leaver") is None, (
        "an expired claim still held the context"
    )
    assert not await expiring.leases.is_held(gone, owner="leaver")

    for _ in range(30):  # the expiring replica's sweep runs every 0.3 s
        rows = await _rows(database)
        if rows["tasks"] == 1 and rows["journal"] == 2 and rows["checkpoints"] == 1:
            break
        await asyncio.sleep(0.2)
    # Left: the lasting replica's rows (and the claim just taken above).
    assert rows == {
        "tasks": 1,
        "journal": 2,
        "conversations": 1,
        "messages": 1,
        "claims": 2,
        "checkpoints": 1,
        "push_configs": 1,
    }, rows
    record = await lasting.tasks.get(kept, owner="keeper")
    assert record is not None
    assert len(await lasting.tasks.read(kept, owner="keeper", after=0, timeout_s=0)) == 2


async def test_a_publish_keeps_a_task_alive(replicas: Replicas) -> None:
    stores = replicas(ttl_s=1)
    task = make_task()
    await stores.tasks.create(task, owner="alice")
    for text in ("a", "b", "c"):
        await asyncio.sleep(0.5)
        await stores.tasks.publish(task.id, JournalWrite(chunk_event(task, text)), owner="alice")
    assert await stores.tasks.get(task.id, owner="alice") is not None
    assert len(await stores.tasks.read(task.id, owner="alice", after=0, timeout_s=0)) == 4


async def test_a_lease_epoch_outlives_its_row_ttl_while_its_task_lives(
    replicas: Replicas,
) -> None:
    stores = replicas(ttl_s=1, sweep_interval_s=0.2)
    task = make_task()
    first = await stores.leases.acquire(task.id, owner="alice", holder="a", ttl_s=0.1)
    await stores.tasks.create(task, owner="alice")
    await stores.leases.release(task.id, owner="alice", holder="a")
    for _ in range(4):  # the task is written to; its lease row is not
        await asyncio.sleep(0.4)
        await stores.tasks.publish(task.id, JournalWrite(chunk_event(task, "x")), owner="alice")
    assert await stores.leases.acquire(task.id, owner="alice", holder="b", ttl_s=5) > first
