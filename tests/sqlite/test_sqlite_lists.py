"""ListTasks on thousands of tasks reads one page by index (no scan of the tasks, no sort), and
a store with `max_tasks` makes room by its oldest ended tasks."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta

import pytest

from stores.base import JournalWrite, StoreFull, TaskQuery, TaskRef
from stores.models import TaskState
from stores.sqlite.factory import create_sqlite_stores
from stores.sqlite.listing import page_query
from stores.sqlite.schema import ENDED
from tests.unit.test_store_contract import T0, make_task, status_event, with_state

pytestmark = pytest.mark.sqlite

CLONES = 3000


def _clone(db_path: str, owner: str) -> None:
    """CLONES more tasks of `owner` like its one task, a second apart, in three contexts, every
    other one completed (written in one transaction: the plan is the point, not the writes)."""
    with sqlite3.connect(db_path) as raw:
        raw.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO tasks (owner, task_id, context_id, state, status_ms, status_us,"
            " snapshot, snapshot_position, position, expires_at)"
            " SELECT owner, printf('clone-%05d', i), 'ctx-' || (i % 3),"
            " CASE i % 2 WHEN 0 THEN 'TASK_STATE_COMPLETED' ELSE state END,"
            " status_ms - i * 1000, status_us - i * 1000000, snapshot, 1, 1, expires_at"
            " FROM tasks, n WHERE owner = ?",
            (CLONES, owner),
        )


async def test_a_page_of_thousands_is_read_by_index(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    try:
        for owner in ("alice", "bob"):
            await stores.tasks.create(make_task(context_id="ctx-0"), owner=owner)
            _clone(db_path, owner)
        first = await stores.tasks.list(TaskQuery(page_size=20), owner="alice")
        assert (len(first.tasks), first.total_size) == (20, CLONES + 1)
        second = await stores.tasks.list(
            TaskQuery(page_size=20, page_token=first.next_page_token), owner="alice"
        )
        assert len(second.tasks) == 20 and second.next_page_token
        done = await stores.tasks.list(TaskQuery(state=TaskState.COMPLETED), owner="alice")
        assert done.total_size == CLONES // 2

        queries = [
            TaskQuery(),
            TaskQuery(page_token=first.next_page_token),
            TaskQuery(state=TaskState.COMPLETED),
            TaskQuery(context_id="ctx-1"),
            TaskQuery(context_id="ctx-1", state=TaskState.SUBMITTED),
            TaskQuery(status_after=T0 - timedelta(minutes=5), page_token=first.next_page_token),
        ]
        with sqlite3.connect(db_path) as raw:
            for query in queries:
                sql = page_query(query, "alice", 0)
                for statement, args in (
                    (sql.count_sql, sql.count_args),
                    (sql.page_sql, sql.page_args),
                ):
                    plan = [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {statement}", args)]
                    assert len(plan) == 1 and plan[0].startswith("SEARCH tasks USING"), (
                        query,
                        plan,
                    )
                    assert "INDEX" in plan[0] and "(owner=?" in plan[0], (query, plan)
                    if query.page_token and statement == sql.page_sql:  # seeks, not skips
                        assert "(status_ms,task_id)<(?,?)" in plan[0], (query, plan)
    finally:
        await stores.aclose()


async def test_at_max_tasks_the_oldest_ended_tasks_make_room(db_path: str) -> None:
    stores = create_sqlite_stores(db_path, max_tasks=3)
    try:
        tasks = [make_task(at=T0 + timedelta(minutes=minute)) for minute in range(4)]
        for task in tasks[:3]:
            await stores.tasks.create(task, owner="alice")
        with pytest.raises(StoreFull):
            await stores.tasks.create(tasks[3], owner="alice")
        ended = with_state(tasks[1], TaskState.COMPLETED)
        write = JournalWrite(status_event(tasks[1], TaskState.COMPLETED), snapshot=ended)
        await stores.tasks.publish(tasks[1].id, write, owner="alice")
        await stores.tasks.create(tasks[3], owner="alice")
        assert await stores.tasks.get(tasks[1].id, owner="alice") is None
        kept = await stores.tasks.list(TaskQuery(), owner="alice")
        assert {task.id for task in kept.tasks} == {tasks[0].id, tasks[2].id, tasks[3].id}
    finally:
        await stores.aclose()


async def test_a_cancel_request_reaches_the_listeners_and_the_holder(db_path: str) -> None:
    stores = create_sqlite_stores(db_path)
    try:
        await stores.leases.acquire("t-1", owner="alice", holder="h", ttl_s=30)
        requests = stores.leases.cancel_requests()
        heard = asyncio.ensure_future(anext(requests))
        await asyncio.sleep(0.01)  # listening
        await stores.leases.request_cancel("t-1", owner="alice")
        assert await asyncio.wait_for(heard, 5) == TaskRef("alice", "t-1")
        status = await stores.leases.renew("t-1", owner="alice", holder="h", ttl_s=30)
        assert status.value == "cancel_requested"
        await requests.aclose()  # type: ignore[attr-defined]
    finally:
        await stores.aclose()


def test_the_ended_index_names_every_terminal_state() -> None:
    """A terminal state the index missed would never make room (StoreFull for good)."""
    terminal = {state.value for state in TaskState if state.is_terminal}
    assert {value for value in terminal if f"'{value}'" in ENDED} == terminal
    assert ENDED.count("'TASK_STATE_") == len(terminal)
