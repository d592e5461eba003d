"""ListTasks on thousands of tasks: each page is one index range read (EXPLAIN shows it), pages
follow each other by the keyset cursor without gaps, and `total_size` stays cheap past
COUNT_MAX (the planner's estimate)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta

import asyncpg
import pytest

from stores.base import TaskQuery
from stores.codec import dump_task
from stores.models import TaskState
from stores.postgres.listing import COUNT_MAX, page_statement
from stores.postgres.migrations import migrate
from tests.databases import postgres_database
from tests.unit.test_store_contract import T0, make_task

from .conftest import Replicas

TASKS = 12_000
CONTEXTS = 10


async def _insert_tasks(database: str, owner: str) -> None:
    """TASKS tasks straight into the table (as the store writes them, minus the journal): task
    i has status time T0 + i ms, context c<i % CONTEXTS>, and every third one is WORKING."""
    template = dump_task(make_task("TASK-ID", context_id="CTX-ID", at=T0)).decode()
    admin = await asyncpg.connect(database)
    try:
        await admin.execute(
            """
            INSERT INTO tasks (owner, task_id, context_id, state, status_ms, status_us, snapshot,
                               snapshot_position, position, expires_at)
            SELECT $1, 't' || lpad(i::text, 6, '0'), 'c' || (i % $4),
                   CASE WHEN i % 3 = 0 THEN 'TASK_STATE_WORKING' ELSE 'TASK_STATE_SUBMITTED' END,
                   $3::bigint + i, ($3::bigint + i) * 1000,
                   convert_to(replace(replace($2, 'TASK-ID', 't' || lpad(i::text, 6, '0')),
                                      'CTX-ID', 'c' || (i % $4)), 'UTF8'),
                   1, 1, now() + interval '1 hour'
            FROM generate_series(1, $5) AS i
            """,
            owner,
            template,
            int(T0.timestamp() * 1000),
            CONTEXTS,
            TASKS,
        )
        await admin.execute("ANALYZE tasks")
    finally:
        await admin.close()


QUERIES = {
    "all": TaskQuery(page_size=50),
    "by state": TaskQuery(state=TaskState.WORKING, page_size=50),
    "by context": TaskQuery(context_id="c3", page_size=50),
    "by context and state": TaskQuery(context_id="c3", state=TaskState.WORKING, page_size=50),
    "status after": TaskQuery(status_after=T0 + timedelta(milliseconds=5000), page_size=50),
    "a later page": TaskQuery(page_size=50, page_token="FROM-THE-FIRST-PAGE"),
}


@pytest.fixture(scope="module")
def many_tasks() -> Iterator[str]:
    """A database of the module's own, with TASKS tasks (made once: the tests only read)."""
    with postgres_database() as url:
        asyncio.run(_prepared(url))
        yield url


async def _prepared(url: str) -> None:
    await migrate(url)
    await _insert_tasks(url, "alice")


@pytest.mark.parametrize("name", QUERIES)
async def test_a_page_is_an_index_range_read(
    replicas: Replicas, many_tasks: str, name: str
) -> None:
    query = QUERIES[name]
    if query.page_token is not None:
        first = await replicas(url=many_tasks).tasks.list(TaskQuery(page_size=50), owner="alice")
        query = TaskQuery(page_size=50, page_token=first.next_page_token)
    statement, args = page_statement(query, owner="alice")
    admin = await asyncpg.connect(many_tasks)
    try:
        raw = await admin.fetchval(f"EXPLAIN (FORMAT JSON) {statement}", *args)
    finally:
        await admin.close()
    plan = json.dumps(json.loads(raw))
    assert "Seq Scan" not in plan and "Sort" not in plan, plan
    assert '"Index Scan' in plan, plan


async def test_pages_follow_each_other_over_thousands_of_tasks(
    replicas: Replicas, many_tasks: str
) -> None:
    stores = replicas(url=many_tasks)
    seen: list[str] = []
    token = None
    for _ in range(4):
        page = await stores.tasks.list(
            TaskQuery(context_id="c3", page_size=100, page_token=token), owner="alice"
        )
        seen += [task.id for task in page.tasks]
        token = page.next_page_token
    expected = [f"t{i:06d}" for i in range(TASKS, 0, -1) if i % CONTEXTS == 3][:400]
    assert seen == expected
    assert page.total_size == TASKS // CONTEXTS  # within COUNT_MAX: exact


async def test_total_size_past_count_max_is_an_estimate(
    replicas: Replicas, many_tasks: str
) -> None:
    assert TASKS > COUNT_MAX
    page = await replicas(url=many_tasks).tasks.list(TaskQuery(page_size=10), owner="alice")
    assert len(page.tasks) == 10 and page.tasks[0].id == f"t{TASKS:06d}"
    assert COUNT_MAX < page.total_size and abs(page.total_size - TASKS) < TASKS * 0.2
