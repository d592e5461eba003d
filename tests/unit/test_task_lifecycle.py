"""The task runtime's refusals as a client sees them: each one reaches the handler's caller as the
A2A error (code, message, ids) it maps to, and a refused message changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from agent.hooks import ApprovalRequired
from agent.runtime import errors as runtime_errors
from agent.runtime.errors import (
    AnswerRejected,
    ContextBusy,
    NoCheckpoint,
    TaskMovedOn,
    TaskNotCancelable,
    TaskNotFound,
    TaskRuntimeError,
)
from agent.runtime.runner import TaskRunner
from app.errors import (
    A2AError,
    InvalidParamsError,
    TaskGenerationMismatchError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    as_a2a_error,
    from_runtime,
)
from app.handler import RequestHandler, SendRequest
from stores.base import TaskQuery
from stores.models import Message, Part, Role, Task, TaskRecord, TaskState

from .engine_helpers import OWNER, Stores, ToolLog, make_loop, user_message, wait_until
from .handler_rig import build_handler
from .scripted_llm import ScriptedLLM, blocked, call, text, tools


@dataclass
class Rig:
    stores: Stores
    runner: TaskRunner
    handler: RequestHandler

    async def state(self, task_id: str) -> TaskState:
        return (await self.handler.get_task(task_id, owner=OWNER)).status.state


@pytest.fixture
async def rig(llm: ScriptedLLM) -> AsyncIterator[Rig]:
    stores = Stores()
    # Approval of `danger` makes a turn wait for an answer that can be rejected.
    loop = make_loop(llm, ToolLog().tools(), hooks=[ApprovalRequired({"danger"})])
    runner = stores.runner(loop, holder="p1")
    handler = build_handler(
        runner, tasks=stores.tasks, messages=stores.messages, checkpoints=stores.checkpoints
    )
    try:
        yield Rig(stores, runner, handler)
    finally:
        await runner.shutdown()


def _send(
    words: str,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
    at_once: bool = False,
) -> SendRequest:
    message = user_message(words, task_id=task_id, context_id=context_id)
    return SendRequest(message=message, return_immediately=at_once)


async def _record(rig: Rig, request: SendRequest) -> TaskRecord:
    reply = await rig.handler.send_message(request, owner=OWNER)
    assert isinstance(reply, TaskRecord)
    return reply


async def _waiting(rig: Rig, llm: ScriptedLLM, *then: object) -> Task:
    """A task whose turn asks the user (its turn is over: nobody holds its lease)."""
    llm.script(tools(call("q1", "ask_user", {"question": "Which city?"})), *then)  # type: ignore[arg-type]
    record = await _record(rig, _send("plan a trip"))
    assert record.task.status.state == TaskState.INPUT_REQUIRED
    await _turns_over(rig)
    return record.task


async def _turns_over(rig: Rig) -> None:
    """Until every turn's job is over here (a blocking send answers just before)."""
    await wait_until(lambda: rig.runner.turns_held() == 0, timeout_s=5, what="the turns' end")


def _wire(error: A2AError) -> tuple[int, str, dict[str, str]]:
    return error.code, error.message, error.metadata


# --- a new message -------------------------------------------------------------------------------


async def test_a_second_task_on_a_busy_context_is_refused_and_writes_nothing(
    rig: Rig, llm: ScriptedLLM
) -> None:
    gate = asyncio.Event()
    first_turn = blocked(gate, then=text("done"))
    llm.script(first_turn)
    first = await _record(rig, _send("one", context_id="ctx-busy", at_once=True))
    await asyncio.wait_for(first_turn.entered.wait(), 5)

    with pytest.raises(UnsupportedOperationError) as refused:
        await rig.handler.send_message(_send("two", context_id="ctx-busy"), owner=OWNER)

    assert _wire(refused.value) == (
        -32004,
        f"Context 'ctx-busy' already has a task in progress ({first.task.id!r});"
        " wait for it to finish, or cancel it, before sending another message",
        {"contextId": "ctx-busy", "taskId": first.task.id},
    )
    assert isinstance(refused.value.__cause__, ContextBusy)
    assert (await rig.handler.list_tasks(TaskQuery(), owner=OWNER)).total_size == 1
    assert rig.runner.turns_held() == 1  # the refused start gave its slot back
    gate.set()
    await _turns_over(rig)
    assert await rig.state(first.task.id) == TaskState.COMPLETED


# --- an answer -----------------------------------------------------------------------------------


async def test_an_answer_to_a_task_taken_elsewhere_has_moved_on(rig: Rig, llm: ScriptedLLM) -> None:
    task = await _waiting(rig, llm)
    # Another process took the task's lease (it took an answer first).
    assert await rig.stores.leases.acquire(task.id, owner=OWNER, holder="p2/1", ttl_s=30)

    with pytest.raises(UnsupportedOperationError) as refused:
        await rig.handler.send_message(_send("Paris", task_id=task.id), owner=OWNER)

    assert _wire(refused.value) == (
        -32004,
        f"Task {task.id!r} has already moved on (another message was taken first)",
        {"taskId": task.id},
    )
    assert isinstance(refused.value.__cause__, TaskMovedOn)
    assert await rig.state(task.id) == TaskState.INPUT_REQUIRED
    assert rig.runner.turns_held() == 0


async def test_of_two_answers_at_once_one_is_taken(rig: Rig, llm: ScriptedLLM) -> None:
    task = await _waiting(rig, llm, text("Paris it is."))
    answers = [_send(city, task_id=task.id, at_once=True) for city in ("Paris", "Rome")]
    outcomes = await asyncio.gather(
        *(rig.handler.send_message(answer, owner=OWNER) for answer in answers),
        return_exceptions=True,
    )
    taken = [o for o in outcomes if isinstance(o, TaskRecord)]
    refused = [o for o in outcomes if isinstance(o, UnsupportedOperationError)]
    assert len(taken) == 1 and len(refused) == 1, outcomes
    assert refused[0].metadata == {"taskId": task.id}
    await _turns_over(rig)
    final = await rig.handler.get_task(task.id, owner=OWNER)
    assert final.status.state == TaskState.COMPLETED
    assert [m.text() for m in final.history if m.role == Role.USER].count("Rome") <= 1


async def test_a_rejected_answer_leaves_the_task_waiting(rig: Rig, llm: ScriptedLLM) -> None:
    llm.script(tools(call("d1", "danger", {"target": "db"})), text("Wiped."))
    task = (await _record(rig, _send("wipe it"))).task
    assert task.status.state == TaskState.INPUT_REQUIRED
    await _turns_over(rig)

    with pytest.raises(InvalidParamsError) as refused:
        await rig.handler.send_message(_send("maybe", task_id=task.id), owner=OWNER)

    code, message, ids = _wire(refused.value)
    assert (code, ids) == (-32602, {"taskId": task.id})
    assert "approval of the call of 'danger'" in message
    assert isinstance(refused.value.__cause__, AnswerRejected)
    assert await rig.state(task.id) == TaskState.INPUT_REQUIRED
    assert rig.runner.turns_held() == 0  # slot and lease given back
    # Still waiting: a proper answer is taken.
    done = await _record(rig, _send("approve", task_id=task.id))
    assert done.task.status.state == TaskState.COMPLETED


async def test_an_answer_whose_saved_turn_is_gone_fails_the_task(
    rig: Rig, llm: ScriptedLLM
) -> None:
    task = await _waiting(rig, llm)
    await rig.stores.checkpoints.delete(task.id, owner=OWNER)

    with pytest.raises(UnsupportedOperationError) as refused:
        await rig.handler.send_message(_send("Paris", task_id=task.id), owner=OWNER)

    assert _wire(refused.value) == (
        -32004,
        "The task's saved turn is gone, so it cannot go on; start a new task.",
        {"taskId": task.id},
    )
    assert isinstance(refused.value.__cause__, NoCheckpoint)
    assert await rig.state(task.id) == TaskState.FAILED


async def test_messages_to_tasks_that_wait_for_none_are_refused(rig: Rig, llm: ScriptedLLM) -> None:
    gate = asyncio.Event()
    working_turn = blocked(gate, then=text("done"))
    llm.script(working_turn, text("finished"))
    working = await _record(rig, _send("slow", at_once=True))
    await asyncio.wait_for(working_turn.entered.wait(), 5)
    with pytest.raises(UnsupportedOperationError) as still_working:
        await rig.handler.send_message(_send("more", task_id=working.task.id), owner=OWNER)
    assert _wire(still_working.value) == (
        -32004,
        f"Task {working.task.id!r} is still working; wait for it to finish or cancel it",
        {"taskId": working.task.id},
    )
    gate.set()

    ended = await _record(rig, _send("quick"))
    with pytest.raises(UnsupportedOperationError) as terminal:
        await rig.handler.send_message(_send("more", task_id=ended.task.id), owner=OWNER)
    assert _wire(terminal.value) == (
        -32004,
        f"Task {ended.task.id!r} is in terminal state TASK_STATE_COMPLETED;"
        " start a new task instead",
        {"taskId": ended.task.id},
    )


async def test_an_answer_in_another_context_is_invalid(rig: Rig, llm: ScriptedLLM) -> None:
    task = await _waiting(rig, llm)
    request = _send("Paris", task_id=task.id, context_id="ctx-other")
    with pytest.raises(InvalidParamsError) as refused:
        await rig.handler.send_message(request, owner=OWNER)
    assert _wire(refused.value) == (
        -32602,
        f"contextId 'ctx-other' does not match the context {task.context_id!r} of task {task.id!r}",
        {"taskId": task.id},
    )
    assert await rig.state(task.id) == TaskState.INPUT_REQUIRED


# --- cancel, and a task that does not exist --------------------------------------------------------


async def test_a_finished_task_is_not_cancelable(rig: Rig, llm: ScriptedLLM) -> None:
    llm.script(text("done"))
    task = (await _record(rig, _send("hello"))).task
    with pytest.raises(TaskNotCancelableError) as refused:
        await rig.handler.cancel_task(task.id, owner=OWNER)
    assert _wire(refused.value) == (
        -32002,
        f"Task {task.id!r} is in terminal state TASK_STATE_COMPLETED",
        {"taskId": task.id},
    )
    assert isinstance(refused.value.__cause__, TaskNotCancelable)
    assert await rig.state(task.id) == TaskState.COMPLETED


async def test_a_canceled_task_is_not_cancelable_again(rig: Rig, llm: ScriptedLLM) -> None:
    task = await _waiting(rig, llm)
    canceled = await rig.handler.cancel_task(task.id, owner=OWNER)
    assert canceled.status.state == TaskState.CANCELED
    assert canceled.status.message is not None
    assert canceled.status.message.parts[0].text == "The task was canceled."
    with pytest.raises(TaskNotCancelableError) as refused:
        await rig.handler.cancel_task(task.id, owner=OWNER)
    assert _wire(refused.value) == (
        -32002,
        f"Task {task.id!r} is in terminal state TASK_STATE_CANCELED",
        {"taskId": task.id},
    )
    assert refused.value.reason == "TASK_NOT_CANCELABLE"
    assert (await rig.handler.get_task(task.id, owner=OWNER)).status == canceled.status
    with pytest.raises(UnsupportedOperationError, match="terminal state TASK_STATE_CANCELED"):
        await rig.handler.send_message(_send("Paris", task_id=task.id), owner=OWNER)


async def test_cancels_that_find_a_running_task_all_answer_with_the_canceled_task(
    rig: Rig, llm: ScriptedLLM
) -> None:
    turn = blocked()  # the model call never answers: only a cancel ends the turn
    llm.script(turn)
    task = (await _record(rig, _send("slow", at_once=True))).task
    await asyncio.wait_for(turn.entered.wait(), 5)
    answers = await asyncio.gather(
        *(rig.handler.cancel_task(task.id, owner=OWNER) for _ in range(3))
    )
    assert [answer.status.state for answer in answers] == [TaskState.CANCELED] * 3
    assert answers[0].status == answers[1].status == answers[2].status  # one cancel recorded
    with pytest.raises(TaskNotCancelableError):  # the next one finds it ended
        await rig.handler.cancel_task(task.id, owner=OWNER)


async def test_an_unknown_task_is_not_found_for_every_operation(rig: Rig) -> None:
    answer = SendRequest(
        message=Message(
            message_id="m", role=Role.USER, parts=[Part(text="hi")], task_id="t-unknown"
        )
    )
    operations = [
        rig.handler.get_task("t-unknown", owner=OWNER),
        rig.handler.cancel_task("t-unknown", owner=OWNER),
        rig.handler.send_message(answer, owner=OWNER),
        rig.handler.subscribe("t-unknown", owner=OWNER),
    ]
    for operation in operations:
        with pytest.raises(TaskNotFoundError) as refused:
            await operation
        assert _wire(refused.value) == (
            -32001,
            "Task 't-unknown' not found",
            {"taskId": "t-unknown"},
        )
    assert rig.handler._streams.in_use == 0  # type: ignore[attr-defined]  # the refused stream


# --- the one table ---------------------------------------------------------------------------------


def _refusals() -> list[type[TaskRuntimeError]]:
    return [
        kind
        for kind in vars(runtime_errors).values()
        if isinstance(kind, type) and issubclass(kind, TaskRuntimeError)
    ]


@pytest.mark.parametrize("kind", _refusals(), ids=lambda kind: kind.__name__)
def test_every_runtime_refusal_has_its_a2a_error(kind: type[TaskRuntimeError]) -> None:
    expected = {
        "TaskNotFound": TaskNotFoundError,
        "TaskNotCancelable": TaskNotCancelableError,
        "ContextMismatch": InvalidParamsError,
        "AnswerRejected": InvalidParamsError,
        "GenerationMismatch": TaskGenerationMismatchError,  # A2A 1.1
    }.get(kind.__name__, UnsupportedOperationError)
    if kind is TaskNotFound:
        exc: TaskRuntimeError = TaskNotFound("t1")
    elif kind is TaskMovedOn:
        exc = TaskMovedOn("t1")
    elif kind is ContextBusy:
        exc = ContextBusy("c1", "t1")
    elif kind is runtime_errors.GenerationMismatch:
        exc = kind("t1", expected=3, current=5)
    else:
        exc = kind("refused", task_id="t1")
    wire = from_runtime(exc)
    assert type(wire) is expected
    assert wire.message == str(exc)
    assert wire.metadata["taskId"] == "t1"
    # Wherever else one surfaces (a stream, a binding), it is told the same.
    assert _wire(as_a2a_error(exc, where="test")) == _wire(wire)
