"""The fences of a conversation, a claim and a task's creation (issue 48): one contract, every
backend (memory, Redis, Redis Cluster).

A context's claim carries the lease fence of its task; conversation writes and the claim's release
are admitted only under that fence or a later one of the same task; a task's creation only under
its creator's lease, and never once another request voided it.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from stores.base import ClaimHolder, ContextFence, Fence, LeaseLost, TaskVoided
from stores.models import ChatMessage

from .backends import Backend
from .test_fencing_contract import _lease, _take_over
from .test_store_contract import make_task


@pytest.fixture
def owner() -> str:
    return f"owner-{uuid.uuid4().hex[:10]}"


def said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text) for text in texts]


async def _conversation(backend: Backend, owner: str, context_id: str = "ctx") -> list[str]:
    window = await backend.messages.window(context_id, owner=owner, limit=100)
    return [str(message.content) for message in window]


async def _claimed(backend: Backend, owner: str, task_id: str, holder: str) -> Fence:
    fence = await _lease(backend.leases, task_id, owner, holder)
    assert await backend.messages.claim("ctx", task_id, owner=owner, fence=fence) is None
    return fence


# --- conversation appends ----------------------------------------------------------------------


async def test_an_append_under_a_fence_taken_over_writes_nothing(
    backend: Backend, owner: str
) -> None:
    old = await _claimed(backend, owner, "t1", "a")
    messages = backend.messages
    assert await messages.append(
        "ctx", said("1"), owner=owner, unit_id="u1", fence=ContextFence("t1", old)
    )
    new = await _take_over(backend.leases, "t1", owner, old, new="b")
    assert await messages.claim("ctx", "t1", owner=owner, fence=new) is None  # re-fenced
    with pytest.raises(LeaseLost):
        await messages.append(
            "ctx", said("late"), owner=owner, unit_id="u2", fence=ContextFence("t1", old)
        )
    with pytest.raises(LeaseLost):
        await messages.window_then_append(
            "ctx", said("late"), owner=owner, unit_id="u3", limit=10, fence=ContextFence("t1", old)
        )
    assert await messages.append(
        "ctx", said("2"), owner=owner, unit_id="u4", fence=ContextFence("t1", new)
    )
    assert await _conversation(backend, owner) == ["1", "2"]


async def test_an_append_of_a_task_that_gave_the_context_up_writes_nothing(
    backend: Backend, owner: str
) -> None:
    """Defect 2 at the store: a turn failed elsewhere, the next turn runs; the first turn's held
    append lands late and is refused, so the conversation stays in order."""
    first = await _claimed(backend, owner, "t1", "a")
    failer = await _take_over(backend.leases, "t1", owner, first, new="b")
    assert await backend.messages.claim("ctx", "t1", owner=owner, fence=failer) is None
    assert await backend.messages.release("ctx", "t1", owner=owner, fence=failer)
    second = await _claimed(backend, owner, "t2", "c")
    turn2 = ContextFence("t2", second)
    await backend.messages.append(
        "ctx", said("prompt 2"), owner=owner, unit_id="t2:user", fence=turn2
    )
    with pytest.raises(LeaseLost):
        await backend.messages.append(
            "ctx", said("prompt 1"), owner=owner, unit_id="t1:user", fence=ContextFence("t1", first)
        )
    await backend.messages.append("ctx", said("answer 2"), owner=owner, unit_id="t2:a", fence=turn2)
    assert await _conversation(backend, owner) == ["prompt 2", "answer 2"]


async def test_a_later_fence_of_the_claims_task_takes_the_claim_over_at_its_first_write(
    backend: Backend, owner: str
) -> None:
    """Epochs only grow: an append under a later lease of the claim's task records its fence,
    and the earlier one writes no more."""
    old = await _claimed(backend, owner, "t1", "a")
    new = await _take_over(backend.leases, "t1", owner, old, new="b")
    messages = backend.messages
    assert await messages.append(
        "ctx", said("new"), owner=owner, unit_id="u1", fence=ContextFence("t1", new)
    )
    with pytest.raises(LeaseLost):
        await messages.append(
            "ctx", said("old"), owner=owner, unit_id="u2", fence=ContextFence("t1", old)
        )
    with pytest.raises(LeaseLost):  # nor claim it again under its stale fence
        await messages.claim("ctx", "t1", owner=owner, fence=old)
    same_epoch_other_holder = ContextFence("t1", Fence("c", new.epoch))
    with pytest.raises(LeaseLost):
        await messages.append(
            "ctx", said("c"), owner=owner, unit_id="u3", fence=same_epoch_other_holder
        )
    assert await _conversation(backend, owner) == ["new"]


async def test_an_append_to_an_unclaimed_or_unfenced_context(backend: Backend, owner: str) -> None:
    fence = await _lease(backend.leases, "t1", owner, "a")
    with pytest.raises(LeaseLost):  # no claim: nothing a fenced write may go by
        await backend.messages.append(
            "ctx", said("x"), owner=owner, unit_id="u1", fence=ContextFence("t1", fence)
        )
    assert await backend.messages.claim("ctx", "t1", owner=owner) is None  # an earlier server's
    assert await backend.messages.append(
        "ctx", said("y"), owner=owner, unit_id="u2", fence=ContextFence("t1", fence)
    )
    assert await backend.messages.append("ctx", said("z"), owner=owner, unit_id="u3")  # unfenced
    assert await _conversation(backend, owner) == ["y", "z"]


# --- the claim --------------------------------------------------------------------------------


async def test_a_claim_release_under_a_stale_fence_is_refused(backend: Backend, owner: str) -> None:
    old = await _claimed(backend, owner, "t1", "a")
    new = await _take_over(backend.leases, "t1", owner, old, new="b")
    messages = backend.messages
    assert await messages.claim("ctx", "t1", owner=owner, fence=new) is None
    assert not await messages.release("ctx", "t1", owner=owner, fence=old)
    holder = await messages.claim("ctx", "t2", owner=owner)
    assert holder == ClaimHolder("t1", fenced=True), "a stale fence freed the context"
    assert await messages.release("ctx", "t1", owner=owner, fence=new)
    assert await messages.claim("ctx", "t2", owner=owner) is None


async def test_a_claim_says_whether_its_holder_is_fenced(backend: Backend, owner: str) -> None:
    await _claimed(backend, owner, "t1", "a")
    assert await backend.messages.claim("ctx", "t9", owner=owner) == ClaimHolder("t1", fenced=True)
    assert await backend.messages.release("ctx", "t1", owner=owner)
    assert await backend.messages.claim("ctx", "t2", owner=owner) is None  # unfenced
    assert await backend.messages.claim("ctx", "t9", owner=owner) == ClaimHolder("t2", fenced=False)
    fence = await _lease(backend.leases, "t3", owner, "c")
    assert await backend.messages.replace_claim("ctx", "t2", "t3", owner=owner, fence=fence)
    assert await backend.messages.claim("ctx", "t9", owner=owner) == ClaimHolder("t3", fenced=True)


# --- task creation ----------------------------------------------------------------------------


async def test_a_creation_under_a_fence_taken_over_writes_nothing(
    backend: Backend, owner: str
) -> None:
    task = make_task()
    old = await _lease(backend.leases, task.id, owner, "a")
    await _take_over(backend.leases, task.id, owner, old, new="sweeper")
    with pytest.raises(LeaseLost):
        await backend.tasks.create(task, owner=owner, fence=old)
    assert await backend.tasks.get(task.id, owner=owner) is None
    assert await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0) == []


async def test_a_voided_creation_is_refused_naming_the_voider(backend: Backend, owner: str) -> None:
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    assert await backend.tasks.void(task.id, owner=owner, by="t2")
    assert await backend.tasks.void(task.id, owner=owner, by="t3")  # the first voider stays
    with pytest.raises(TaskVoided) as refused:
        await backend.tasks.create(task, owner=owner, fence=fence)
    assert refused.value.by == "t2"
    assert await backend.tasks.get(task.id, owner=owner) is None
    assert await backend.tasks.read(task.id, owner=owner, after=0, timeout_s=0) == []


async def test_a_task_created_is_not_voided(backend: Backend, owner: str) -> None:
    task = make_task()
    fence = await _lease(backend.leases, task.id, owner, "a")
    record = await backend.tasks.create(task, owner=owner, fence=fence)
    assert record.position == 1
    assert not await backend.tasks.void(task.id, owner=owner, by="t2")
    stored = await backend.tasks.get(task.id, owner=owner)
    assert stored is not None and stored.task.id == task.id


async def test_a_claim_racing_its_holders_release_finds_the_holder_or_takes_the_context(
    backend: Backend, owner: str
) -> None:
    """A new task's claim at the moment the context's last task gives it up: either the claim
    still names that task, or the new task has it; never an error (PostgreSQL: the release
    deleted the claim row between the claim's insert-if-missing and its row lock, and the claim
    failed with a TypeError, seen in a clean-clone CI run)."""
    for round_ in range(40):
        context_id = f"ctx-race-{round_}"
        assert await backend.messages.claim(context_id, "task-a", owner=owner) is None
        released, claimed = await asyncio.gather(
            backend.messages.release(context_id, "task-a", owner=owner),
            backend.messages.claim(context_id, "task-b", owner=owner),
        )
        assert released  # task-a held it, whichever came first
        later = await backend.messages.claim(context_id, "task-c", owner=owner)
        if claimed is None:  # the release came first: task-b took the context
            assert later == ClaimHolder("task-b", fenced=False)
        else:  # the claim came first and found task-a; then the context was free
            assert claimed == ClaimHolder("task-a", fenced=False)
            assert later is None
