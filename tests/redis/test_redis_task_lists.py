"""ListTasks on Redis (stores.redis.listing), on one Redis and on the test cluster: the pages the
in-memory store gives for the same tasks, page after page, and full correct pages around index
entries that no longer say the truth (an expired task, a state change whose index step was lost, an
index from before the by-state one)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from stores.base import JournalWrite, TaskQuery, TaskStore
from stores.codec import dump_task
from stores.memory import InMemoryTaskStore
from stores.models import StatusUpdate, Task, TaskState, TaskStatus
from stores.redis.keys import RedisKeys
from stores.redis.listing import state_score
from stores.redis.scripts import REPAIR_LISTING
from stores.redis.support import timestamp_ms, timestamp_us
from stores.redis.tasks import RedisTaskStore
from tests.redis.conftest import REDIS_URL
from tests.redis_cluster import cluster_stores_client

pytestmark = pytest.mark.redis

OWNER = "owner:lists{o}"
NOW = datetime.now(UTC).replace(microsecond=0)
T0 = NOW - timedelta(minutes=10)  # recent: no task is old enough to have expired
S = TaskState


@dataclasses.dataclass
class Backend:
    store: RedisTaskStore
    client: Any  # the store's own client (one Redis or the cluster)
    keys: RedisKeys


@pytest.fixture(params=["redis", "redis-cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    client = (
        cluster_stores_client() if request.param == "redis-cluster" else Redis.from_url(REDIS_URL)
    )
    store = RedisTaskStore(client, prefix=prefix, ttl_s=3600)
    try:
        yield Backend(store, client, RedisKeys(prefix))
    finally:
        await store.aclose()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        for key in keys:  # one by one: on a cluster they are in different slots
            await client.delete(key)
        await client.aclose()


def make_task(task_id: str, context_id: str, state: TaskState, at: datetime) -> Task:
    return Task(id=task_id, context_id=context_id, status=TaskStatus(state=state, timestamp=at))


async def move(store: TaskStore, task: Task, state: TaskState, at: datetime) -> Task:
    moved = make_task(task.id, task.context_id, state, at)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=moved.status)
    await store.publish(task.id, JournalWrite(update, snapshot=moved), owner=OWNER)
    return moved


async def all_pages(store: TaskStore, query: TaskQuery) -> list[tuple[list[str], str, int]]:
    """Every page of the query, as (task ids, next page token, total size)."""
    pages: list[tuple[list[str], str, int]] = []
    token = None
    for _ in range(500):
        page = await store.list(dataclasses.replace(query, page_token=token), owner=OWNER)
        pages.append(([task.id for task in page.tasks], page.next_page_token, page.total_size))
        if not page.next_page_token:
            return pages
        token = page.next_page_token
    raise AssertionError(f"{query} did not end")


def mixed_tasks() -> list[Task]:
    """Tasks of three contexts and four states, many of them in the same millisecond (ties broken
    by id), some in the same millisecond but not the same microsecond, on whole milliseconds
    (whose float ms may round down) and off them."""
    rng = random.Random(44)
    offsets_us = [0, 0, 0, 250, 999, 1000, 1000, 1000, 1001, 1500, 2000, 2000, 7000, 7999]
    states = [S.SUBMITTED, S.WORKING, S.COMPLETED, S.FAILED]
    return [
        make_task(
            f"task-{rng.randrange(16**6):06x}",
            rng.choice(["ctx-a", "ctx-b", "ctx:c{x}"]),
            rng.choice(states),
            T0 + timedelta(microseconds=rng.choice(offsets_us)),
        )
        for _ in range(60)
    ]


def edges(tasks: list[Task]) -> list[datetime | None]:
    """`status_after` values: none, before all, each distinct moment, a microsecond after each,
    and the start of each millisecond; and after all."""
    moments = sorted({task.status.timestamp for task in tasks})
    return [
        None,
        T0 - timedelta(days=1),
        *moments,
        *(moment + timedelta(microseconds=1) for moment in moments),
        *(moment.replace(microsecond=moment.microsecond // 1000 * 1000) for moment in moments),
        NOW + timedelta(days=1),
    ]


async def test_every_query_pages_as_the_memory_store_does(backend: Backend) -> None:
    memory = InMemoryTaskStore()
    tasks = mixed_tasks()
    for store in (memory, backend.store):
        for task in tasks:
            await store.create(task, owner=OWNER)
        for n, task in enumerate(tasks[::7]):  # state changes move tasks in time and state
            await move(store, task, S.WORKING, T0 + timedelta(microseconds=1000 * (n % 3) + 1))
        await move(store, tasks[1], S.COMPLETED, T0 + timedelta(seconds=5))
    queries = [
        TaskQuery(context_id=context_id, state=state, status_after=after, page_size=4)
        for context_id in (None, "ctx-a", "ctx:c{x}", "ctx-none")
        for state in (None, S.SUBMITTED, S.WORKING, S.COMPLETED, S.INPUT_REQUIRED)
        for after in edges(tasks)[:: 3 if context_id else 1]
    ]
    queries += [TaskQuery(page_size=size) for size in (1, 7, 59, 60, 61, 100)]
    queries += [TaskQuery(state=S.WORKING, page_size=1), TaskQuery(context_id="ctx-b", page_size=1)]
    for query in queries:
        expected = await all_pages(memory, query)
        assert await all_pages(backend.store, query) == expected, query
        listed = [task_id for ids, _, _ in expected for task_id in ids]
        assert len(listed) == len(set(listed)) == expected[0][2], query
    everything = await all_pages(backend.store, TaskQuery(page_size=9))
    assert sorted(i for ids, _, _ in everything for i in ids) == sorted(t.id for t in tasks)


async def test_paging_while_tasks_move_resumes_as_the_memory_store_does(backend: Backend) -> None:
    """The last task of a page moves before the next page is asked for: the cursor's task is no
    longer at its score, so the next page seeks past the others of its millisecond."""
    memory = InMemoryTaskStore()
    same_ms = [make_task(f"t{n:02d}", "ctx", S.WORKING, T0) for n in range(12)]
    for store in (memory, backend.store):
        for task in same_ms:
            await store.create(task, owner=OWNER)
    for query in (TaskQuery(page_size=3), TaskQuery(state=S.WORKING, page_size=3)):
        pages: dict[str, list[list[str]]] = {}
        for name, store in (("memory", memory), ("redis", backend.store)):
            first = await store.list(query, owner=OWNER)
            last = first.tasks[-1]
            await move(store, last, S.COMPLETED, T0 + timedelta(seconds=1))
            token = first.next_page_token
            second = await store.list(dataclasses.replace(query, page_token=token), owner=OWNER)
            await move(store, last, S.WORKING, T0)  # back, for the next query
            pages[name] = [[t.id for t in first.tasks], [t.id for t in second.tasks]]
        assert pages["redis"] == pages["memory"], query
        assert pages["redis"][1] == ["t08", "t07", "t06"], pages


async def test_a_state_change_moves_the_task_between_state_filters(backend: Backend) -> None:
    store = backend.store
    task = make_task("moving", "ctx", S.SUBMITTED, T0)
    await store.create(task, owner=OWNER)
    await store.create(make_task("staying", "ctx", S.SUBMITTED, T0), owner=OWNER)

    async def ids(state: TaskState, context_id: str | None = None) -> tuple[list[str], int]:
        page = await store.list(TaskQuery(state=state, context_id=context_id), owner=OWNER)
        return [t.id for t in page.tasks], page.total_size

    assert await ids(S.SUBMITTED) == (["staying", "moving"], 2)
    await move(store, task, S.WORKING, T0 + timedelta(seconds=1))
    for context_id in (None, "ctx"):
        assert await ids(S.SUBMITTED, context_id) == (["staying"], 1)
        assert await ids(S.WORKING, context_id) == (["moving"], 1)
    await move(store, task, S.COMPLETED, T0 + timedelta(seconds=2))
    assert await ids(S.WORKING) == ([], 0)
    assert await ids(S.COMPLETED, "ctx") == (["moving"], 1)


async def test_stale_entries_give_full_correct_pages(backend: Backend) -> None:
    """Tasks deleted behind the indexes (as an expiry does) and one whose state change reached
    its hash but not the indexes (a cut connection between the two steps): every page is still
    full and right, the stale entries are repaired, and the next lists are exact."""
    store, client, keys = backend.store, backend.client, backend.keys
    memory = InMemoryTaskStore()
    tasks = [
        make_task(f"t{n:02d}", f"ctx-{n % 2}", S.WORKING if n % 3 else S.SUBMITTED, T0)
        for n in range(30)
    ]
    gone = {task.id for task in tasks[3:25:4]}
    for task in tasks:
        await store.create(task, owner=OWNER)
        if task.id not in gone:
            await memory.create(task, owner=OWNER)
    for task_id in gone:
        await client.delete(keys.task(OWNER, task_id))
        await client.delete(keys.journal(OWNER, task_id))
    # t10's hash says COMPLETED, newest; its index entries still say WORKING at T0.
    done = await move(memory, tasks[10], S.COMPLETED, T0 + timedelta(seconds=1))
    fields = {"task": dump_task(done), "state": S.COMPLETED.value,
              "ms": timestamp_ms(done.status.timestamp), "us": timestamp_us(done.status.timestamp)}  # fmt: skip
    await client.hset(keys.task(OWNER, done.id), mapping=fields)

    queries = [
        TaskQuery(context_id=context_id, state=state, page_size=4)
        for context_id in (None, "ctx-0")
        for state in (None, S.WORKING, S.SUBMITTED, S.COMPLETED)
    ]
    for query in queries:
        pages = await all_pages(store, query)
        listed = [task_id for ids, _, _ in pages for task_id in ids]
        assert not set(listed) & gone, (query, listed)
        assert len(listed) == len(set(listed)), query
        if query.state is None:  # t10 moved since its entries were written: listed all the same
            assert done.id in listed, (query, listed)
        assert all(len(ids) == 4 for ids, token, _ in pages if token), (query, pages)
        for task_id in listed:  # each one as its filter says
            record = await store.get(task_id, owner=OWNER)
            assert record is not None
            assert query.state in (None, record.task.status.state), (query, task_id)
    for query in queries:  # repaired: exact, totals too
        assert await all_pages(store, query) == await all_pages(memory, query), query
    by_time, by_state = keys.owner_tasks(OWNER), keys.owner_tasks_by_state(OWNER)
    for task_id in gone:
        assert await client.zscore(by_time, task_id) is None
        assert await client.zscore(by_state, task_id) is None
    assert await client.zscore(by_time, done.id) == timestamp_ms(done.status.timestamp)


async def test_expired_old_tasks_leave_the_total_before_a_page_reaches_them(
    backend: Backend,
) -> None:
    store, client, keys = backend.store, backend.client, backend.keys
    old = [make_task(f"old{n}", "ctx", S.COMPLETED, NOW - timedelta(hours=2, seconds=n)) for n in range(5)]  # fmt: skip
    new = [make_task(f"new{n}", "ctx", S.COMPLETED, T0 + timedelta(seconds=n)) for n in range(5)]
    for task in (*old, *new):
        await store.create(task, owner=OWNER)
    for task in old[1:4]:  # expired (older than the store's TTL of an hour)
        await client.delete(keys.task(OWNER, task.id))
    for query in (TaskQuery(page_size=1), TaskQuery(state=S.COMPLETED, page_size=1)):
        page = await store.list(query, owner=OWNER)
        assert [t.id for t in page.tasks] == ["new4"]
        assert page.total_size == 7, query


async def test_an_index_from_before_the_by_state_one_is_rebuilt(backend: Backend) -> None:
    """Tasks listed by an older version: in the by-time indexes only. The first list by state
    adds them to the by-state index, and they are listed by state from then on."""
    store, client, keys = backend.store, backend.client, backend.keys
    memory = InMemoryTaskStore()
    for n in range(8):
        task = make_task(f"t{n}", "ctx", S.COMPLETED if n % 2 else S.WORKING, T0 + timedelta(n))
        for each in (store, memory):
            await each.create(task, owner=OWNER)
    await client.delete(keys.owner_tasks_by_state(OWNER))
    await client.delete(keys.context_tasks_by_state(OWNER, "ctx"))
    for query in (
        TaskQuery(state=S.COMPLETED, page_size=3),
        TaskQuery(state=S.WORKING, context_id="ctx", page_size=3),
    ):
        assert await all_pages(store, query) == await all_pages(memory, query), query
    assert await client.zcard(keys.owner_tasks_by_state(OWNER)) == 8
    assert 0 < await client.pttl(keys.owner_tasks_by_state(OWNER))


async def test_a_repair_leaves_an_entry_that_moved_since_it_was_read(backend: Backend) -> None:
    """A list reads an entry, a publish moves the task, then the list's repair comes: the entry
    keeps the publish's scores (a repair acts only on an entry still at the score it read)."""
    store, client, keys = backend.store, backend.client, backend.keys
    task = make_task("raced", "ctx", S.WORKING, T0)
    await store.create(task, owner=OWNER)
    pair = [keys.owner_tasks(OWNER), keys.owner_tasks_by_state(OWNER)]
    read_at = timestamp_ms(T0)
    moved = await move(store, task, S.COMPLETED, T0 + timedelta(seconds=3))
    now_ms = timestamp_ms(moved.status.timestamp)
    stale_fix = [3_600_000, 1, task.id, read_at, read_at + 1, state_score(S.WORKING.value, 0)]
    await REPAIR_LISTING(client, pair, stale_fix)
    await REPAIR_LISTING(client, pair, [3_600_000, 1, task.id, read_at, "", ""])  # "gone"
    assert await client.zscore(pair[0], task.id) == now_ms
    assert await client.zscore(pair[1], task.id) == state_score(S.COMPLETED.value, now_ms)
    page = await store.list(TaskQuery(state=S.COMPLETED), owner=OWNER)
    assert [t.id for t in page.tasks] == ["raced"] and page.total_size == 1
