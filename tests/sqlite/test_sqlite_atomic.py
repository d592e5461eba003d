"""Writes are whole transactions on one writer: concurrent writers never interleave, and a caller
cancelled mid-write leaves the write done or undone, never half."""

from __future__ import annotations

import asyncio

import pytest

from stores.base import JournalWrite
from stores.codec import dump_event
from stores.sqlite.factory import create_sqlite_stores
from tests.unit.test_store_contract import chunk_event, make_task

pytestmark = pytest.mark.sqlite


async def test_concurrent_publishes_take_contiguous_positions(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    try:
        task = make_task()
        await stores.tasks.create(task, owner="alice")
        batches = [[dump_event(chunk_event(task, f"{i}.{j}")) for j in range(3)] for i in range(30)]
        lasts = await asyncio.gather(
            *(stores.tasks.publish_chunks(task.id, batch, owner="alice") for batch in batches)
        )
        assert sorted(lasts) == list(range(4, 2 + 3 * 30, 3))
        entries = await stores.tasks.read(task.id, owner="alice", after=0, timeout_s=0)
        assert [entry.position for entry in entries] == list(range(1, 2 + 3 * 30))
        texts = [entry.event.artifact.parts[0].text for entry in entries[1:]]  # type: ignore[union-attr]
        for i in range(30):  # each batch's chunks side by side, in their order
            at = texts.index(f"{i}.0")
            assert texts[at : at + 3] == [f"{i}.0", f"{i}.1", f"{i}.2"]
    finally:
        await stores.aclose()


async def test_a_cancelled_writer_leaves_no_half_write(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    try:
        task = make_task()
        await stores.tasks.create(task, owner="alice")
        batch = [dump_event(chunk_event(task, str(j))) for j in range(50)]
        writes = [
            asyncio.ensure_future(stores.tasks.publish_chunks(task.id, batch, owner="alice"))
            for _ in range(10)
        ]
        await asyncio.sleep(0)
        for write in writes[::2]:
            write.cancel()
        await asyncio.gather(*writes, return_exceptions=True)
        after = await stores.tasks.publish(
            task.id, JournalWrite(chunk_event(task, "end")), owner="alice"
        )
        entries = await stores.tasks.read(task.id, owner="alice", after=0, timeout_s=0)
        assert [entry.position for entry in entries] == list(range(1, after + 1))
        assert (after - 2) % 50 == 0, "a batch was journaled in part"
    finally:
        await stores.aclose()
