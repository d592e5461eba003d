"""A new task whose creation fails (issue 48, defects 3 and 4): its claim never refuses the
client's retry for a task nobody can read, and its creation never lands later as a second task.

The request handler and the runner are driven directly over the stores (memory, Redis, Redis
Cluster); a store that does not answer is played by a wrapper that raises StoreUnavailable.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import UnsupportedOperationError
from stores.base import Fence, LeaseLost, StoreUnavailable, TaskQuery, TaskVoided
from stores.models import Task, TaskRecord, TaskState

from .backends import Backend
from .engine_helpers import OWNER
from .scripted_llm import ScriptedLLM, text
from .test_reliability import _handler, _send, _settled
from .test_store_contract import make_task


async def _tasks_of(backend: Backend, context_id: str) -> list[Task]:
    page = await backend.tasks.list(TaskQuery(context_id=context_id), owner=OWNER)
    return page.tasks


async def test_a_claim_of_a_task_never_created_does_not_refuse_the_retry(
    backend: Backend, llm: ScriptedLLM
) -> None:
    """Defect 3: a replica took the lease and the claim, then the store died before the task
    was written. The client's retry elsewhere runs at once, not -32004 for the whole lease."""
    ghost = make_task(context_id="ctx-ghost")
    fence = Fence("dead-replica/1", await _acquire(backend, ghost.id, "dead-replica/1"))
    assert await backend.messages.claim("ctx-ghost", ghost.id, owner=OWNER, fence=fence) is None
    llm.script(text("the answer"))
    async with _handler(backend, llm) as handler:
        retry = await handler.send_message(_send("hello", context_id="ctx-ghost"), owner=OWNER)
        assert await _settled(handler, retry.task.id) == TaskState.COMPLETED
    with pytest.raises(TaskVoided) as refused:  # the dead replica's creation, landing late
        await backend.tasks.create(ghost, owner=OWNER, fence=fence)
    assert refused.value.by == retry.task.id
    assert [task.id for task in await _tasks_of(backend, "ctx-ghost")] == [retry.task.id]


async def test_a_creation_held_by_a_cut_never_lands_beside_the_retry(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 4: the creation answers STORE_UNAVAILABLE (held by a cut: not written yet), the
    creator cannot tidy (still cut off), the client's retry completes; then the held creation
    lands: refused, no second task with the same message."""
    held: list[tuple[Task, Fence | None]] = []
    create, void = backend.tasks.create, backend.tasks.void

    async def cut_create(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        if not held:
            held.append((task, fence))
            raise StoreUnavailable("Redis is unavailable: the connection is held")
        return await create(task, owner=owner, fence=fence)

    async def cut_void(task_id: str, *, owner: str, by: str) -> bool:
        if by == task_id:  # the creator's own tidying: cut off too
            raise StoreUnavailable("Redis is unavailable: the connection is held")
        return await void(task_id, owner=owner, by=by)

    monkeypatch.setattr(backend.tasks, "create", cut_create)
    monkeypatch.setattr(backend.tasks, "void", cut_void)
    llm.script(text("the answer"))
    async with _handler(backend, llm, holder="a") as replica_a:
        with pytest.raises(StoreUnavailable):
            await replica_a.send_message(_send("hello", context_id="ctx-cut"), owner=OWNER)
    async with _handler(backend, llm, holder="b") as replica_b:
        retry = await replica_b.send_message(_send("hello", context_id="ctx-cut"), owner=OWNER)
        assert await _settled(replica_b, retry.task.id) == TaskState.COMPLETED
    task, fence = held[0]
    with pytest.raises(LeaseLost):  # TaskVoided, or the lease the sweep took: refused either way
        await create(task, owner=OWNER, fence=fence)
    assert [task.id for task in await _tasks_of(backend, "ctx-cut")] == [retry.task.id]
    conversation = await backend.messages.window("ctx-cut", owner=OWNER, limit=10)
    assert [message.content for message in conversation] == ["hello", "the answer"]


async def test_a_creator_that_failed_voids_its_task_and_frees_the_context(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store answers again at once: the creator itself makes sure its creation, still on
    its way, never lands, and gives the context and the lease up."""
    held: list[tuple[Task, Fence | None]] = []
    create = backend.tasks.create

    async def lost_create(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        held.append((task, fence))
        raise StoreUnavailable("Redis is unavailable: the connection dropped")

    monkeypatch.setattr(backend.tasks, "create", lost_create)
    async with _handler(backend, llm) as handler:
        with pytest.raises(StoreUnavailable):
            await handler.send_message(_send("hello", context_id="ctx-lost"), owner=OWNER)
    task, fence = held[0]
    with pytest.raises(TaskVoided):
        await create(task, owner=OWNER, fence=fence)
    assert await backend.messages.claim("ctx-lost", "probe", owner=OWNER) is None
    assert not await backend.leases.is_held(task.id, owner=OWNER)
    assert await _tasks_of(backend, "ctx-lost") == []


async def test_a_creation_whose_answer_was_lost_ends_failed_not_a_ghost(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store wrote the task but its answer was lost: the client was told STORE_UNAVAILABLE,
    so the task must not run, nor stay SUBMITTED with no replica to run it: it ends FAILED."""
    create = backend.tasks.create

    async def unanswered(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        await create(task, owner=owner, fence=fence)
        raise StoreUnavailable("Redis is unavailable: the reply was lost")

    monkeypatch.setattr(backend.tasks, "create", unanswered)
    async with _handler(backend, llm) as handler:
        with pytest.raises(StoreUnavailable):
            await handler.send_message(_send("hello", context_id="ctx-unanswered"), owner=OWNER)
    [task] = await _tasks_of(backend, "ctx-unanswered")
    assert task.status.state == TaskState.FAILED
    assert await backend.messages.claim("ctx-unanswered", "probe", owner=OWNER) is None
    assert not await backend.leases.is_held(task.id, owner=OWNER)


async def test_a_creation_voided_by_a_racing_message_names_the_winner(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The healthy race: two messages on one new context; the second finds the first's claim
    before its task exists, voids it and wins; the first is refused with -32004 naming it."""
    create = backend.tasks.create
    second: list[Any] = []
    first: list[Task] = []

    async def overtaken(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        if not first:  # the first creation: another message comes while it is on its way
            first.append(task)
            second.append(
                await handler.send_message(_send("two", context_id="ctx-race"), owner=OWNER)
            )
        return await create(task, owner=owner, fence=fence)

    monkeypatch.setattr(backend.tasks, "create", overtaken)
    llm.script(text("answer two"))
    async with _handler(backend, llm) as handler:
        with pytest.raises(UnsupportedOperationError) as refused:
            await handler.send_message(_send("one", context_id="ctx-race"), owner=OWNER)
        winner = second[0].task.id
        assert winner in str(refused.value)
        assert await _settled(handler, winner) == TaskState.COMPLETED
    assert [task.id for task in await _tasks_of(backend, "ctx-race")] == [winner]


async def _acquire(backend: Backend, task_id: str, holder: str) -> int:
    epoch = await backend.leases.acquire(task_id, owner=OWNER, holder=holder, ttl_s=15)
    assert epoch
    return epoch
