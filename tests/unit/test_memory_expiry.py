"""The in-memory stores forget tasks and conversations idle for longer than the TTL."""

from __future__ import annotations

import pytest

from stores.base import JournalWrite, LeaseStatus
from stores.memory import (
    InMemoryLeaseStore,
    InMemoryMessageStore,
    InMemoryStores,
    InMemoryTaskStore,
)
from stores.memory import support as memory_support
from stores.models import ChatMessage, PushConfig, StatusUpdate, Task, TaskState, TaskStatus

from .fake_clock import Clock


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(memory_support.time, "monotonic", fake)  # the module every store reads
    return fake


def task(task_id: str) -> Task:
    return Task(id=task_id, context_id="c", status=TaskStatus(state=TaskState.COMPLETED))


async def test_idle_tasks_expire_and_active_ones_stay(clock: Clock) -> None:
    store = InMemoryTaskStore(ttl_s=3600)
    await store.create(task("old"), owner="o")
    await store.create(task("busy"), owner="o")
    clock.now += 3000
    status = task("busy").status
    await store.publish(
        "busy", JournalWrite(StatusUpdate(task_id="busy", context_id="c", status=status)), owner="o"
    )
    clock.now += 3000  # "old" idle 6000 s > TTL; "busy" idle 3000 s
    await store.create(task("new"), owner="o")  # a write sweeps (at most once a minute)
    assert await store.get("old", owner="o") is None
    assert await store.get("busy", owner="o") is not None
    assert await store.get("new", owner="o") is not None


async def test_idle_conversations_expire(clock: Clock) -> None:
    store = InMemoryMessageStore(ttl_s=60)
    hello = [ChatMessage(role="user", content="hi")]
    await store.append("ctx-old", hello, owner="o", unit_id="u1")
    clock.now += 120
    await store.append("ctx-new", hello, owner="o", unit_id="u2")
    assert await store.window("ctx-old", owner="o", limit=10) == []
    assert len(await store.window("ctx-new", owner="o", limit=10)) == 1


async def test_released_leases_are_forgotten_after_the_ttl_and_held_ones_kept(
    clock: Clock,
) -> None:
    leases = InMemoryLeaseStore(ttl_s=3600)
    first = await leases.acquire("released", owner="o", holder="a", ttl_s=30)
    await leases.release("released", owner="o", holder="a")
    await leases.acquire("running", owner="o", holder="b", ttl_s=30)
    for _ in range(4):  # renewed well past the TTL: still its lease, still its epoch
        clock.now += 1200
        assert await leases.renew("running", owner="o", holder="b", ttl_s=30) == LeaseStatus.HELD
    assert await leases.acquire("next", owner="o", holder="c", ttl_s=30)  # sweeps
    assert await leases.renew("running", owner="o", holder="b", ttl_s=30) == LeaseStatus.HELD
    # The released lease was forgotten: a new holder starts a fresh record (epoch 1 again).
    assert await leases.acquire("released", owner="o", holder="d", ttl_s=30) == first


async def test_an_expired_task_takes_its_claim_lease_checkpoint_and_push_configs(
    clock: Clock,
) -> None:
    """A task left waiting for input past the TTL: it goes, and so does what it held (its
    context's claim would otherwise stay forever, and keep the conversation from ever going)."""
    stores = InMemoryStores.create(ttl_s=3600)
    waiting = Task(id="w", context_id="ctx", status=TaskStatus(state=TaskState.INPUT_REQUIRED))
    assert await stores.leases.acquire("w", owner="o", holder="h", ttl_s=30)
    assert await stores.messages.claim("ctx", "w", owner="o") is None
    await stores.tasks.create(waiting, owner="o")
    await stores.checkpoints.save("w", "{}", owner="o")
    await stores.pushes.put(PushConfig(id="p", task_id="w", url="https://x/h"), owner="o")
    await stores.leases.release("w", owner="o", holder="h")
    clock.now += 4000
    await stores.tasks.create(task("new"), owner="o")  # a write sweeps
    assert await stores.tasks.get("w", owner="o") is None
    assert await stores.messages.claim("ctx", "next", owner="o") is None  # free again
    assert await stores.checkpoints.load("w", owner="o") is None
    assert await stores.pushes.list("w", owner="o") == []
    assert ("o", "w") not in stores.leases._leases
