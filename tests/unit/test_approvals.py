"""Tool calls a human approves: suspension, approve / deny on resume, one question at a time."""

from __future__ import annotations

import pytest

from agent.events import (
    CheckpointReached,
    MessagesCommitted,
    ToolCallStarted,
    TurnCompleted,
    TurnSuspended,
)
from agent.hooks import ApprovalRequired
from agent.runtime.answers import AnswerRejected
from agent.runtime.turn import TurnCheckpoint
from agent.state import LoopState
from stores.models import Message, Part, Role, TaskState

from .engine_helpers import (
    OWNER,
    USER,
    Stores,
    ToolLog,
    chunk_text,
    chunks,
    collect,
    make_loop,
    of,
    resume_turn,
    status_updates,
    tool_messages,
)
from .scripted_llm import ScriptedLLM, call, text, tools


def new_state() -> LoopState:
    return LoopState(conversation=[USER])


async def test_a_call_needing_approval_suspends_the_turn(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "db"})))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    events = await collect(loop, new_state())

    *_, checkpoint, suspended = events
    assert isinstance(suspended, TurnSuspended)
    assert suspended.awaiting.kind == "approval"
    assert suspended.awaiting.call.id == "d1"
    assert suspended.awaiting.call.name == "danger"
    assert isinstance(checkpoint, CheckpointReached)
    assert checkpoint.state.awaiting == suspended.awaiting
    assert log.calls == []
    assert not of(events, ToolCallStarted)
    assert not of(events, MessagesCommitted)


async def test_tools_not_named_run_without_approval(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("c1", "echo", {"text": "x"})), text("ok"))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    events = await collect(loop, new_state())
    assert isinstance(events[-1], TurnCompleted)
    assert log.calls == [("echo", {"text": "x"})]


async def test_approved_call_runs_after_resume(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "db"})), text("Done."))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    state = new_state()
    await collect(loop, state)

    loop.resume(state, approved=True)
    events = await collect(loop, state)

    assert log.calls == [("danger", {"target": "db"})]
    assert [e.call_id for e in of(events, ToolCallStarted)] == ["d1"]
    assert isinstance(events[-1], TurnCompleted)
    assert events[-1].answer == "Done."
    assert events[-1].tool_calls == 1
    assert tool_messages(llm.messages(1))[0]["content"] == "destroyed db"


async def test_denied_call_is_an_error_result_with_the_reason(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "db"})), text("Understood."))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    state = new_state()
    await collect(loop, state)

    loop.resume(state, approved=False, reason="no")
    events = await collect(loop, state)

    assert log.calls == [], "a denied tool ran"
    assert not of(events, ToolCallStarted)
    (result,) = tool_messages(llm.messages(1))
    assert result["tool_call_id"] == "d1"
    assert result["content"].startswith("Error:")
    assert "denied" in result["content"]
    assert result["content"].endswith(": no")
    assert isinstance(events[-1], TurnCompleted)
    assert events[-1].answer == "Understood."


async def test_denied_without_reason(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger")), text("ok"))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    state = new_state()
    await collect(loop, state)
    loop.resume(state, approved=False)
    await collect(loop, state)
    assert tool_messages(llm.messages(1))[0]["content"] == (
        "Error: the user denied the call of 'danger'"
    )


async def test_two_calls_needing_approval_are_asked_one_at_a_time(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(
        tools(
            call("d1", "danger", {"target": "a"}),
            call("c1", "echo", {"text": "free"}),
            call("d2", "danger", {"target": "b"}),
        ),
        text("finished"),
    )
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    state = new_state()

    first = await collect(loop, state)
    assert first[-1].awaiting.call.id == "d1"
    loop.resume(state, approved=True)

    second = await collect(loop, state)
    assert isinstance(second[-1], TurnSuspended)
    assert second[-1].awaiting.kind == "approval"
    assert second[-1].awaiting.call.id == "d2"
    loop.resume(state, approved=False, reason="not b")

    third = await collect(loop, state)
    assert isinstance(third[-1], TurnCompleted)
    assert sorted(log.calls) == [("danger", {"target": "a"}), ("echo", {"text": "free"})]
    results = tool_messages(llm.messages(1))
    assert [m["tool_call_id"] for m in results] == ["d1", "c1", "d2"]
    assert results[0]["content"] == "destroyed a"
    assert results[1]["content"] == "free"
    assert "not b" in results[2]["content"]
    assert llm.calls == 2
    # each call ran exactly once over the three runs
    assert sorted(
        e.call_id for run in (first, second, third) for e in of(run, ToolCallStarted)
    ) == [
        "c1",
        "d1",
    ]


async def test_approval_state_survives_serialization(llm: ScriptedLLM) -> None:
    """The suspended state goes through a checkpoint store as JSON; resuming from it works."""
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "x"})), text("ok"))
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    events = await collect(loop, new_state())
    saved = of(events, CheckpointReached)[-1].state.model_dump_json()

    state = LoopState.model_validate_json(saved)
    loop.resume(state, approved=True)
    events = await collect(loop, state)
    assert log.calls == [("danger", {"target": "x"})]
    assert isinstance(events[-1], TurnCompleted)


# --- through the TaskRunner ------------------------------------------------------------------


def approval_answer(text_or_data) -> Message:
    part = Part(data=text_or_data) if isinstance(text_or_data, dict) else Part(text=text_or_data)
    return Message(message_id="answer", role=Role.USER, parts=[part])


async def _suspended_task(llm: ScriptedLLM, log: ToolLog):
    stores = Stores()
    loop = make_loop(llm, log.tools(), hooks=[ApprovalRequired({"danger"})])
    runner = stores.runner(loop, holder="process-1")
    task = await stores.submit(runner, "wipe it")
    entries = await stores.journal_until_end(task.id)
    return stores, runner, task, entries


async def test_runner_input_required_then_approve_completes(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "db"}), chunks=["Shall I?"]), text("Wiped."))
    stores, runner, task, entries = await _suspended_task(llm, log)
    try:
        last = status_updates(entries)[-1]
        assert last.status.state == TaskState.INPUT_REQUIRED
        question = last.status.message
        assert "'danger'" in question.parts[0].text
        assert question.parts[1].data == {
            "approval": {"toolCallId": "d1", "name": "danger", "arguments": {"target": "db"}}
        }
        # waiting for a human holds no lease
        assert await stores.leases.acquire(task.id, owner=OWNER, holder="probe", ttl_s=1)
        await stores.leases.release(task.id, owner=OWNER, holder="probe")
        assert log.calls == []

        with pytest.raises(AnswerRejected):
            await runner.prepare_resume(task, approval_answer("maybe"), owner=OWNER)
        checkpoint = await runner.prepare_resume(task, approval_answer("approve"), owner=OWNER)
        assert isinstance(checkpoint, TurnCheckpoint)
        after = entries[-1].position
        await resume_turn(runner, await stores.snapshot(task.id), checkpoint, owner=OWNER)
        tail = await stores.journal_until_end(task.id, after=after)

        assert tail[-1].event.status.state == TaskState.COMPLETED
        assert log.calls == [("danger", {"target": "db"})]
        final = await stores.snapshot(task.id)
        assert final.artifacts[0].parts[0].text == "Shall I?\n\nWiped."
        # the answer stream goes on where it stopped: appended chunks only
        assert all(update.append for update in chunks(tail))
        assert "".join(chunk_text(u) for u in chunks(entries + tail)) == "Shall I?\n\nWiped."
    finally:
        await runner.shutdown()


async def test_runner_deny_with_data_part_reason(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("d1", "danger", {"target": "db"})), text("OK, I won't."))
    stores, runner, task, entries = await _suspended_task(llm, log)
    try:
        checkpoint = await runner.prepare_resume(
            task, approval_answer({"approved": False, "reason": "too risky"}), owner=OWNER
        )
        await resume_turn(runner, await stores.snapshot(task.id), checkpoint, owner=OWNER)
        tail = await stores.journal_until_end(task.id, after=entries[-1].position)
        assert tail[-1].event.status.state == TaskState.COMPLETED
        assert log.calls == []
        assert "too risky" in tool_messages(llm.messages(1))[0]["content"]
        stored = await stores.conversation(task.context_id)
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert "too risky" in stored[2].content
    finally:
        await runner.shutdown()
