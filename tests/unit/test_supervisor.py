"""TurnSupervisor over in-memory stores: lease renewal, cancel requests, lost leases, orphans."""

from __future__ import annotations

import asyncio

import pytest

from agent.runtime.supervisor import UNRECOVERABLE, TurnSupervisor
from stores.base import LeaseStatus, TaskRef
from stores.models import Role, TaskState

from .engine_helpers import (
    OWNER,
    Stores,
    ToolLog,
    chunk_text,
    chunks,
    expire_lease,
    make_loop,
    orphan_without_a_turn,
    start_turn,
    status_updates,
    wait_until,
)
from .scripted_llm import ScriptedLLM, blocked, call, text, tools

CANCELED_TEXT = "The task was canceled."


def supervisor_for(stores: Stores, runner) -> TurnSupervisor:
    return TurnSupervisor(
        runner, tasks=stores.tasks, checkpoints=stores.checkpoints, leases=stores.leases
    )


# --- renewal ---------------------------------------------------------------------------------


async def test_renewal_keeps_a_running_turn_running(llm: ScriptedLLM) -> None:
    stores = Stores()
    gate = asyncio.Event()
    step = blocked(gate, then=text("done"))
    llm.script(step)
    runner = stores.runner(make_loop(llm), holder="process-1", lease_ttl_s=0.2)
    supervisor = supervisor_for(stores, runner)
    task = await stores.submit(runner)
    await asyncio.wait_for(step.entered.wait(), 2)
    try:
        for _ in range(3):
            await asyncio.sleep(0.1)
            await supervisor.renew_leases()
        # renewed in time: the lease never expired, nobody else can take it
        assert await stores.leases.expired() == []
        assert not await stores.leases.acquire(task.id, owner=OWNER, holder="p2", ttl_s=1)
        assert runner.is_running(task.id, owner=OWNER)
        gate.set()
        entries = await stores.journal_until_end(task.id)
        assert status_updates(entries)[-1].status.state == TaskState.COMPLETED
    finally:
        await runner.shutdown()


async def test_renewal_cancels_a_turn_whose_lease_has_a_cancel_request(llm: ScriptedLLM) -> None:
    stores = Stores()
    step = blocked()
    llm.script(step)
    runner = stores.runner(make_loop(llm), holder="process-1")
    supervisor = supervisor_for(stores, runner)
    task = await stores.submit(runner)
    await asyncio.wait_for(step.entered.wait(), 2)

    await stores.leases.request_cancel(task.id, owner=OWNER)
    await supervisor.renew_leases()

    assert step.cancelled, "the model call was not interrupted"
    assert not runner.is_running(task.id, owner=OWNER)
    final = await stores.snapshot(task.id)
    assert final.status.state == TaskState.CANCELED
    assert final.status.message.text() == CANCELED_TEXT
    entries = await stores.entries(task.id)
    assert [u.status.state for u in status_updates(entries)] == [
        TaskState.WORKING,
        TaskState.CANCELED,
    ]
    assert await stores.claim_is_free(task.context_id)
    assert await stores.checkpoints.load(task.id, owner=OWNER) is None
    assert (
        await stores.leases.renew(task.id, owner=OWNER, holder="process-1", ttl_s=1)
        is LeaseStatus.LOST
    ), "the canceled turn kept its lease"


async def test_cancel_request_heard_by_the_listener(llm: ScriptedLLM) -> None:
    stores = Stores()
    step = blocked()
    llm.script(step)
    runner = stores.runner(make_loop(llm), holder="process-1")
    supervisor = supervisor_for(stores, runner)
    supervisor.start()
    try:
        task = await stores.submit(runner)
        await asyncio.wait_for(step.entered.wait(), 2)
        await asyncio.sleep(0.01)  # the listener subscribes
        await stores.leases.request_cancel(task.id, owner=OWNER)
        entries = await stores.journal_until_end(task.id, timeout_s=2)
        assert status_updates(entries)[-1].status.state == TaskState.CANCELED
        assert step.cancelled
    finally:
        await supervisor.stop()
        await runner.shutdown()


async def test_lost_lease_stops_the_turn_here_without_recording_anything(
    llm: ScriptedLLM,
) -> None:
    log = ToolLog()
    stores = Stores()
    step = blocked()
    llm.script(tools(call("c1", "add", {"a": 1, "b": 1})), step)
    runner = stores.runner(make_loop(llm, log.tools()), holder="process-1")
    supervisor = supervisor_for(stores, runner)
    task = await stores.submit(runner)
    await asyncio.wait_for(step.entered.wait(), 2)
    before = await stores.entries(task.id)

    # the lease expired (a long pause) and another server took the turn over
    holder = runner.lease_holder(task.id, owner=OWNER)
    assert holder is not None
    await stores.leases.hand_over(task.id, owner=OWNER, holder=holder)
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="process-2", ttl_s=30)
    await supervisor.renew_leases()

    assert step.cancelled
    assert not runner.is_running(task.id, owner=OWNER)
    after = await stores.entries(task.id)
    assert after == before, "a dropped turn published something"
    snapshot = await stores.snapshot(task.id)
    assert snapshot.status.state == TaskState.WORKING
    # what the new holder needs is left alone: its lease, the checkpoint, the context claim
    assert (
        await stores.leases.renew(task.id, owner=OWNER, holder="process-2", ttl_s=30)
        is LeaseStatus.HELD
    )
    assert await stores.checkpoints.load(task.id, owner=OWNER) is not None
    assert not await stores.claim_is_free(task.context_id)


# --- orphans ---------------------------------------------------------------------------------


async def test_orphan_with_a_checkpoint_is_resumed_and_completes(llm: ScriptedLLM) -> None:
    log = ToolLog()
    stores = Stores()
    step = blocked()
    llm.script(tools(call("c1", "add", {"a": 1, "b": 2}), chunks=["Adding."]), step)
    dead = stores.runner(make_loop(llm, log.tools()), holder="process-1")
    task = await stores.submit(dead, "add")
    await asyncio.wait_for(step.entered.wait(), 2)
    await dead.shutdown()  # the process dies mid-turn: its lease expires now
    after = await stores.position(task.id)

    llm2 = ScriptedLLM(text("It is 3."))
    runner = stores.runner(make_loop(llm2, log.tools()), holder="process-2")
    supervisor = supervisor_for(stores, runner)
    try:
        await supervisor.recover_orphans()
        assert runner.is_running(task.id, owner=OWNER)
        tail = await stores.journal_until_end(task.id, after=after)
    finally:
        await runner.shutdown()
    llm2.assert_done()

    assert status_updates(tail)[-1].status.state == TaskState.COMPLETED
    assert log.calls == [("add", {"a": 1, "b": 2})], "the tool ran again"
    assert [m["role"] for m in llm2.messages(0)] == ["system", "user", "assistant", "tool"]
    updates = chunks(tail)
    assert updates[0].append is False
    assert chunk_text(updates[0]) == "Adding."
    final = await stores.snapshot(task.id)
    assert final.artifacts[0].parts[0].text == "Adding.\n\nIt is 3."
    stored = await stores.conversation(task.context_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    await wait_until(lambda: not runner.is_running(task.id, owner=OWNER), what="turn end")
    assert await stores.leases.expired() == []
    assert await stores.claim_is_free(task.context_id)


async def test_orphan_that_never_started_is_started_and_completes(llm: ScriptedLLM) -> None:
    """SUBMITTED without a checkpoint: its process died right after accepting it."""
    stores = Stores()
    task = await orphan_without_a_turn(stores, TaskState.SUBMITTED)
    runner = stores.runner(make_loop(llm), holder="process-2")
    llm.script(text("Started late."))
    try:
        await supervisor_for(stores, runner).recover_orphans()
        entries = await stores.journal_until_end(task.id)
    finally:
        await runner.shutdown()
    assert status_updates(entries)[-1].status.state == TaskState.COMPLETED
    final = await stores.snapshot(task.id)
    assert final.status.state == TaskState.COMPLETED
    assert [m.role for m in final.history] == [Role.USER, Role.AGENT]
    assert llm.calls == 1
    window = await stores.messages.window(task.context_id, owner=OWNER, limit=10)
    assert [m.role for m in window] == ["user", "assistant"]
    assert await stores.claim_is_free(task.context_id)


async def test_orphan_without_a_checkpoint_fails_as_unrecoverable(llm: ScriptedLLM) -> None:
    """WORKING without a checkpoint: the turn started but saved nothing to go on from."""
    stores = Stores()
    task = await orphan_without_a_turn(stores, TaskState.WORKING)
    runner = stores.runner(make_loop(llm), holder="process-2")
    supervisor = supervisor_for(stores, runner)

    await supervisor.recover_orphans()

    assert not runner.is_running(task.id, owner=OWNER)
    final = await stores.snapshot(task.id)
    assert final.status.state == TaskState.FAILED
    assert final.status.message.text() == UNRECOVERABLE
    last = (await stores.entries(task.id))[-1].event
    assert last.status.state == TaskState.FAILED
    assert llm.calls == 0
    assert await stores.leases.expired() == []
    assert (
        await stores.leases.renew(task.id, owner=OWNER, holder="process-2", ttl_s=1)
        is LeaseStatus.LOST
    ), "the lease of the failed task was not released"
    assert await stores.claim_is_free(task.context_id)


async def test_orphan_with_an_unreadable_checkpoint_fails_as_unrecoverable(
    llm: ScriptedLLM,
) -> None:
    stores = Stores()
    task = await orphan_without_a_turn(stores)
    await stores.checkpoints.save(task.id, "{not json", owner=OWNER)
    runner = stores.runner(make_loop(llm), holder="process-2")
    await supervisor_for(stores, runner).recover_orphans()
    final = await stores.snapshot(task.id)
    assert final.status.state == TaskState.FAILED
    assert final.status.message.text() == UNRECOVERABLE
    assert await stores.checkpoints.load(task.id, owner=OWNER) is None


@pytest.mark.parametrize(
    "state",
    [TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.INPUT_REQUIRED],
)
async def test_orphan_of_a_task_no_longer_active_just_releases_the_lease(
    llm: ScriptedLLM, state: TaskState
) -> None:
    stores = Stores()
    task = await orphan_without_a_turn(stores, state)
    before = await stores.entries(task.id)
    runner = stores.runner(make_loop(llm), holder="process-2")

    await supervisor_for(stores, runner).recover_orphans()

    assert not runner.is_running(task.id, owner=OWNER)
    assert await stores.entries(task.id) == before, "something was published"
    assert (await stores.snapshot(task.id)).status.state == state
    assert await stores.leases.expired() == []
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="process-3", ttl_s=1), (
        "the lease was not released"
    )
    assert llm.calls == 0


async def test_orphan_of_a_deleted_task_just_releases_the_lease(llm: ScriptedLLM) -> None:
    stores = Stores()
    await expire_lease(stores, "no-such-task", "dead-process")
    runner = stores.runner(make_loop(llm), holder="process-2")
    await supervisor_for(stores, runner).recover_orphans()
    assert await stores.leases.expired() == []
    assert not runner.is_running("no-such-task", owner=OWNER)


async def test_an_expired_lease_of_a_turn_running_here_is_not_taken_over(
    llm: ScriptedLLM,
) -> None:
    stores = Stores()
    gate = asyncio.Event()
    step = blocked(gate, then=text("done"))
    llm.script(step)
    runner = stores.runner(make_loop(llm), holder="process-1")
    supervisor = supervisor_for(stores, runner)
    task = await stores.submit(runner)
    await asyncio.wait_for(step.entered.wait(), 2)
    try:
        holder = runner.lease_holder(task.id, owner=OWNER)
        assert holder is not None and holder.startswith("process-1/")
        await stores.leases.hand_over(task.id, owner=OWNER, holder=holder)  # renewals starved
        assert any(ref.task_id == task.id for ref in await stores.leases.expired())
        await supervisor.recover_orphans()
        assert llm.calls == 1, "the turn was started a second time"
        await supervisor.renew_leases()
        assert await stores.leases.expired() == []
        gate.set()
        entries = await stores.journal_until_end(task.id)
        assert status_updates(entries)[-1].status.state == TaskState.COMPLETED
    finally:
        await runner.shutdown()


async def test_an_orphan_another_server_took_first_is_left_alone(llm: ScriptedLLM) -> None:
    stores = Stores()
    task = await orphan_without_a_turn(stores)
    runner = stores.runner(make_loop(llm), holder="process-2")
    supervisor = supervisor_for(stores, runner)
    expired = await stores.leases.expired()
    # another server acquires between our expired() and acquire()
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="process-3", ttl_s=30)

    async def stale_expired(*, limit: int = 100):
        return expired

    stores.leases.expired = stale_expired  # type: ignore[method-assign]
    await supervisor.recover_orphans()
    assert (await stores.snapshot(task.id)).status.state == TaskState.WORKING
    assert not runner.is_running(task.id, owner=OWNER)


async def test_shutdown_hands_running_turns_over_at_once() -> None:
    """A stopping process makes its leases expire now: another takes over without waiting."""
    stores = Stores()
    llm = ScriptedLLM(blocked())
    runner = stores.runner(make_loop(llm), holder="stopping", lease_ttl_s=600)
    task, message = await stores.new_task("long")
    await start_turn(runner, task, message)
    await wait_until(lambda: llm.calls >= 1, what="the model call to start")
    assert await stores.leases.expired() == []
    await runner.shutdown()
    assert await stores.leases.expired() == [TaskRef(OWNER, task.id)]
    snapshot = await stores.snapshot(task.id)
    assert snapshot.status.state == TaskState.WORKING  # nothing recorded: the successor goes on
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="successor", ttl_s=60)
