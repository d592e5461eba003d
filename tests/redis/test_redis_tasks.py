"""RedisTaskStore: what only Redis has (serialization, streams, TTLs, round trips, indexes).

The behaviour it shares with the in-memory store is the contract suite's
(tests/unit/test_store_contract.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest
from redis.asyncio import BlockingConnectionPool, Connection, Redis

from stores.base import JournalWrite, StateConflict, TaskGone, TaskQuery
from stores.models import (
    Artifact,
    ArtifactUpdate,
    ChatMessage,
    Message,
    Part,
    Role,
    StatusUpdate,
    Task,
    TaskEvent,
    TaskSnapshot,
    TaskState,
    TaskStatus,
)
from stores.redis.batch import CommandBatcher
from stores.redis.checkpoints import RedisCheckpointStore
from stores.redis.keys import RedisKeys
from stores.redis.listing import state_score
from stores.redis.messages import RedisMessageStore
from stores.redis.support import timestamp_ms
from stores.redis.tasks import RedisTaskStore
from tests.redis.conftest import REDIS_URL, TTL_S, keys_with_prefix

pytestmark = pytest.mark.redis

OWNER = "owner:1{a}"
T0 = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def make_task(task_id: str = "task:1{x}", context_id: str = "ctx:1{y}", **kwargs: Any) -> Task:
    return Task(
        id=task_id,
        context_id=context_id,
        status=TaskStatus(state=kwargs.pop("state", TaskState.SUBMITTED), timestamp=T0),
        **kwargs,
    )


def chunk(task: Task, text: str) -> ArtifactUpdate:
    return ArtifactUpdate(
        task_id=task.id,
        context_id=task.context_id,
        artifact=Artifact(artifact_id="a", parts=[Part(text=text)]),
        append=True,
    )


def every_kind_of_event(task: Task) -> list[TaskEvent]:
    agent = Message(
        message_id="m1",
        role=Role.AGENT,
        parts=[Part(text="thinking", metadata={"k": [1, None]})],
        task_id=task.id,
        context_id=task.context_id,
        reference_task_ids=["r1"],
    )
    rich = Artifact(
        artifact_id="art",
        name="answer",
        description="all part kinds",
        parts=[
            Part(text="héllo ✓"),
            Part(raw="aGk=", media_type="application/octet-stream", filename="hi.bin"),
            Part(url="https://example.invalid/f.pdf", media_type="application/pdf"),
            Part(data={"nested": {"none": None, "list": [1, 2.5, "x", True]}}),
        ],
        metadata={"m": 1},
        extensions=["urn:x"],
    )
    full = make_task(
        task.id,
        task.context_id,
        state=TaskState.COMPLETED,
        artifacts=[rich],
        history=[agent],
        metadata={"usage": {"promptTokens": 3}},
    )
    return [
        StatusUpdate(
            task_id=task.id,
            context_id=task.context_id,
            status=TaskStatus(state=TaskState.WORKING, message=agent, timestamp=T0),
            metadata={"x": None},
        ),
        ArtifactUpdate(
            task_id=task.id, context_id=task.context_id, artifact=rich, append=True, last_chunk=True
        ),
        TaskSnapshot(task=full),
    ]


async def test_every_event_kind_round_trips(tasks: RedisTaskStore) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    events = every_kind_of_event(task)
    for event in events:
        await tasks.publish(task.id, JournalWrite(event), owner=OWNER)
    entries = await tasks.read(task.id, owner=OWNER, after=1, timeout_s=0)
    assert [entry.event for entry in entries] == events
    assert [type(entry.event) for entry in entries] == [StatusUpdate, ArtifactUpdate, TaskSnapshot]
    snapshot = events[-1]
    assert isinstance(snapshot, TaskSnapshot)
    await tasks.publish(task.id, JournalWrite(events[0], snapshot=snapshot.task), owner=OWNER)
    record = await tasks.get(task.id, owner=OWNER)
    assert record is not None and record.task == snapshot.task and record.position == 5


async def test_stored_json_keeps_the_kind_and_camel_case(
    tasks: RedisTaskStore, client: Redis
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    await tasks.publish(task.id, JournalWrite(chunk(task, "x")), owner=OWNER)
    keys = RedisKeys(tasks._keys.prefix)
    entries = await client.xrange(keys.journal(OWNER, task.id))
    assert [entry_id for entry_id, _ in entries] == [b"1-1", b"2-1"]
    assert b'"kind":"task"' in entries[0][1][b"e"]
    assert b'"kind":"artifact"' in entries[1][1][b"e"]
    assert b'"contextId"' in entries[1][1][b"e"]


async def test_journal_is_trimmed_to_about_journal_max(
    client: Redis, read_client: Redis, prefix: str
) -> None:
    store = RedisTaskStore(
        client, prefix=prefix, ttl_s=TTL_S, journal_max=20, read_client=read_client
    )
    task = make_task()
    await store.create(task, owner=OWNER)
    for i in range(600):
        await store.publish(task.id, JournalWrite(chunk(task, str(i))), owner=OWNER)
    length = await client.xlen(RedisKeys(prefix).journal(OWNER, task.id))
    # MAXLEN ~ trims whole stream nodes (100 entries by default): at most one node over.
    assert 20 <= length <= 20 + 100
    entries = await store.read(task.id, owner=OWNER, after=0, timeout_s=0)
    positions = [entry.position for entry in entries]
    assert positions == list(range(602 - length, 602))
    assert entries[-1].event.artifact.parts[0].text == "599"


async def test_blocking_read_wakes_on_a_publish_from_another_client(
    tasks: RedisTaskStore, other_client: Redis, prefix: str
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    elsewhere = RedisTaskStore(other_client, prefix=prefix, ttl_s=TTL_S)  # another "process"
    reader = asyncio.create_task(tasks.read(task.id, owner=OWNER, after=1, timeout_s=10))
    await asyncio.sleep(0.2)  # the reader is blocked in XREAD by now
    assert not reader.done()
    published = time.monotonic()
    await elsewhere.publish(task.id, JournalWrite(chunk(task, "wake")), owner=OWNER)
    entries = await asyncio.wait_for(reader, 5)
    woke_after = time.monotonic() - published
    assert [entry.position for entry in entries] == [2]
    assert woke_after < 0.1, f"the reader woke {woke_after * 1000:.0f} ms after the publish"


async def test_read_of_a_missing_task_returns_nothing(tasks: RedisTaskStore) -> None:
    """Without a wait, at once; with one, after at most the wait (readers check the task between
    reads, so a blocking read needs no extra existence probe: one round trip per wake-up)."""
    started = time.monotonic()
    assert await tasks.read("nope", owner=OWNER, after=0, timeout_s=0) == []
    assert time.monotonic() - started < 0.5
    started = time.monotonic()
    assert await tasks.read("nope", owner=OWNER, after=0, timeout_s=0.3) == []
    assert time.monotonic() - started < 1.5


async def test_many_blocked_readers_do_not_starve_commands(prefix: str) -> None:
    """Readers wait on their own pool: with 4 command connections, 50 waiting readers are fine."""
    client = Redis.from_pool(
        BlockingConnectionPool.from_url(REDIS_URL, max_connections=4, timeout=2)
    )
    read_client = Redis.from_pool(
        BlockingConnectionPool.from_url(REDIS_URL, max_connections=100, socket_timeout=None)
    )
    store = RedisTaskStore(client, prefix=prefix, ttl_s=TTL_S, read_client=read_client)
    try:
        task = make_task()
        await store.create(task, owner=OWNER)
        readers = [
            asyncio.create_task(store.read(task.id, owner=OWNER, after=1, timeout_s=10))
            for _ in range(50)
        ]
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await store.publish(task.id, JournalWrite(chunk(task, "x")), owner=OWNER)
        assert (await store.get(task.id, owner=OWNER)) is not None
        assert time.monotonic() - started < 0.5
        results = await asyncio.wait_for(asyncio.gather(*readers), 5)
        assert all([entry.position for entry in result] == [2] for result in results)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await read_client.aclose()
        await client.aclose()


class _CountingConnection(Connection):
    """Records what goes over the wire: one `writes` entry per round trip (a write), with the
    names of the commands packed for it."""

    writes: ClassVar[list[list[str]]] = []

    def pack_command(self, *args: Any) -> Any:
        self.__dict__.setdefault("packed", []).append(str(args[0]).upper())
        return super().pack_command(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        names = self.__dict__.pop("packed", [])
        if names:
            self.writes.append(names)
        await super().send_packed_command(command, check_health)


@pytest.fixture
async def counted(prefix: str, read_client: Redis) -> AsyncIterator[tuple[RedisTaskStore, Redis]]:
    """A task store whose command connections record their round trips (`_CountingConnection`)."""
    client = Redis.from_pool(
        BlockingConnectionPool.from_url(REDIS_URL, connection_class=_CountingConnection)
    )
    try:
        yield RedisTaskStore(client, prefix=prefix, ttl_s=TTL_S, read_client=read_client), client
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def test_a_chunk_is_one_round_trip_and_a_state_change_is_one_too(
    counted: tuple[RedisTaskStore, Redis],
) -> None:
    store, client = counted
    task = make_task()
    await store.create(task, owner=OWNER)
    await store.publish(
        task.id, JournalWrite(chunk(task, "warm up: the script is loaded")), owner=OWNER
    )
    writes = _CountingConnection.writes
    writes.clear()
    for i in range(10):
        await store.publish(task.id, JournalWrite(chunk(task, str(i))), owner=OWNER)
    assert writes == [["EVALSHA"]] * 10

    writes.clear()
    working = make_task(state=TaskState.WORKING)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=working.status)
    await store.publish(task.id, JournalWrite(update, snapshot=working), owner=OWNER)
    assert writes == [["EVALSHA"]]  # on one Redis the script moves the task in the indexes
    keys = RedisKeys(store._keys.prefix)
    moved_to = timestamp_ms(working.status.timestamp)
    by_state = state_score(TaskState.WORKING.value, moved_to)
    for index, score in (
        (keys.owner_tasks(OWNER), moved_to),
        (keys.context_tasks(OWNER, task.context_id), moved_to),
        (keys.owner_tasks_by_state(OWNER), by_state),
        (keys.context_tasks_by_state(OWNER, task.context_id), by_state),
    ):
        assert await client.zscore(index, task.id) == score
        assert 0 < await client.pttl(index) <= 2 * TTL_S * 1000

    writes.clear()
    assert (await store.get(task.id, owner=OWNER)) is not None
    assert writes == [["HMGET"]]


async def test_a_refused_state_change_leaves_the_indexes_as_they_were(
    tasks: RedisTaskStore, client: Redis
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    keys = RedisKeys(tasks._keys.prefix)
    indexes = (
        keys.owner_tasks(OWNER),
        keys.context_tasks(OWNER, task.context_id),
        keys.owner_tasks_by_state(OWNER),
        keys.context_tasks_by_state(OWNER, task.context_id),
    )
    created_at = [await client.zscore(index, task.id) for index in indexes]
    ms = timestamp_ms(task.status.timestamp)
    assert created_at == [ms, ms, *[state_score(TaskState.SUBMITTED.value, ms)] * 2]
    working = make_task(state=TaskState.WORKING)
    working.status.timestamp = datetime(2031, 1, 1, tzinfo=UTC)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=working.status)
    with pytest.raises(StateConflict):
        await tasks.publish(
            task.id, JournalWrite(update, snapshot=working, if_state=TaskState.WORKING), owner=OWNER
        )
    assert [await client.zscore(index, task.id) for index in indexes] == created_at
    await tasks.publish(task.id, JournalWrite(update, snapshot=working), owner=OWNER)
    moved_to = timestamp_ms(working.status.timestamp)
    moved_by_state = state_score(TaskState.WORKING.value, moved_to)
    expected = [moved_to, moved_to, moved_by_state, moved_by_state]
    assert [await client.zscore(index, task.id) for index in indexes] == expected
    assert [task.id for task in (await tasks.list(TaskQuery(), owner=OWNER)).tasks] == [task.id]


async def test_a_reader_following_a_task_costs_no_extra_command_per_chunk(
    counted: tuple[RedisTaskStore, Redis],
) -> None:
    """Its journal stays in the shared read between its reads (journal_mux.LINGER_S): a reader
    coming back for the next chunk later than the shared read waits for it (a slow client) does
    not restart the read (a wake, an XADD) every time."""
    store, _ = counted
    task = make_task()
    await store.create(task, owner=OWNER)
    await store.publish(
        task.id, JournalWrite(chunk(task, "warm up: the script is loaded")), owner=OWNER
    )

    async def follow() -> list[int]:
        seen: list[int] = []
        while len(seen) < 11:
            entries = await store.read(task.id, owner=OWNER, after=seen[-1] if seen else 1,
                                       timeout_s=5)  # fmt: skip
            seen += [entry.position for entry in entries]
            await asyncio.sleep(0.005)  # passing them on to a slow client
        return seen

    # Readers of two other tasks: the first reads alone, the second keeps the shared read going.
    others = [make_task(f"other{n}{{o{n}}}") for n in range(2)]
    for other in others:
        await store.create(other, owner=OWNER)
    idle = [
        asyncio.create_task(store.read(other.id, owner=OWNER, after=1, timeout_s=5))
        for other in others
    ]
    following = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    writes = _CountingConnection.writes
    writes.clear()
    for i in range(10):
        await store.publish(task.id, JournalWrite(chunk(task, str(i))), owner=OWNER)
        await asyncio.sleep(0.03)  # the reader reads each chunk before the next is written
    assert await asyncio.wait_for(following, 5) == list(range(2, 13))
    assert writes == [["EVALSHA"]] * 10
    for job in idle:
        job.cancel()
    await asyncio.gather(*idle, return_exceptions=True)


async def test_concurrent_chunks_share_round_trips_each_with_its_own_reply(
    prefix: str, counted: tuple[RedisTaskStore, Redis]
) -> None:
    store, client = counted
    keys = RedisKeys(prefix)
    turns = [make_task(f"task:{n}{{x{n}}}") for n in range(20)]
    for task in turns:
        await store.create(task, owner=OWNER)
    # One of them has a journal Redis cannot append to: its publish fails, alone.
    broken = turns[7]
    await client.delete(keys.journal(OWNER, broken.id))
    await client.set(keys.journal(OWNER, broken.id), "not a stream")
    await client.script_flush()  # and the script has to be loaded again on the way
    writes = _CountingConnection.writes
    writes.clear()
    outcomes = await asyncio.gather(
        *(
            store.publish(task.id, JournalWrite(chunk(task, f"{n}.{i}")), owner=OWNER)
            for i in range(5)
            for n, task in enumerate(turns)
        ),
        return_exceptions=True,
    )
    by_task = [outcomes[n::20] for n in range(20)]
    assert all(isinstance(outcome, Exception) for outcome in by_task[7]), by_task[7]
    assert "WRONGTYPE" in str(by_task[7][0])
    for n, positions in enumerate(by_task):
        if n != 7:
            assert sorted(positions) == [2, 3, 4, 5, 6], (n, positions)  # type: ignore[type-var]
    pipelines = [write for write in writes if write.count("EVALSHA") > 1]
    assert len([w for w in writes if "EVALSHA" in w]) <= 4, writes  # not 100 round trips
    assert sum(write.count("EVALSHA") for write in pipelines) >= 99
    # Every chunk is in its task's journal once, in order.
    for n, task in enumerate(turns):
        if n != 7:
            texts = [
                entry.event.artifact.parts[0].text  # type: ignore[union-attr]
                for entry in await store.read(task.id, owner=OWNER, after=1, timeout_s=0)
            ]
            assert texts == [f"{n}.{i}" for i in range(5)]


async def test_concurrent_turns_writes_of_every_store_share_round_trips(
    prefix: str, counted: tuple[RedisTaskStore, Redis], read_client: Redis
) -> None:
    """What concurrent turns write besides chunks (state changes with their snapshot, checkpoints,
    conversation appends, context claims) goes through one batcher shared by the stores: each
    caller gets its own outcome, a group that fails fails alone, a flushed script is reloaded."""
    _, client = counted
    batcher = CommandBatcher(client)
    tasks = RedisTaskStore(
        client, prefix=prefix, ttl_s=TTL_S, read_client=read_client, batcher=batcher
    )
    messages = RedisMessageStore(client, prefix=prefix, ttl_s=TTL_S, batcher=batcher)
    checkpoints = RedisCheckpointStore(client, prefix=prefix, ttl_s=TTL_S, batcher=batcher)
    turns = [make_task(f"task:{n}{{t{n}}}", context_id=f"ctx:{n}{{t{n}}}") for n in range(10)]
    for task in turns:
        await tasks.create(task, owner=OWNER)
    broken = turns[3]  # its journal cannot be appended to: its state change fails, alone
    keys = RedisKeys(prefix)
    await client.delete(keys.journal(OWNER, broken.id))
    await client.set(keys.journal(OWNER, broken.id), "not a stream")
    await client.script_flush()
    writes = _CountingConnection.writes
    writes.clear()

    async def write(task: Task) -> None:
        working = make_task(task.id, context_id=task.context_id, state=TaskState.WORKING)
        update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=working.status)
        await asyncio.gather(
            tasks.publish(task.id, JournalWrite(update, snapshot=working), owner=OWNER),
            checkpoints.save(task.id, f"checkpoint of {task.id}", owner=OWNER),
            messages.append(
                task.context_id,
                [ChatMessage(role="user", content=f"hello from {task.id}")],
                owner=OWNER,
                unit_id="u1",
            ),
            messages.release(task.context_id, "nobody", owner=OWNER),
        )

    outcomes = await asyncio.gather(*(write(task) for task in turns), return_exceptions=True)
    assert "WRONGTYPE" in str(outcomes[3])
    assert [outcome for n, outcome in enumerate(outcomes) if n != 3] == [None] * 9
    scripts = [write for write in writes if "EVALSHA" in write]
    assert len(scripts) <= 6, writes  # not 40 round trips
    assert sum(write.count("EVALSHA") for write in scripts) >= 40  # each once, some twice
    for n, task in enumerate(turns):
        record = await tasks.get(task.id, owner=OWNER)
        assert record is not None
        expected = TaskState.SUBMITTED if n == 3 else TaskState.WORKING
        assert (record.task.status.state, record.position) == (expected, 1 if n == 3 else 2)
        assert await checkpoints.load(task.id, owner=OWNER) == f"checkpoint of {task.id}"
        window = await messages.window(task.context_id, owner=OWNER, limit=10)
        assert [message.content for message in window] == [f"hello from {task.id}"]


async def test_scripts_are_reloaded_after_a_script_flush(
    tasks: RedisTaskStore, client: Redis
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    await client.script_flush()
    assert await tasks.publish(task.id, JournalWrite(chunk(task, "a")), owner=OWNER) == 2
    await client.script_flush()
    working = make_task(state=TaskState.WORKING)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=working.status)
    assert await tasks.publish(task.id, JournalWrite(update, snapshot=working), owner=OWNER) == 3
    await client.script_flush()
    await tasks.create(make_task("t2"), owner=OWNER)
    assert (await tasks.list(TaskQuery(), owner=OWNER)).total_size == 2


async def test_every_key_has_a_ttl_refreshed_by_activity(
    tasks: RedisTaskStore, client: Redis, prefix: str
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    keys = await keys_with_prefix(client, prefix)
    assert len(keys) == 6  # snapshot hash, journal, owner and context indexes (by time, by state)
    for key in keys:
        assert 0 < await client.ttl(key) <= 2 * TTL_S, key

    names = RedisKeys(prefix)
    for key in (names.task(OWNER, task.id), names.journal(OWNER, task.id)):
        await client.pexpire(key, 5000)
    await tasks.publish(task.id, JournalWrite(chunk(task, "x")), owner=OWNER)
    for key in (names.task(OWNER, task.id), names.journal(OWNER, task.id)):
        assert await client.ttl(key) > TTL_S - 10, key

    for key in keys:
        await client.pexpire(key, 5000)
    working = make_task(state=TaskState.WORKING)
    update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=working.status)
    await tasks.publish(task.id, JournalWrite(update, snapshot=working), owner=OWNER)
    for key in await keys_with_prefix(client, prefix):
        assert await client.ttl(key) > TTL_S - 10, key


async def test_expired_tasks_leave_the_list_and_the_index(
    tasks: RedisTaskStore, client: Redis, prefix: str
) -> None:
    kept, gone = make_task("kept"), make_task("gone")
    await tasks.create(kept, owner=OWNER)
    await tasks.create(gone, owner=OWNER)
    names = RedisKeys(prefix)
    for key in (names.task(OWNER, gone.id), names.journal(OWNER, gone.id)):
        await client.pexpire(key, 20)
    await asyncio.sleep(0.1)

    page = await tasks.list(TaskQuery(context_id=kept.context_id), owner=OWNER)
    assert [task.id for task in page.tasks] == ["kept"]
    assert page.total_size == 1
    assert await client.zscore(names.context_tasks(OWNER, kept.context_id), "gone") is None
    assert await client.zscore(names.owner_tasks(OWNER), "gone") is None
    assert (await tasks.list(TaskQuery(), owner=OWNER)).total_size == 1
    assert await tasks.get("gone", owner=OWNER) is None


async def test_owner_scoping_is_structural(
    tasks: RedisTaskStore, client: Redis, prefix: str
) -> None:
    task = make_task()
    await tasks.create(task, owner=OWNER)
    before = await keys_with_prefix(client, prefix)
    assert all(":owner%3A1%7Ba%7D:" in key or "{owner%3A1%7Ba%7D}" in key for key in before)

    for intruder in ("owner", "owner:1", "owner:1{a}x", ""):
        assert await tasks.get(task.id, owner=intruder) is None
        with pytest.raises(TaskGone):
            await tasks.publish(task.id, JournalWrite(chunk(task, "x")), owner=intruder)
        with pytest.raises(TaskGone):
            await tasks.publish(
                task.id, JournalWrite(chunk(task, "x"), snapshot=task), owner=intruder
            )
        assert (await tasks.list(TaskQuery(), owner=intruder)).total_size == 0
        assert await tasks.read(task.id, owner=intruder, after=0, timeout_s=0) == []
    assert await keys_with_prefix(client, prefix) == before  # the attempts left nothing behind
    assert (await tasks.get(task.id, owner=OWNER)).position == 1  # type: ignore[union-attr]


async def test_works_with_a_decoding_client(prefix: str, read_client: Redis) -> None:
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    store = RedisTaskStore(client, prefix=prefix, ttl_s=TTL_S)
    try:
        task = make_task()
        await store.create(task, owner=OWNER)
        for event in every_kind_of_event(task):
            await store.publish(task.id, JournalWrite(event), owner=OWNER)
        entries = await store.read(task.id, owner=OWNER, after=0, timeout_s=0)
        assert [entry.position for entry in entries] == [1, 2, 3, 4]
        page = await store.list(TaskQuery(), owner=OWNER)
        assert [t.id for t in page.tasks] == [task.id]
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
