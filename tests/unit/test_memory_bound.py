"""The in-memory task store is bounded (A2A_MEMORY_MAX_TASKS): ended tasks make room, oldest first;
when every task is active, a new one is refused as an overload instead of growing the process.
What lives alongside the tasks is bounded with them: conversations (as many as tasks), and what
the other stores keep for a task (its lease, checkpoint, push configs and cursor, context claim)
goes when the task is dropped."""

from __future__ import annotations

import pytest

from app.errors import OverloadedError, as_a2a_error
from stores.base import JournalWrite, StoreFull
from stores.codec import dump_event
from stores.memory import InMemoryMessageStore, InMemoryStores, InMemoryTaskStore
from stores.memory import support as memory_support
from stores.models import ChatMessage, PushConfig, StatusUpdate, Task, TaskState, TaskStatus


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(memory_support.time, "monotonic", fake)  # the module every store reads
    return fake


def task(task_id: str, state: TaskState = TaskState.WORKING) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=state))


async def finish(store: InMemoryTaskStore, task_id: str, owner: str = "o") -> None:
    done = task(task_id, TaskState.COMPLETED)
    update = StatusUpdate(task_id=task_id, context_id="c", status=done.status)
    await store.publish(task_id, JournalWrite(update, snapshot=done), owner=owner)


async def test_the_oldest_ended_tasks_make_room_with_their_journals() -> None:
    store = InMemoryTaskStore(max_tasks=3)
    for name in ("a", "b", "c"):
        await store.create(task(name), owner="o")
    await finish(store, "b")  # ended first: the oldest ended task
    await finish(store, "a")
    await store.create(task("d"), owner="o")
    assert await store.get("b", owner="o") is None
    assert await store.read("b", owner="o", after=0, timeout_s=0) == []  # journal gone too
    for kept in ("a", "c", "d"):
        assert await store.get(kept, owner="o") is not None, kept
    await store.create(task("e"), owner="p")  # another owner's task: the next ended one goes
    assert await store.get("a", owner="o") is None
    assert await store.get("c", owner="o") is not None  # still working: never dropped


async def test_a_store_full_of_active_tasks_refuses_a_new_one() -> None:
    store = InMemoryTaskStore(max_tasks=2)
    await store.create(task("a"), owner="o")
    await store.create(task("b"), owner="p")
    with pytest.raises(StoreFull):
        await store.create(task("c"), owner="o")
    assert await store.get("c", owner="o") is None
    assert await store.get("a", owner="o") is not None
    assert await store.get("b", owner="p") is not None
    error = as_a2a_error(StoreFull("full"), where="test")
    assert isinstance(error, OverloadedError) and error.http_status == 503
    assert error.http_headers() == {"Retry-After": "5"}
    await finish(store, "a")
    await store.create(task("c"), owner="o")  # room again once one has ended
    assert await store.get("c", owner="o") is not None


def said(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


async def test_conversations_are_bounded_the_ones_written_to_longest_ago_go_first() -> None:
    """Under sustained traffic every new context is a conversation: without a bound they
    stayed for the TTL (days), growing the process by ~1.7 KiB a request."""
    store = InMemoryMessageStore(max_conversations=100)
    for n in range(100):
        await store.append(f"c{n}", said(f"m{n}"), owner="o", unit_id="u1")
    await store.append("c0", said("again"), owner="o", unit_id="u2")  # written to: now newest
    assert await store.claim("c1", "t1", owner="o") is None  # a turn runs in c1
    await store.append("new", said("hi"), owner="o", unit_id="u1")
    # A hundredth at once, oldest written first, skipping the conversation a turn runs in.
    assert await store.window("c2", owner="o", limit=10) == []
    assert [m.content for m in await store.window("c0", owner="o", limit=10)] == ["m0", "again"]
    assert [m.content for m in await store.window("c1", owner="o", limit=10)] == ["m1"]
    assert [m.content for m in await store.window("c3", owner="o", limit=10)] == ["m3"]
    assert [m.content for m in await store.window("new", owner="o", limit=10)] == ["hi"]
    for n in range(1000):
        await store.append(f"more{n}", said("x"), owner="o", unit_id="u1")
    assert len(store._conversations) <= 100
    assert [m.content for m in await store.window("c1", owner="o", limit=10)] == ["m1"]


async def test_a_long_conversation_keeps_what_a_turn_reads_and_no_more() -> None:
    """A context that goes on for thousands of turns: only its last messages are ever read
    (AGENT_HISTORY_MAX_MESSAGES), so only those (up to twice as many) are kept."""
    store = InMemoryMessageStore(window_max=10)
    for n in range(1000):
        answer = [*said(f"q{n}"), ChatMessage(role="assistant", content=f"a{n}")]
        assert await store.append("c", answer, owner="o", unit_id=f"u{n}")
    (conversation,) = store._conversations.values()
    assert len(conversation.messages) <= 20
    assert len(conversation.units) <= 20
    window = await store.window("c", owner="o", limit=10)
    assert [m.content for m in window] == [f"{kind}{n}" for n in range(995, 1000) for kind in "qa"]
    assert not await store.append("c", said("again"), owner="o", unit_id="u999")  # a retry
    assert [m.content for m in await store.window("c", owner="o", limit=1)] == ["a999"]


async def test_a_dropped_tasks_lease_goes_with_it_unless_held() -> None:
    stores = InMemoryStores.create(ttl_s=3600, max_tasks=2)
    for name in ("a", "b"):
        await stores.tasks.create(task(name), owner="o")
        assert await stores.leases.acquire(name, owner="o", holder=f"h-{name}", ttl_s=60)
    await stores.leases.release("a", owner="o", holder="h-a")
    await finish(stores.tasks, "a")
    await finish(stores.tasks, "b")  # ended, its lease still held (a turn winding down)
    await stores.tasks.create(task("c"), owner="o")
    await stores.tasks.create(task("d"), owner="o")
    assert await stores.tasks.get("a", owner="o") is None
    assert await stores.tasks.get("b", owner="o") is None
    assert ("o", "a") not in stores.leases._leases
    assert await stores.leases.is_held("b", owner="o")  # held: kept, its holder still writes
    await finish(stores.tasks, "c")
    await finish(stores.tasks, "d")
    for n in range(50):
        await stores.tasks.create(task(f"t{n}"), owner="o")
        await finish(stores.tasks, f"t{n}")
        await stores.leases.acquire(f"t{n}", owner="o", holder="h", ttl_s=60)
        await stores.leases.release(f"t{n}", owner="o", holder="h")
    assert len(stores.leases._leases) <= 3


async def test_a_dropped_task_takes_its_checkpoint_push_configs_and_cursor_with_it() -> None:
    """Ended tasks make room; what the other stores keep for them must go too, or a replica
    that keeps its task count flat still grows with every task it ever ran."""
    stores = InMemoryStores.create(ttl_s=3600, max_tasks=10)
    for n in range(500):
        name = f"t{n}"
        await stores.tasks.create(task(name), owner="o")
        await stores.checkpoints.save(name, "{}", owner="o")  # a turn that never deleted it
        await stores.pushes.put(PushConfig(id="p", task_id=name, url="https://x/h"), owner="o")
        await stores.pushes.advance(name, 3, owner="o")
        await finish(stores.tasks, name)
    assert len(stores.tasks._tasks) <= 10
    assert len(stores.tasks._ended) <= 10
    assert len(stores.checkpoints._checkpoints) <= 10
    assert len(stores.pushes._tasks) <= 10  # each task's configs and cursor
    assert await stores.checkpoints.load("t0", owner="o") is None
    assert await stores.pushes.list("t0", owner="o") == []
    assert await stores.pushes.cursor("t0", owner="o") == 0
    assert await stores.checkpoints.load("t499", owner="o") == "{}"  # the newest kept
    assert [c.url for c in await stores.pushes.list("t499", owner="o")] == ["https://x/h"]
    assert await stores.pushes.cursor("t499", owner="o") == 3


async def test_a_held_lease_of_a_dropped_task_goes_when_its_holder_releases_it() -> None:
    stores = InMemoryStores.create(ttl_s=3600, max_tasks=1)
    await stores.tasks.create(task("a"), owner="o")
    await stores.leases.acquire("a", owner="o", holder="h", ttl_s=60)
    await finish(stores.tasks, "a")
    await stores.tasks.create(task("b"), owner="o")  # "a" dropped, its turn still winding down
    assert await stores.leases.is_held("a", owner="o")
    await stores.leases.release("a", owner="o", holder="h")
    assert ("o", "a") not in stores.leases._leases


def test_the_in_memory_stores_bound_conversations_as_tasks() -> None:
    stores = InMemoryStores.create(ttl_s=3600, max_tasks=7)
    assert stores.messages._max_conversations == 7


async def test_a_journal_keeps_its_last_entries_at_their_positions() -> None:
    store = InMemoryTaskStore(journal_max=5)
    await store.create(task("a"), owner="o")
    for n in range(9):  # positions 2..10
        update = StatusUpdate(
            task_id="a", context_id="c", status=TaskStatus(state=TaskState.WORKING)
        )
        await store.publish("a", JournalWrite(update if n % 2 else dump_event(update)), owner="o")
    await finish(store, "a")  # position 11
    entries = await store.read("a", owner="o", after=0, timeout_s=0)
    assert [entry.position for entry in entries] == [7, 8, 9, 10, 11]
    assert [entry.state for entry in entries] == [TaskState.WORKING] * 4 + [TaskState.COMPLETED]
    assert all(entry.kind == "status" for entry in entries)
    later = await store.read("a", owner="o", after=9, timeout_s=0)
    assert [(entry.position, entry.state) for entry in later] == [
        (10, TaskState.WORKING),
        (11, TaskState.COMPLETED),
    ]
    assert await store.read("a", owner="o", after=11, timeout_s=0) == []
