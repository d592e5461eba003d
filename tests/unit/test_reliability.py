"""Turns under concurrency and faults: a turn that lost its lease writes nothing, a replica refuses
turns beyond its limit before writing anything, one conversation runs one turn at a time, and an
answered task survives the death of the process that took the answer.

The request handler and the runner are driven directly over the stores (memory and real Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator

import pytest

from agent.agent import Agent
from agent.runtime.admission import Overloaded
from agent.runtime.runner import TaskRunner
from agent.runtime.supervisor import TurnSupervisor
from app.errors import UnsupportedOperationError
from app.handler import RequestHandler, SendRequest
from stores.base import Fence, LeaseStatus, StoreUnavailable, TaskQuery
from stores.models import Message, Part, Role, Task, TaskRecord, TaskState, TaskStatus

from .backends import Backend
from .engine_helpers import OWNER, Stores, make_loop, user_message, wait_until
from .handler_rig import build_handler
from .scripted_llm import ScriptedLLM, blocked, call, text, tools

ASK_USER = "ask_user"


def _runner(backend: Backend, llm: ScriptedLLM, *, holder: str, limit: int = 64) -> TaskRunner:
    return TaskRunner(
        Agent(make_loop(llm), backend.messages),
        tasks=backend.tasks,
        messages=backend.messages,
        checkpoints=backend.checkpoints,
        leases=backend.leases,
        holder=holder,
        lease_ttl_s=15.0,
        max_running_turns=limit,
    )


@contextlib.asynccontextmanager
async def _handler(
    backend: Backend, llm: ScriptedLLM, *, holder: str = "p1", limit: int = 64
) -> AsyncIterator[RequestHandler]:
    runner = _runner(backend, llm, holder=holder, limit=limit)
    try:
        yield build_handler(
            runner,
            tasks=backend.tasks,
            messages=backend.messages,
            checkpoints=backend.checkpoints,
            read_block_s=0.5,
        )
    finally:
        await runner.shutdown()


def _send(
    content: str, *, context_id: str | None = None, task_id: str | None = None
) -> SendRequest:
    message = user_message(content, context_id=context_id, task_id=task_id)
    return SendRequest(message=message, return_immediately=True)


async def _settled(handler: RequestHandler, task_id: str) -> TaskState:
    for _ in range(500):
        state = (await handler.get_task(task_id, owner=OWNER)).status.state
        if state.is_terminal or state.is_interrupted:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"task {task_id} did not settle")


# --- fencing in the runner ---------------------------------------------------------------------


async def test_a_turn_whose_lease_was_taken_over_stops_without_writing(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    stores = Stores()
    gate = asyncio.Event()
    step = blocked(gate, then=text("a late ", "answer"))
    llm.script(step)
    runner = stores.runner(make_loop(llm), holder="p1")
    task = await stores.submit(runner)
    await asyncio.wait_for(step.entered.wait(), 2)
    # p1 stalls past its lease (a pause, a partition); p2 takes the turn over.
    holder = runner.lease_holder(task.id, owner=OWNER)
    assert holder is not None
    await stores.leases.hand_over(task.id, owner=OWNER, holder=holder)
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="p2", ttl_s=30)
    taken_at = await stores.position(task.id)

    gate.set()  # p1 wakes up and tries to stream its answer
    await wait_until(
        lambda: not runner.is_running(task.id, owner=OWNER),
        timeout_s=5,
        what="the stale holder's turn to stop",
    )

    assert await stores.entries(task.id, after=taken_at) == [], "the stale holder wrote"
    assert (await stores.snapshot(task.id)).status.state == TaskState.WORKING
    assert not await stores.claim_is_free(task.context_id), "it released the new holder's claim"
    status = await stores.leases.renew(task.id, owner=OWNER, holder="p2", ttl_s=30)
    assert status is LeaseStatus.HELD, "it released the new holder's lease"
    assert "lease lost" in caplog.text


async def test_no_lease_warning_for_turns_that_suspended_or_ended_on_one_server(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    stores = Stores()
    llm.script(tools(call("q1", ASK_USER, {"question": "Which city?"})), text("done"))
    runner = stores.runner(make_loop(llm), holder="only")
    supervisor = TurnSupervisor(
        runner, tasks=stores.tasks, checkpoints=stores.checkpoints, leases=stores.leases
    )
    asking = await stores.submit(runner, "ask me")
    await stores.journal_until_end(asking.id)
    answering = await stores.submit(runner, "just answer")
    await stores.journal_until_end(answering.id)
    with caplog.at_level(logging.WARNING):
        await supervisor.renew_leases()
        await supervisor.recover_orphans()
    assert "lease" not in caplog.text
    await runner.shutdown()


# --- admission ---------------------------------------------------------------------------------


async def test_turns_beyond_the_limit_are_refused_before_anything_is_written(
    backend: Backend, llm: ScriptedLLM
) -> None:
    gates = [asyncio.Event(), asyncio.Event()]
    steps = [blocked(gate, then=text("ok")) for gate in gates]
    llm.script(*steps, text("ok again"))
    async with _handler(backend, llm, limit=2) as handler:
        first = await handler.send_message(_send("one"), owner=OWNER)
        await asyncio.wait_for(steps[0].entered.wait(), 5)  # "one" holds the first gate
        await handler.send_message(_send("two"), owner=OWNER)

        with pytest.raises(Overloaded):
            await handler.send_message(_send("three", context_id="ctx-refused"), owner=OWNER)
        page = await handler.list_tasks(TaskQuery(), owner=OWNER)
        assert page.total_size == 2, "the refused send left a task behind"
        assert await backend.messages.claim("ctx-refused", "probe", owner=OWNER) is None

        gates[0].set()
        assert await _settled(handler, first.task.id) == TaskState.COMPLETED
        for _ in range(250):  # the finished job gives its slot back as it ends
            with contextlib.suppress(Overloaded):
                again = await handler.send_message(_send("four"), owner=OWNER)
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the slot of a finished turn was never given back")
        gates[1].set()
        assert await _settled(handler, again.task.id) == TaskState.COMPLETED


# --- one turn per conversation -----------------------------------------------------------------


async def test_concurrent_sends_on_one_new_context_run_exactly_one_turn(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds, senders = 12, 8
    create = backend.tasks.create

    async def slow_create(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        # A store that answers at its own pace: the claim's holder is not yet a task when the
        # other senders look at it (what a loaded Redis does to a burst of sends).
        await asyncio.sleep(random.uniform(0, 0.01))
        return await create(task, owner=owner, fence=fence)

    monkeypatch.setattr(backend.tasks, "create", slow_create)
    async with _handler(backend, llm) as handler:
        for n in range(rounds):
            context_id = f"ctx-race-{n}"
            # The turn that wins stays in its model call until every sender has its answer: a
            # turn that ended meanwhile would free the context, and a later send may then start
            # the next turn there (rightly), which is not the race this test is about.
            answered = asyncio.Event()
            llm.script(blocked(answered, then=text(f"answer {n}")))
            results = await asyncio.gather(
                *(
                    handler.send_message(_send(f"q{n}-{i}", context_id=context_id), owner=OWNER)
                    for i in range(senders)
                ),
                return_exceptions=True,
            )
            accepted = [result for result in results if not isinstance(result, BaseException)]
            refused = [result for result in results if isinstance(result, BaseException)]
            assert len(accepted) == 1, f"round {n}: {len(accepted)} turns started on one context"
            assert all(isinstance(error, UnsupportedOperationError) for error in refused), refused
            answered.set()
            assert await _settled(handler, accepted[0].task.id) == TaskState.COMPLETED
            conversation = await backend.messages.window(context_id, owner=OWNER, limit=100)
            assert [message.role for message in conversation] == ["user", "assistant"]


async def test_a_claim_left_by_a_finished_task_is_taken_over(
    backend: Backend, llm: ScriptedLLM
) -> None:
    llm.script(text("first"), text("second"))
    async with _handler(backend, llm) as handler:
        first = await handler.send_message(_send("one", context_id="ctx-stale"), owner=OWNER)
        assert await _settled(handler, first.task.id) == TaskState.COMPLETED
        # A release lost to a fault: the finished task still holds the claim.
        assert await backend.messages.claim("ctx-stale", first.task.id, owner=OWNER) is None
        second = await handler.send_message(_send("two", context_id="ctx-stale"), owner=OWNER)
        assert await _settled(handler, second.task.id) == TaskState.COMPLETED
        conversation = await backend.messages.window("ctx-stale", owner=OWNER, limit=100)
        assert [message.role for message in conversation] == ["user", "assistant"] * 2


# --- an answer survives the death of the process that took it ----------------------------------


async def test_an_answered_task_is_taken_over_with_the_answer(
    backend: Backend, llm: ScriptedLLM
) -> None:
    gate = asyncio.Event()  # never set: the process that takes the answer dies mid-call
    llm.script(
        tools(call("q1", ASK_USER, {"question": "Which city?"})),
        blocked(gate),
        text("Paris it is."),
    )
    async with _handler(backend, llm, holder="p1") as handler:
        task = (await handler.send_message(_send("plan a trip"), owner=OWNER)).task
        assert await _settled(handler, task.id) == TaskState.INPUT_REQUIRED
    async with _handler(backend, llm, holder="p2") as handler:
        answer = Message(
            message_id="answer-1",
            role=Role.USER,
            parts=[Part(text="Paris")],
            task_id=task.id,
        )
        await handler.send_message(
            SendRequest(message=answer, return_immediately=True), owner=OWNER
        )
        await wait_until(lambda: llm.remaining == 1, timeout_s=5, what="p2 inside its model call")
        # p2 dies: its shutdown hands the lease over (it expires now), nothing is recorded.
    survivor = _runner(backend, llm, holder="p3")
    try:
        await TurnSupervisor(
            survivor, tasks=backend.tasks, checkpoints=backend.checkpoints, leases=backend.leases
        ).recover_orphans()
        handler = build_handler(
            survivor,
            tasks=backend.tasks,
            messages=backend.messages,
            checkpoints=backend.checkpoints,
        )
        assert await _settled(handler, task.id) == TaskState.COMPLETED
        final = await handler.get_task(task.id, owner=OWNER)
    finally:
        await survivor.shutdown()
    assert final.artifacts[-1].parts[0].text == "Paris it is."
    tool_results = [m for m in llm.requests[-1].messages if m["role"] == "tool"]
    assert tool_results and "Paris" in (tool_results[-1]["content"] or "")


# --- a start that fails, and takeovers at the limit ----------------------------------------------


async def test_a_start_that_fails_gives_its_slot_and_lease_back(
    backend: Backend, llm: ScriptedLLM
) -> None:
    runner = _runner(backend, llm, holder="p1", limit=1)
    with pytest.raises(RuntimeError):
        async with runner.starting("t-failing", owner=OWNER):
            raise RuntimeError("the task could not be created")
    assert runner.turns_held() == 0
    assert not await backend.leases.is_held("t-failing", owner=OWNER)


async def test_a_create_that_fails_leaves_no_task_claim_or_lease(
    backend: Backend, llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unavailable(task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        raise StoreUnavailable("the store went away")

    monkeypatch.setattr(backend.tasks, "create", unavailable)
    runner = _runner(backend, llm, holder="p1", limit=1)
    handler = build_handler(
        runner, tasks=backend.tasks, messages=backend.messages, checkpoints=backend.checkpoints
    )
    send = _send("hello", context_id="ctx-failed-create")
    with pytest.raises(StoreUnavailable):
        await handler.send_message(send, owner=OWNER)
    assert runner.turns_held() == 0
    assert await backend.messages.claim("ctx-failed-create", "probe", owner=OWNER) is None
    page = await backend.tasks.list(TaskQuery(), owner=OWNER)
    assert page.total_size == 0


async def test_a_replica_at_its_turn_limit_leaves_orphans_for_later(
    backend: Backend, llm: ScriptedLLM
) -> None:
    """The sweep takes a turn over only into a free slot; the orphan waits, untouched."""
    gate = asyncio.Event()
    busy_step = blocked(gate, then=text("busy"))
    llm.script(busy_step, text("taken over"))
    runner = _runner(backend, llm, holder="p1", limit=1)
    handler = build_handler(
        runner, tasks=backend.tasks, messages=backend.messages, checkpoints=backend.checkpoints
    )
    try:
        busy = await handler.send_message(_send("busy"), owner=OWNER)
        await asyncio.wait_for(busy_step.entered.wait(), 5)
        dead = _runner(backend, llm, holder="dead")
        # An orphan: a task created by a process that died before its turn started.
        lost = user_message("lost", context_id="ctx-lost")
        async with dead.starting("t-lost", owner=OWNER) as start:
            task = Task(
                id="t-lost",
                context_id="ctx-lost",
                status=TaskStatus(state=TaskState.SUBMITTED),
                history=[lost.model_copy(update={"task_id": "t-lost"})],
            )
            await backend.tasks.create(task, owner=OWNER)
            assert start.fence is not None
            await backend.leases.hand_over("t-lost", owner=OWNER, holder=start.fence.holder)
            start.launched = True  # the process "died" holding it: nothing released
        supervisor = TurnSupervisor(
            runner, tasks=backend.tasks, checkpoints=backend.checkpoints, leases=backend.leases
        )
        await supervisor.recover_orphans()  # the one slot is busy
        assert not runner.is_running("t-lost", owner=OWNER)
        record = await backend.tasks.get("t-lost", owner=OWNER)
        assert record is not None and record.task.status.state == TaskState.SUBMITTED
        assert llm.remaining == 1, "a turn was started beyond the limit"

        gate.set()
        assert await _settled(handler, busy.task.id) == TaskState.COMPLETED
        await wait_until(lambda: runner.turns_held() == 0, timeout_s=5, what="a slot")
        await supervisor.recover_orphans()  # now there is room
        assert await _settled(handler, "t-lost") == TaskState.COMPLETED
    finally:
        await runner.shutdown()
