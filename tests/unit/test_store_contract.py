"""One contract for every store backend.

The `task_store` / `message_store` / `checkpoint_store` fixtures are parametrized over backend
names; each name maps to an async context-manager factory in the `*_BACKENDS` dicts. To run the
suite against another backend (e.g. Redis), add a factory there and its name to `BACKENDS` (mark
it `pytest.mark.redis`). Every test uses a fresh owner, so backends that share state across tests
(a real Redis) do not see each other's data.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from stores.base import (
    CheckpointStore,
    ClaimHolder,
    InvalidPageToken,
    JournalWrite,
    MessageStore,
    TaskGone,
    TaskQuery,
    TaskStore,
)
from stores.codec import dump_event, dump_task, load_task, snapshot_event
from stores.memory import InMemoryCheckpointStore, InMemoryMessageStore, InMemoryTaskStore
from stores.models import (
    Artifact,
    ArtifactUpdate,
    ChatMessage,
    Message,
    Part,
    Role,
    StatusUpdate,
    Task,
    TaskSnapshot,
    TaskState,
    TaskStatus,
    ToolCall,
    event_state,
)
from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.messages import RedisMessageStore
from stores.redis.tasks import RedisTaskStore
from stores.sqlite.factory import SQLiteStores
from stores.tenants import tenant_owner
from tests.postgres_stores import postgres_stores
from tests.redis_cluster import cluster_stores_client

from .backends import sqlite_stores


@contextlib.asynccontextmanager
async def _memory_task_store() -> AsyncIterator[TaskStore]:
    yield InMemoryTaskStore()


@contextlib.asynccontextmanager
async def _memory_message_store() -> AsyncIterator[MessageStore]:
    yield InMemoryMessageStore()


@contextlib.asynccontextmanager
async def _memory_checkpoint_store() -> AsyncIterator[CheckpointStore]:
    yield InMemoryCheckpointStore()


TASK_STORE_BACKENDS: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[TaskStore]]] = {
    "memory": _memory_task_store,
}
MESSAGE_STORE_BACKENDS: dict[
    str, Callable[[], contextlib.AbstractAsyncContextManager[MessageStore]]
] = {
    "memory": _memory_message_store,
}
CHECKPOINT_STORE_BACKENDS: dict[
    str, Callable[[], contextlib.AbstractAsyncContextManager[CheckpointStore]]
] = {
    "memory": _memory_checkpoint_store,
}
REDIS_URL = "redis://127.0.0.1:6379/0"


@contextlib.asynccontextmanager
async def _redis(
    make: Callable[[Any, Any, str], Any], *, cluster: bool = False
) -> AsyncIterator[Any]:
    """A Redis-backed store (one Redis, or the test cluster) under a key prefix of its own,
    removed afterwards."""
    prefix = f"a2a-test-{uuid.uuid4().hex}"
    if cluster:
        client = cluster_stores_client()
        read_client = cluster_stores_client(socket_timeout=None)  # blocking reads
    else:
        client = Redis.from_url(REDIS_URL)
        read_client = Redis.from_url(REDIS_URL, socket_timeout=None)  # blocking reads
    try:
        yield make(client, read_client, prefix)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await read_client.aclose()
        await client.aclose()


TASK_STORE_BACKENDS["redis"] = lambda: _redis(
    lambda client, reader, prefix: RedisTaskStore(
        client, prefix=prefix, ttl_s=3600, read_client=reader
    )
)
MESSAGE_STORE_BACKENDS["redis"] = lambda: _redis(
    lambda client, _, prefix: RedisMessageStore(client, prefix=prefix, ttl_s=3600)
)
CHECKPOINT_STORE_BACKENDS["redis"] = lambda: _redis(
    lambda client, _, prefix: RedisCheckpointStore(client, prefix=prefix, ttl_s=3600)
)
TASK_STORE_BACKENDS["redis-cluster"] = lambda: _redis(
    lambda client, reader, prefix: RedisTaskStore(
        client, prefix=prefix, ttl_s=3600, read_client=reader
    ),
    cluster=True,
)
MESSAGE_STORE_BACKENDS["redis-cluster"] = lambda: _redis(
    lambda client, _, prefix: RedisMessageStore(client, prefix=prefix, ttl_s=3600), cluster=True
)
CHECKPOINT_STORE_BACKENDS["redis-cluster"] = lambda: _redis(
    lambda client, _, prefix: RedisCheckpointStore(client, prefix=prefix, ttl_s=3600),
    cluster=True,
)


@contextlib.asynccontextmanager
async def _sqlite(pick: Callable[[SQLiteStores], Any]) -> AsyncIterator[Any]:
    async with sqlite_stores() as stores:
        yield pick(stores)


TASK_STORE_BACKENDS["sqlite"] = lambda: _sqlite(lambda stores: stores.tasks)
MESSAGE_STORE_BACKENDS["sqlite"] = lambda: _sqlite(lambda stores: stores.messages)
CHECKPOINT_STORE_BACKENDS["sqlite"] = lambda: _sqlite(lambda stores: stores.checkpoints)


@contextlib.asynccontextmanager
async def _postgres(pick: Callable[[Any], Any]) -> AsyncIterator[Any]:
    """A PostgreSQL store, on the test process's database emptied first."""
    async with postgres_stores() as stores:
        yield pick(stores)


TASK_STORE_BACKENDS["postgres"] = lambda: _postgres(lambda stores: stores.tasks)
MESSAGE_STORE_BACKENDS["postgres"] = lambda: _postgres(lambda stores: stores.messages)
CHECKPOINT_STORE_BACKENDS["postgres"] = lambda: _postgres(lambda stores: stores.checkpoints)

BACKENDS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("sqlite", marks=pytest.mark.sqlite),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
async def task_store(request: pytest.FixtureRequest) -> AsyncIterator[TaskStore]:
    async with TASK_STORE_BACKENDS[request.param]() as store:
        yield store


@pytest.fixture(params=BACKENDS)
async def message_store(request: pytest.FixtureRequest) -> AsyncIterator[MessageStore]:
    async with MESSAGE_STORE_BACKENDS[request.param]() as store:
        yield store


@pytest.fixture(params=BACKENDS)
async def checkpoint_store(request: pytest.FixtureRequest) -> AsyncIterator[CheckpointStore]:
    async with CHECKPOINT_STORE_BACKENDS[request.param]() as store:
        yield store


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["principal", "tenant"])
def other_owner(request: pytest.FixtureRequest, owner: str) -> str:
    """Another principal's owner, or the same principal's within a tenant (stores.tenants): both
    are other owners, whose data no key of `owner` reaches."""
    if request.param == "tenant":
        return tenant_owner("acme", owner)
    return f"other-{uuid.uuid4().hex[:10]}"


# --- builders --------------------------------------------------------------------------------

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def make_task(
    task_id: str | None = None,
    *,
    context_id: str = "ctx-a",
    state: TaskState = TaskState.SUBMITTED,
    at: datetime | None = None,
) -> Task:
    task_id = task_id or f"t-{uuid.uuid4().hex[:10]}"
    return Task(
        id=task_id,
        context_id=context_id,
        status=TaskStatus(state=state, timestamp=at or T0),
        history=[
            Message(
                message_id=f"m-{task_id}",
                role=Role.USER,
                parts=[Part(text="hi")],
                task_id=task_id,
                context_id=context_id,
            )
        ],
    )


def status_event(task: Task, state: TaskState) -> StatusUpdate:
    return StatusUpdate(task_id=task.id, context_id=task.context_id, status=TaskStatus(state=state))


def chunk_event(task: Task, text: str, *, append: bool = True) -> ArtifactUpdate:
    return ArtifactUpdate(
        task_id=task.id,
        context_id=task.context_id,
        artifact=Artifact(artifact_id="a1", parts=[Part(text=text)]),
        append=append,
    )


def with_state(task: Task, state: TaskState, at: datetime | None = None) -> Task:
    changed = task.model_copy(deep=True)
    changed.status = TaskStatus(state=state, timestamp=at or changed.status.timestamp)
    return changed


# --- TaskStore: create / get -----------------------------------------------------------------


async def test_create_then_get(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    created = await task_store.create(task, owner=owner)
    assert created.position == 1
    assert created.owner == owner
    assert created.task == task

    record = await task_store.get(task.id, owner=owner)
    assert record is not None
    assert record.task == task
    assert record.position == 1
    assert record.owner == owner


async def test_get_is_scoped_to_the_owner(
    task_store: TaskStore, owner: str, other_owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    assert await task_store.get(task.id, owner=other_owner) is None
    assert await task_store.get("no-such-task", owner=owner) is None


async def test_same_task_id_under_two_owners_is_two_tasks(
    task_store: TaskStore, owner: str, other_owner: str
) -> None:
    mine = make_task("shared-id", context_id="mine")
    theirs = make_task("shared-id", context_id="theirs")
    await task_store.create(mine, owner=owner)
    await task_store.create(theirs, owner=other_owner)
    assert (await task_store.get("shared-id", owner=owner)).task.context_id == "mine"
    assert (await task_store.get("shared-id", owner=other_owner)).task.context_id == "theirs"


async def test_get_returns_copies(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)

    fetched = (await task_store.get(task.id, owner=owner)).task
    fetched.status.state = TaskState.FAILED
    fetched.history.append(fetched.history[0].model_copy())
    fetched.artifacts.append(Artifact(artifact_id="x", parts=[Part(text="x")]))
    fetched.metadata = {"mutated": True}

    again = (await task_store.get(task.id, owner=owner)).task
    assert again == task
    assert again.status.state == TaskState.SUBMITTED


async def test_create_and_publish_keep_their_own_copy(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    created = await task_store.create(task, owner=owner)
    task.status.state = TaskState.FAILED  # the caller's object, changed after create
    created.task.history.clear()  # the returned record, changed too
    stored = (await task_store.get(task.id, owner=owner)).task
    assert stored.status.state == TaskState.SUBMITTED
    assert len(stored.history) == 1

    snapshot = with_state(stored, TaskState.WORKING)
    await task_store.publish(
        task.id,
        JournalWrite(status_event(stored, TaskState.WORKING), snapshot=snapshot),
        owner=owner,
    )
    snapshot.status.state = TaskState.CANCELED  # changed after publish
    assert (await task_store.get(task.id, owner=owner)).task.status.state == TaskState.WORKING


async def test_records_carry_the_stored_form_the_task_had(
    task_store: TaskStore, owner: str
) -> None:
    """A record's `stored` is its task as stored: a stream writes its first event from it while
    the turn (which took the task itself) changes the task."""
    task = make_task()
    created = await task_store.create(task, owner=owner)
    assert created.stored is not None
    assert load_task(created.stored) == task
    task.status.state = TaskState.WORKING  # the turn goes on with the task itself
    assert load_task(created.stored).status.state == TaskState.SUBMITTED
    fetched = await task_store.get(task.id, owner=owner)
    assert fetched is not None and fetched.stored == created.stored
    entry = (await task_store.read(task.id, owner=owner, after=0, timeout_s=0))[0]
    assert entry.stored == snapshot_event(created.stored)


async def test_journal_starts_with_the_task_at_position_1(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert len(entries) == 1
    assert entries[0].position == 1
    assert isinstance(entries[0].event, TaskSnapshot)
    assert entries[0].event.task == task


# --- TaskStore: publish / read ---------------------------------------------------------------


async def test_publish_numbers_events_consecutively(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    positions = [
        await task_store.publish(task.id, JournalWrite(chunk_event(task, str(i))), owner=owner)
        for i in range(4)
    ]
    assert positions == [2, 3, 4, 5]
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [e.position for e in entries] == [1, 2, 3, 4, 5]
    assert [e.event.artifact.parts[0].text for e in entries[1:]] == ["0", "1", "2", "3"]


async def test_publish_without_snapshot_leaves_the_snapshot_and_its_position(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    await task_store.publish(
        task.id, JournalWrite(chunk_event(task, "a", append=False)), owner=owner
    )
    await task_store.publish(task.id, JournalWrite(chunk_event(task, "b")), owner=owner)

    record = await task_store.get(task.id, owner=owner)
    assert record.task == task
    assert record.position == 1, "the snapshot still reflects position 1"


@pytest.mark.parametrize("given_stored", [False, True])
async def test_publish_with_snapshot_replaces_it_and_records_its_position(
    task_store: TaskStore, owner: str, given_stored: bool
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    working = with_state(task, TaskState.WORKING)
    # A caller that has the snapshot's stored form passes it and the store keeps it (written
    # here with spaces, as the serializer never writes it, so that a store that serialized the
    # snapshot again would be seen).
    stored = json.dumps(json.loads(dump_task(working)), indent=1).encode() if given_stored else None
    position = await task_store.publish(
        task.id,
        JournalWrite(
            status_event(task, TaskState.WORKING), snapshot=working, snapshot_stored=stored
        ),
        owner=owner,
    )
    assert position == 2
    record = await task_store.get(task.id, owner=owner)
    assert record.task == working
    assert record.position == 2
    assert record.stored == (stored if given_stored else dump_task(working))

    await task_store.publish(
        task.id, JournalWrite(chunk_event(task, "x")), owner=owner
    )  # position 3, no snapshot
    record = await task_store.get(task.id, owner=owner)
    assert record.task == working
    assert record.position == 2

    done = with_state(working, TaskState.COMPLETED)
    position = await task_store.publish(
        task.id, JournalWrite(status_event(task, TaskState.COMPLETED), snapshot=done), owner=owner
    )
    assert position == 4
    record = await task_store.get(task.id, owner=owner)
    assert record.task.status.state == TaskState.COMPLETED
    assert record.position == 4


async def test_snapshot_then_read_after_its_position_sees_every_later_event_once(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    working = with_state(task, TaskState.WORKING)
    await task_store.publish(
        task.id, JournalWrite(status_event(task, TaskState.WORKING), snapshot=working), owner=owner
    )
    for text in ("a", "b", "c"):
        await task_store.publish(task.id, JournalWrite(chunk_event(task, text)), owner=owner)

    record = await task_store.get(task.id, owner=owner)
    later = await task_store.read(task.id, owner=owner, after=record.position, timeout_s=0)
    assert [e.event.artifact.parts[0].text for e in later] == ["a", "b", "c"]


async def test_read_after_n_returns_only_later_entries(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    for i in range(5):
        await task_store.publish(task.id, JournalWrite(chunk_event(task, str(i))), owner=owner)
    entries = await task_store.read(task.id, owner=owner, after=3, timeout_s=0)
    assert [e.position for e in entries] == [4, 5, 6]
    assert await task_store.read(task.id, owner=owner, after=6, timeout_s=0) == []


async def test_read_is_scoped_to_the_owner(
    task_store: TaskStore, owner: str, other_owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    assert await task_store.read(task.id, owner=other_owner, after=0, timeout_s=0) == []
    assert await task_store.read("no-such-task", owner=owner, after=0, timeout_s=0) == []


async def test_journal_entries_are_not_shared_with_callers(
    task_store: TaskStore, owner: str
) -> None:
    """Like snapshots, journal events go in and come out as copies: one reader that changes an
    event it got (or a publisher that reuses its event object) cannot change what others read."""
    task = make_task()
    await task_store.create(task, owner=owner)
    (entry,) = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    entry.event.task.status.state = TaskState.FAILED
    entry.event.task.history.clear()
    (again,) = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert again.event.task == task, "mutating an entry returned by read() changed the journal"

    event = chunk_event(task, "original")
    await task_store.publish(task.id, JournalWrite(event), owner=owner)
    event.artifact.parts[0].text = "changed after publish"
    (published,) = await task_store.read(task.id, owner=owner, after=1, timeout_s=0)
    assert published.event.artifact.parts[0].text == "original", (
        "mutating the published event object changed the journal"
    )


async def test_read_times_out_empty(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    started = time.monotonic()
    entries = await task_store.read(task.id, owner=owner, after=1, timeout_s=0.2)
    elapsed = time.monotonic() - started
    assert entries == []
    assert 0.15 <= elapsed < 1.5


async def test_read_wakes_when_an_entry_is_published(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)

    async def publish_later() -> None:
        await asyncio.sleep(0.1)
        await task_store.publish(task.id, JournalWrite(chunk_event(task, "late")), owner=owner)

    publisher = asyncio.create_task(publish_later())
    started = time.monotonic()
    entries = await task_store.read(task.id, owner=owner, after=1, timeout_s=5)
    elapsed = time.monotonic() - started
    await publisher
    assert [e.position for e in entries] == [2]
    assert entries[0].event.artifact.parts[0].text == "late"
    assert elapsed < 2, f"read did not wake on publish (took {elapsed:.2f} s)"


async def test_concurrent_readers_all_wake(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    readers = [
        asyncio.create_task(task_store.read(task.id, owner=owner, after=1, timeout_s=5))
        for _ in range(3)
    ]
    await asyncio.sleep(0.05)
    await task_store.publish(task.id, JournalWrite(chunk_event(task, "x")), owner=owner)
    results = await asyncio.wait_for(asyncio.gather(*readers), 2)
    assert [[e.position for e in r] for r in results] == [[2], [2], [2]]


async def test_read_returns_at_once_when_entries_exist(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    await task_store.publish(task.id, JournalWrite(chunk_event(task, "x")), owner=owner)
    started = time.monotonic()
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=30)
    # Not a speed bound: a read that waited would take its whole 30 s (a loaded machine may
    # take a second or two to answer).
    assert time.monotonic() - started < 10
    assert [e.position for e in entries] == [1, 2]


# --- TaskStore: list -------------------------------------------------------------------------


async def _create_at(store: TaskStore, owner: str, minutes: list[int], **kwargs) -> list[Task]:
    tasks = []
    for minute in minutes:
        task = make_task(at=T0 + timedelta(minutes=minute), **kwargs)
        await store.create(task, owner=owner)
        tasks.append(task)
    return tasks


async def test_list_newest_status_first(task_store: TaskStore, owner: str) -> None:
    tasks = await _create_at(task_store, owner, [3, 1, 4, 2])
    page = await task_store.list(TaskQuery(), owner=owner)
    expected = sorted(tasks, key=lambda t: t.status.timestamp, reverse=True)
    assert [t.id for t in page.tasks] == [t.id for t in expected]
    assert page.total_size == 4
    assert page.next_page_token == ""


async def test_list_follows_the_latest_snapshot(task_store: TaskStore, owner: str) -> None:
    old, new = await _create_at(task_store, owner, [1, 2])
    moved = with_state(old, TaskState.WORKING, at=T0 + timedelta(minutes=10))
    await task_store.publish(
        old.id, JournalWrite(status_event(old, TaskState.WORKING), snapshot=moved), owner=owner
    )
    page = await task_store.list(TaskQuery(), owner=owner)
    assert [t.id for t in page.tasks] == [old.id, new.id]
    assert page.tasks[0].status.state == TaskState.WORKING


async def test_list_is_scoped_to_the_owner(
    task_store: TaskStore, owner: str, other_owner: str
) -> None:
    await _create_at(task_store, owner, [1, 2])
    await _create_at(task_store, other_owner, [3])
    page = await task_store.list(TaskQuery(), owner=owner)
    assert page.total_size == 2
    assert len(page.tasks) == 2


async def test_list_filters(task_store: TaskStore, owner: str) -> None:
    a1, a2 = await _create_at(task_store, owner, [1, 5], context_id="ctx-a")
    (b1,) = await _create_at(task_store, owner, [3], context_id="ctx-b")
    done = with_state(a2, TaskState.COMPLETED)
    await task_store.publish(
        a2.id, JournalWrite(status_event(a2, TaskState.COMPLETED), snapshot=done), owner=owner
    )

    by_context = await task_store.list(TaskQuery(context_id="ctx-a"), owner=owner)
    assert {t.id for t in by_context.tasks} == {a1.id, a2.id}
    assert by_context.total_size == 2

    by_state = await task_store.list(TaskQuery(state=TaskState.COMPLETED), owner=owner)
    assert [t.id for t in by_state.tasks] == [a2.id]
    submitted = await task_store.list(TaskQuery(state=TaskState.SUBMITTED), owner=owner)
    assert {t.id for t in submitted.tasks} == {a1.id, b1.id}

    after = await task_store.list(TaskQuery(status_after=T0 + timedelta(minutes=2)), owner=owner)
    assert {t.id for t in after.tasks} == {a2.id, b1.id}
    assert after.total_size == 2

    combined = await task_store.list(
        TaskQuery(context_id="ctx-a", state=TaskState.SUBMITTED, status_after=T0), owner=owner
    )
    assert [t.id for t in combined.tasks] == [a1.id]

    nothing = await task_store.list(TaskQuery(context_id="ctx-none"), owner=owner)
    assert nothing.tasks == [] and nothing.total_size == 0 and nothing.next_page_token == ""


async def test_list_returns_copies(task_store: TaskStore, owner: str) -> None:
    (task,) = await _create_at(task_store, owner, [1])
    page = await task_store.list(TaskQuery(), owner=owner)
    page.tasks[0].status.state = TaskState.FAILED
    assert (await task_store.get(task.id, owner=owner)).task.status.state == TaskState.SUBMITTED


async def _all_pages(store: TaskStore, owner: str, query: TaskQuery) -> list:
    pages = []
    token = None
    for _ in range(100):
        page = await store.list(
            TaskQuery(
                context_id=query.context_id,
                state=query.state,
                status_after=query.status_after,
                page_size=query.page_size,
                page_token=token,
            ),
            owner=owner,
        )
        pages.append(page)
        if not page.next_page_token:
            return pages
        token = page.next_page_token
    raise AssertionError("pagination did not end")


async def test_pagination_has_no_duplicates_and_no_gaps(task_store: TaskStore, owner: str) -> None:
    tasks = await _create_at(task_store, owner, [7, 2, 9, 1, 5, 3, 8])
    pages = await _all_pages(task_store, owner, TaskQuery(page_size=3))

    assert [len(p.tasks) for p in pages] == [3, 3, 1]
    assert all(p.total_size == 7 for p in pages)
    assert [bool(p.next_page_token) for p in pages] == [True, True, False]
    seen = [t.id for p in pages for t in p.tasks]
    expected = [t.id for t in sorted(tasks, key=lambda t: t.status.timestamp, reverse=True)]
    assert seen == expected


async def test_pagination_with_equal_timestamps(task_store: TaskStore, owner: str) -> None:
    tasks = await _create_at(task_store, owner, [1, 1, 1, 1, 1])
    pages = await _all_pages(task_store, owner, TaskQuery(page_size=2))
    seen = [t.id for p in pages for t in p.tasks]
    assert sorted(seen) == sorted(t.id for t in tasks)
    assert len(seen) == len(set(seen)) == 5


async def test_pagination_with_timestamps_within_one_millisecond(
    task_store: TaskStore, owner: str
) -> None:
    tasks = []
    for micros in (100, 200, 300, 400):
        task = make_task(at=T0 + timedelta(microseconds=micros))
        await task_store.create(task, owner=owner)
        tasks.append(task)
    pages = await _all_pages(task_store, owner, TaskQuery(page_size=1))
    seen = [t.id for p in pages for t in p.tasks]
    assert sorted(seen) == sorted(t.id for t in tasks)
    assert len(seen) == len(set(seen))


async def test_pagination_with_a_filter(task_store: TaskStore, owner: str) -> None:
    wanted = await _create_at(task_store, owner, [1, 2, 3, 4], context_id="ctx-a")
    await _create_at(task_store, owner, [5, 6], context_id="ctx-b")
    pages = await _all_pages(task_store, owner, TaskQuery(context_id="ctx-a", page_size=3))
    assert all(p.total_size == 4 for p in pages)
    assert sorted(t.id for p in pages for t in p.tasks) == sorted(t.id for t in wanted)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        pytest.param("not a token!", id="garbage"),
        pytest.param("%%%", id="no-base64"),
        pytest.param(_b64(b"not json"), id="not-json"),
        pytest.param(_b64(b"[1, 2]"), id="json-list"),
        pytest.param(_b64(b'"text"'), id="json-string"),
        pytest.param(_b64(json.dumps({"id": "x"}).encode()), id="no-timestamp"),
        pytest.param(_b64(json.dumps({"t": 5}).encode()), id="no-id"),
        pytest.param(_b64(json.dumps({"t": "soon", "id": "x"}).encode()), id="bad-timestamp"),
        pytest.param(_b64(json.dumps({"t": None, "id": "x"}).encode()), id="null-timestamp"),
        pytest.param(_b64(b'{"t": 1e400, "id": "x"}'), id="infinite-timestamp"),
        pytest.param(_b64(b'{"t": Infinity, "id": "x"}'), id="infinity-literal"),
        pytest.param(_b64(b"\xff\xfe\x00"), id="binary"),
    ],
)
async def test_invalid_page_token(task_store: TaskStore, owner: str, token: str) -> None:
    await _create_at(task_store, owner, [1, 2])
    with pytest.raises(InvalidPageToken):
        await task_store.list(TaskQuery(page_token=token), owner=owner)


# --- MessageStore ----------------------------------------------------------------------------


def msgs(*contents: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="user" if i % 2 == 0 else "assistant", content=c)
        for i, c in enumerate(contents)
    ]


async def test_window_of_an_empty_conversation(message_store: MessageStore, owner: str) -> None:
    assert await message_store.window("ctx", owner=owner, limit=10) == []


async def test_append_then_window_oldest_first(message_store: MessageStore, owner: str) -> None:
    await message_store.append("ctx", msgs("a", "b"), owner=owner, unit_id="u1")
    await message_store.append("ctx", msgs("c", "d", "e"), owner=owner, unit_id="u2")
    window = await message_store.window("ctx", owner=owner, limit=10)
    assert [m.content for m in window] == ["a", "b", "c", "d", "e"]


async def test_append_is_at_most_once_per_unit(message_store: MessageStore, owner: str) -> None:
    assert (
        await message_store.append("ctx", msgs("a", "b"), owner=owner, unit_id="task-1:0") is True
    )
    assert (
        await message_store.append("ctx", msgs("a", "b"), owner=owner, unit_id="task-1:0") is False
    )
    assert await message_store.append("ctx", msgs("c"), owner=owner, unit_id="task-1:1") is True
    # a repeated unit is ignored whole, even if its messages differ this time
    assert (
        await message_store.append("ctx", msgs("x", "y"), owner=owner, unit_id="task-1:1") is False
    )
    window = await message_store.window("ctx", owner=owner, limit=10)
    assert [m.content for m in window] == ["a", "b", "c"]


async def test_unit_ids_are_scoped_by_context_and_owner(
    message_store: MessageStore, owner: str, other_owner: str
) -> None:
    assert await message_store.append("ctx", msgs("a"), owner=owner, unit_id="same") is True
    assert await message_store.append("ctx-2", msgs("b"), owner=owner, unit_id="same") is True
    assert await message_store.append("ctx", msgs("c"), owner=other_owner, unit_id="same") is True
    assert [m.content for m in await message_store.window("ctx-2", owner=owner, limit=10)] == ["b"]
    assert [m.content for m in await message_store.window("ctx", owner=other_owner, limit=10)] == [
        "c"
    ]


async def test_window_is_the_most_recent_messages(message_store: MessageStore, owner: str) -> None:
    await message_store.append("ctx", msgs("a", "b", "c", "d", "e"), owner=owner, unit_id="u3")
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=3)] == [
        "c",
        "d",
        "e",
    ]
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=1)] == ["e"]
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=5)] == list(
        "abcde"
    )
    assert await message_store.window("ctx", owner=owner, limit=0) == []


async def test_a_turn_start_reads_the_window_before_its_message(
    message_store: MessageStore, owner: str
) -> None:
    """`window_then_append`: the history as it was, then the unit appended (at most once)."""
    await message_store.append("ctx", msgs("a", "b", "c"), owner=owner, unit_id="earlier")
    before = await message_store.window_then_append(
        "ctx", msgs("q"), owner=owner, unit_id="task-9:user", limit=2
    )
    assert [m.content for m in before] == ["b", "c"]
    again = await message_store.window_then_append(
        "ctx", msgs("q"), owner=owner, unit_id="task-9:user", limit=2
    )
    assert [m.content for m in again] == ["c", "q"]  # the unit was not appended twice
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=10)] == list(
        "abcq"
    )
    first = await message_store.window_then_append(
        "new-ctx", msgs("hello"), owner=owner, unit_id="task-10:user", limit=0
    )
    assert first == []
    assert [m.content for m in await message_store.window("new-ctx", owner=owner, limit=5)] == [
        "hello"
    ]
    # A window below 0 is none too (the Redis script reads no list for it).
    assert (
        await message_store.window_then_append(
            "new-ctx", msgs("again"), owner=owner, unit_id="task-11:user", limit=-1
        )
        == []
    )


async def test_messages_round_trip_every_field(message_store: MessageStore, owner: str) -> None:
    unit = [
        ChatMessage(role="user", content="q"),
        ChatMessage(
            role="assistant",
            content=None,
            tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1}')],
        ),
        ChatMessage(role="tool", content="2", tool_call_id="c1", name="add"),
    ]
    await message_store.append("ctx", unit, owner=owner, unit_id="u4")
    assert await message_store.window("ctx", owner=owner, limit=10) == unit


async def test_conversations_are_scoped_by_context_and_owner(
    message_store: MessageStore, owner: str, other_owner: str
) -> None:
    await message_store.append("ctx", msgs("mine"), owner=owner, unit_id="u5")
    await message_store.append("ctx-2", msgs("other context"), owner=owner, unit_id="u6")
    await message_store.append("ctx", msgs("theirs"), owner=other_owner, unit_id="u7")
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=10)] == ["mine"]
    assert [m.content for m in await message_store.window("ctx", owner=other_owner, limit=10)] == [
        "theirs"
    ]


async def test_window_and_append_use_copies(message_store: MessageStore, owner: str) -> None:
    given = msgs("a", "b")
    await message_store.append("ctx", given, owner=owner, unit_id="u8")
    given[0].content = "changed after append"
    window = await message_store.window("ctx", owner=owner, limit=10)
    window[1].content = "changed after window"
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=10)] == [
        "a",
        "b",
    ]


async def test_claim_and_release(message_store: MessageStore, owner: str) -> None:
    assert await message_store.claim("ctx", "t1", owner=owner) is None
    assert await message_store.claim("ctx", "t1", owner=owner) is None  # the holder again: fine
    assert await message_store.claim("ctx", "t2", owner=owner) == ClaimHolder("t1", fenced=False)

    await message_store.release("ctx", "t2", owner=owner)  # not the holder: no effect
    assert await message_store.claim("ctx", "t3", owner=owner) == ClaimHolder("t1", fenced=False)

    await message_store.release("ctx", "t1", owner=owner)
    assert await message_store.claim("ctx", "t2", owner=owner) is None
    assert await message_store.claim("ctx", "t1", owner=owner) == ClaimHolder("t2", fenced=False)


async def test_release_without_a_claim_is_harmless(message_store: MessageStore, owner: str) -> None:
    await message_store.release("ctx", "t1", owner=owner)
    assert await message_store.claim("ctx", "t1", owner=owner) is None


async def test_claims_are_scoped_by_context_and_owner(
    message_store: MessageStore, owner: str, other_owner: str
) -> None:
    assert await message_store.claim("ctx", "t1", owner=owner) is None
    assert await message_store.claim("ctx-2", "t2", owner=owner) is None
    assert await message_store.claim("ctx", "t3", owner=other_owner) is None


async def test_concurrent_claims_have_one_winner(message_store: MessageStore, owner: str) -> None:
    results = await asyncio.gather(
        *(message_store.claim("ctx", f"t{i}", owner=owner) for i in range(10))
    )
    winners = [f"t{i}" for i, holder in enumerate(results) if holder is None]
    assert len(winners) == 1
    assert all(holder == ClaimHolder(winners[0], fenced=False) for holder in results if holder)


async def test_claims_do_not_touch_the_conversation(
    message_store: MessageStore, owner: str
) -> None:
    await message_store.append("ctx", msgs("a"), owner=owner, unit_id="u9")
    await message_store.claim("ctx", "t1", owner=owner)
    await message_store.release("ctx", "t1", owner=owner)
    assert [m.content for m in await message_store.window("ctx", owner=owner, limit=10)] == ["a"]


# --- CheckpointStore -------------------------------------------------------------------------


async def test_checkpoint_save_load_delete(
    checkpoint_store: CheckpointStore, owner: str, other_owner: str
) -> None:
    assert await checkpoint_store.load("t1", owner=owner) is None
    await checkpoint_store.save("t1", '{"v": 1}', owner=owner)
    await checkpoint_store.save("t1", '{"v": 2}', owner=owner)
    assert await checkpoint_store.load("t1", owner=owner) == '{"v": 2}'
    assert await checkpoint_store.load("t1", owner=other_owner) is None
    await checkpoint_store.delete("t1", owner=other_owner)
    assert await checkpoint_store.load("t1", owner=owner) == '{"v": 2}'
    await checkpoint_store.delete("t1", owner=owner)
    assert await checkpoint_store.load("t1", owner=owner) is None
    await checkpoint_store.delete("t1", owner=owner)  # idempotent


async def test_a_retried_publish_is_journaled_once(task_store: TaskStore) -> None:
    """A publish retried with the same event id (its reply was lost) appends nothing more."""
    owner = f"owner-{uuid.uuid4().hex[:6]}"
    task = Task(
        id=f"t-{uuid.uuid4().hex[:6]}", context_id="c", status=TaskStatus(state=TaskState.SUBMITTED)
    )
    await task_store.create(task, owner=owner)
    working = StatusUpdate(
        task_id=task.id, context_id="c", status=TaskStatus(state=TaskState.WORKING)
    )
    first = await task_store.publish(task.id, JournalWrite(working, event_id="e-1"), owner=owner)
    again = await task_store.publish(task.id, JournalWrite(working, event_id="e-1"), owner=owner)
    assert again == first
    later = await task_store.publish(task.id, JournalWrite(working, event_id="e-2"), owner=owner)
    assert later == first + 1
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1, first, later]


# --- TaskStore: chunks in one write ------------------------------------------------------------


async def test_chunks_published_together_take_consecutive_positions_in_order(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    texts = ["one ", "two ", 'th"ree\n', "four"]
    events = [dump_event(chunk_event(task, text)) for text in texts]
    assert await task_store.publish_chunks(task.id, events, owner=owner) == 5
    entries = await task_store.read(task.id, owner=owner, after=1, timeout_s=0)
    assert [entry.position for entry in entries] == [2, 3, 4, 5]
    read_texts = [entry.event.artifact.parts[0].text for entry in entries]  # type: ignore[union-attr]
    assert read_texts == texts
    # Without a snapshot: the stored task is still the one created, at position 1.
    record = await task_store.get(task.id, owner=owner)
    assert record is not None and record.position == 1
    assert (
        await task_store.publish(
            task.id, JournalWrite(status_event(task, TaskState.WORKING)), owner=owner
        )
        == 6
    )


async def test_entries_read_carry_the_kind_and_state_of_their_events(
    task_store: TaskStore, owner: str
) -> None:
    """What a stream relays without parsing (kind, state) is what the event says, whichever way
    it was written: the task itself, a status update (a model, or given as bytes), chunks."""
    task = make_task()
    await task_store.create(task, owner=owner)
    await task_store.publish(
        task.id, JournalWrite(status_event(task, TaskState.WORKING)), owner=owner
    )
    await task_store.publish_chunks(task.id, [dump_event(chunk_event(task, "x"))], owner=owner)
    ended = dump_event(status_event(task, TaskState.COMPLETED))
    await task_store.publish(task.id, JournalWrite(ended), owner=owner)
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    seen = [(entry.kind, entry.state) for entry in entries]
    assert seen == [
        ("task", TaskState.SUBMITTED),
        ("status", TaskState.WORKING),
        ("artifact", None),
        ("status", TaskState.COMPLETED),
    ]
    assert [(entry.event.kind, event_state(entry.event)) for entry in entries] == seen
    assert entries[3].stored == ended


async def test_a_retried_chunk_batch_is_journaled_once(task_store: TaskStore, owner: str) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    events = [dump_event(chunk_event(task, text)) for text in ("a", "b", "c")]
    first = await task_store.publish_chunks(task.id, events, owner=owner, event_id="batch-1")
    again = await task_store.publish_chunks(task.id, events, owner=owner, event_id="batch-1")
    assert first == again == 4
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [1, 2, 3, 4]


async def test_chunks_published_with_an_event_go_before_it_in_the_same_write(
    task_store: TaskStore, owner: str
) -> None:
    """An answer's last chunks and its COMPLETED (with the snapshot) in one write: consecutive
    positions, the snapshot at the event's, and a retry under the same id journals nothing."""
    task = make_task()
    await task_store.create(task, owner=owner)
    before = [dump_event(chunk_event(task, text)) for text in ("a", "b")]
    task.status = TaskStatus(state=TaskState.COMPLETED)
    ended = status_event(task, TaskState.COMPLETED)
    first = await task_store.publish(
        task.id, JournalWrite(ended, snapshot=task, event_id="end", chunks=before), owner=owner
    )
    again = await task_store.publish(
        task.id, JournalWrite(ended, snapshot=task, event_id="end", chunks=before), owner=owner
    )
    assert first == again == 4
    entries = await task_store.read(task.id, owner=owner, after=0, timeout_s=0)
    assert [(entry.position, entry.kind) for entry in entries] == [
        (1, "task"),
        (2, "artifact"),
        (3, "artifact"),
        (4, "status"),
    ]
    assert [entry.stored for entry in entries[1:3]] == before
    record = await task_store.get(task.id, owner=owner)
    assert record is not None and record.position == 4
    assert record.task.status.state == TaskState.COMPLETED


async def test_chunks_of_a_task_that_does_not_exist_are_refused(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    with pytest.raises(TaskGone):
        await task_store.publish_chunks(task.id, [dump_event(chunk_event(task, "x"))], owner=owner)
    assert await task_store.get(task.id, owner=owner) is None


async def test_a_reader_waiting_wakes_with_every_chunk_of_a_batch(
    task_store: TaskStore, owner: str
) -> None:
    task = make_task()
    await task_store.create(task, owner=owner)
    reading = asyncio.create_task(task_store.read(task.id, owner=owner, after=1, timeout_s=5))
    await asyncio.sleep(0.05)
    events = [dump_event(chunk_event(task, text)) for text in ("a", "b")]
    await task_store.publish_chunks(task.id, events, owner=owner)
    entries = await asyncio.wait_for(reading, 5)
    assert [entry.position for entry in entries] == [2, 3]
