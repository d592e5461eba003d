"""Checkpoints: a turn whose process died goes on from its last checkpoint in another process.

The crash is simulated by stopping the turn's job without a cancel request (`drop`):
nothing is recorded, the lease is left to expire, and a second runner (another "process", with its
own model) resumes the turn from a checkpoint the first one saved.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.events import CheckpointReached
from agent.loop import ANSWER_SEPARATOR
from agent.runtime.errors import LeaseTaken
from agent.runtime.runner import TaskRunner
from agent.runtime.turn import TurnCheckpoint
from agent.state import LoopState
from stores.models import ChatMessage, JournalEntry, TaskState, ToolCall

from .engine_helpers import (
    OWNER,
    SYSTEM,
    Stores,
    ToolLog,
    chunk_text,
    chunks,
    make_loop,
    resume_turn,
    status_updates,
    wait_until,
)
from .scripted_llm import ScriptedLLM, blocked, call, text, tools

FIRST_TEXT = "Let me add."
FINAL_TEXT = "The sum is 3."


async def crash(runner: TaskRunner, stores: Stores, task_id: str) -> None:
    """The process dies: its turn stops, nothing is recorded, its lease expires.

    (`drop`, not `shutdown`: a graceful shutdown hands the lease over at once, a crash does not.)
    """
    holder = runner.lease_holder(task_id, owner=OWNER)
    await runner.drop(task_id, owner=OWNER)
    assert not runner.is_running(task_id, owner=OWNER)
    # the dead process's lease is still there until it expires ...
    assert not await stores.leases.acquire(task_id, owner=OWNER, holder="probe", ttl_s=1)
    # ... which we make happen now
    assert holder is not None
    await stores.leases.hand_over(task_id, owner=OWNER, holder=holder)


async def recover_elsewhere(
    stores: Stores,
    task_id: str,
    checkpoint: TurnCheckpoint,
    llm: ScriptedLLM,
    functions: list[Any] | None = None,
    *,
    holder: str,
) -> list[JournalEntry]:
    """Another process takes the crashed turn over from `checkpoint` and runs it to its end;
    returns the journal entries it added."""
    runner = stores.runner(make_loop(llm, functions or []), holder=holder)
    after = await stores.position(task_id)
    try:
        await resume_turn(
            runner, await stores.snapshot(task_id), checkpoint, owner=OWNER, recovered=True
        )
        entries = await stores.journal_until_end(task_id, after=after)
        # The turn tidies (claim, checkpoint, lease) after its last event: let it, before the
        # shutdown hands over whatever still runs.
        await runner.until_local_turn_ends(task_id, owner=OWNER)
        return entries
    finally:
        await runner.shutdown()


async def crashed_after_a_tool_round(llm: ScriptedLLM, log: ToolLog):
    """Turn: model asks for add(1, 2) after some text; the tool runs; the process dies during
    the second model call."""
    stores = Stores()
    second = blocked(label="second model call, never answered")
    llm.script(tools(call("c1", "add", {"a": 1, "b": 2}), chunks=[FIRST_TEXT]), second)
    runner = stores.runner(make_loop(llm, log.tools()), holder="process-1")
    task = await stores.submit(runner, "add 1 and 2")
    await asyncio.wait_for(second.entered.wait(), 2)
    await crash(runner, stores, task.id)
    assert second.cancelled
    return stores, task


def expected_request() -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": FIRST_TEXT,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"},
    ]


def after_tool_result(checkpoints: list[TurnCheckpoint]) -> TurnCheckpoint:
    (found,) = [c for c in checkpoints if c.loop.pending_calls and set(c.loop.results) == {"c1"}]
    return found


def before_second_model_call(checkpoints: list[TurnCheckpoint]) -> TurnCheckpoint:
    (found,) = [c for c in checkpoints if c.loop.iterations == 1 and not c.loop.pending_calls]
    return found


@pytest.mark.parametrize(
    "pick",
    [after_tool_result, before_second_model_call],
    ids=["after-tool-result", "before-model-call"],
)
async def test_recovery_goes_on_from_the_checkpoint(llm: ScriptedLLM, pick) -> None:
    log = ToolLog()
    stores, task = await crashed_after_a_tool_round(llm, log)
    assert log.calls == [("add", {"a": 1, "b": 2})]
    crashed = await stores.snapshot(task.id)
    assert crashed.status.state == TaskState.WORKING, "a crash must record nothing"
    checkpoint = pick(stores.checkpoints.of(task.id))
    assert checkpoint.loop.answer == [FIRST_TEXT]

    llm2 = ScriptedLLM(text(FINAL_TEXT))
    tail = await recover_elsewhere(
        stores, task.id, checkpoint, llm2, log.tools(), holder="process-2"
    )
    llm2.assert_done()

    # the tool is not run again; the model is called from where the turn stopped
    assert log.calls == [("add", {"a": 1, "b": 2})]
    assert llm2.calls == 1
    assert llm2.messages(0) == expected_request()

    # every message is in the conversation exactly once
    stored = await stores.conversation(task.context_id)
    assert stored == [
        ChatMessage(role="user", content="add 1 and 2"),
        ChatMessage(
            role="assistant",
            content=FIRST_TEXT,
            tool_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')],
        ),
        ChatMessage(role="tool", content="3", tool_call_id="c1", name="add"),
        ChatMessage(role="assistant", content=FINAL_TEXT),
    ]

    # the task completes; the answer stream restarts with the whole answer so far
    assert status_updates(tail)[-1].status.state == TaskState.COMPLETED
    updates = chunks(tail)
    assert updates[0].append is False
    assert chunk_text(updates[0]) == FIRST_TEXT
    assert all(update.append for update in updates[1:])
    assert updates[-1].last_chunk is True
    assert "".join(chunk_text(u) for u in updates) == FIRST_TEXT + ANSWER_SEPARATOR + FINAL_TEXT
    assert {u.artifact.artifact_id for u in updates} == {checkpoint.artifact_id}
    final = await stores.snapshot(task.id)
    assert final.status.state == TaskState.COMPLETED
    (artifact,) = final.artifacts
    assert artifact.artifact_id == checkpoint.artifact_id
    assert artifact.parts[0].text == FIRST_TEXT + ANSWER_SEPARATOR + FINAL_TEXT
    assert final.metadata["usage"]["llmCalls"] == 2

    # the turn ended: checkpoint, claim and lease are gone
    assert await stores.checkpoints.load(task.id, owner=OWNER) is None
    assert await stores.claim_is_free(task.context_id)
    assert await stores.leases.acquire(task.id, owner=OWNER, holder="process-3", ttl_s=1)


async def test_recovery_before_the_first_model_call_calls_the_model(llm: ScriptedLLM) -> None:
    stores = Stores()
    first = blocked()
    llm.script(first)
    runner = stores.runner(make_loop(llm), holder="process-1")
    task = await stores.submit(runner, "hi")
    await asyncio.wait_for(first.entered.wait(), 2)
    await crash(runner, stores, task.id)

    saved = stores.checkpoints.of(task.id)
    assert len(saved) == 1
    (checkpoint,) = saved
    assert checkpoint.loop.iterations == 0
    assert checkpoint.loop.pending_calls == []

    llm2 = ScriptedLLM(text("Hel", "lo"))
    tail = await recover_elsewhere(stores, task.id, checkpoint, llm2, holder="process-2")
    llm2.assert_done()

    assert llm2.messages(0) == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "hi"},
    ]
    assert status_updates(tail)[-1].status.state == TaskState.COMPLETED
    updates = chunks(tail)
    assert [u.append for u in updates] == [False] + [True] * (len(updates) - 1)
    assert "".join(chunk_text(u) for u in updates) == "Hello"
    assert await stores.conversation(task.context_id) == [
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="Hello"),
    ]


async def test_recovery_mid_tool_round_reruns_only_the_unfinished_calls(llm: ScriptedLLM) -> None:
    log = ToolLog()
    hang_calls: list[str] = []
    hanging = asyncio.Event()

    async def hang(tag: str) -> str:
        """Hang the first time, answer afterwards.

        Args:
            tag: Returned.
        """
        hang_calls.append(tag)
        if len(hang_calls) == 1:
            hanging.set()
            await asyncio.Event().wait()
        return f"got {tag}"

    stores = Stores()
    llm.script(tools(call("c1", "add", {"a": 1, "b": 2}), call("h1", "hang", {"tag": "x"})))
    runner = stores.runner(make_loop(llm, [*log.tools(), hang]), holder="process-1")
    task = await stores.submit(runner, "both")
    await asyncio.wait_for(hanging.wait(), 2)
    await wait_until(
        lambda: any("c1" in c.loop.results for c in stores.checkpoints.of(task.id)),
        what="the add result's checkpoint",
    )
    await crash(runner, stores, task.id)
    checkpoint = stores.checkpoints.of(task.id)[-1]
    assert set(checkpoint.loop.results) == {"c1"}
    assert [c.id for c in checkpoint.loop.pending_calls] == ["c1", "h1"]
    assert await stores.conversation(task.context_id) == [ChatMessage(role="user", content="both")]

    llm2 = ScriptedLLM(text("3 and x"))
    tail = await recover_elsewhere(
        stores, task.id, checkpoint, llm2, [*log.tools(), hang], holder="process-2"
    )
    llm2.assert_done()

    assert log.count("add") == 1
    assert hang_calls == ["x", "x"]
    assert status_updates(tail)[-1].status.state == TaskState.COMPLETED
    results = [m for m in llm2.messages(0) if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [("c1", "3"), ("h1", "got x")]
    stored = await stores.conversation(task.context_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]


async def test_unit_commits_are_idempotent_per_task_and_unit(llm: ScriptedLLM) -> None:
    """Resuming twice from the same checkpoint still stores each message once."""
    log = ToolLog()
    stores, task = await crashed_after_a_tool_round(llm, log)
    checkpoint = after_tool_result(stores.checkpoints.of(task.id))

    llm2 = ScriptedLLM(blocked())
    runner2 = stores.runner(make_loop(llm2, log.tools()), holder="process-2")
    await resume_turn(
        runner2, await stores.snapshot(task.id), checkpoint, owner=OWNER, recovered=True
    )
    await wait_until(lambda: llm2.calls == 1, what="second process's model call")
    await crash(runner2, stores, task.id)

    llm3 = ScriptedLLM(text(FINAL_TEXT))
    await recover_elsewhere(stores, task.id, checkpoint, llm3, log.tools(), holder="process-3")
    assert log.count("add") == 1
    stored = await stores.conversation(task.context_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]


async def test_resume_while_another_process_holds_the_lease_is_refused(llm: ScriptedLLM) -> None:
    stores = Stores()
    first = blocked()
    llm.script(first)
    runner = stores.runner(make_loop(llm), holder="process-1")
    task = await stores.submit(runner, "hi")
    await asyncio.wait_for(first.entered.wait(), 2)
    (checkpoint,) = stores.checkpoints.of(task.id)
    runner2 = stores.runner(make_loop(ScriptedLLM()), holder="process-2")
    try:
        with pytest.raises(LeaseTaken):
            await resume_turn(runner2, task, checkpoint, owner=OWNER, recovered=True)
        assert not runner2.is_running(task.id, owner=OWNER)
    finally:
        await runner.shutdown()


async def test_checkpoints_record_the_chunks_sent(llm: ScriptedLLM) -> None:
    log = ToolLog()
    stores, task = await crashed_after_a_tool_round(llm, log)
    saved = stores.checkpoints.of(task.id)
    # before the first model call nothing was streamed; after it, the text went out in one chunk
    assert saved[0].chunks_sent == 0
    assert saved[-1].chunks_sent == 1
    assert len({c.artifact_id for c in saved}) == 1
    # every checkpoint parses back into a resumable state
    for checkpoint in saved:
        assert TurnCheckpoint.model_validate_json(checkpoint.model_dump_json()) == checkpoint


@pytest.mark.parametrize(
    "pick",
    [after_tool_result, before_second_model_call],
    ids=["after-tool-result", "before-model-call"],
)
async def test_recovered_turn_counts_the_tool_calls_made_before_the_crash(
    llm: ScriptedLLM, pick
) -> None:
    """The usage the task reports counts the tool call that ran before the crash."""
    log = ToolLog()
    stores, task = await crashed_after_a_tool_round(llm, log)
    checkpoint = pick(stores.checkpoints.of(task.id))
    llm2 = ScriptedLLM(text(FINAL_TEXT))
    await recover_elsewhere(stores, task.id, checkpoint, llm2, log.tools(), holder="process-2")
    assert log.count("add") == 1
    final = await stores.snapshot(task.id)
    assert final.metadata["usage"]["toolCalls"] == 1


def test_a_checkpoint_written_around_the_saved_state_is_what_pydantic_writes() -> None:
    state = LoopState(
        conversation=[ChatMessage(role="user", content='say "é" \n twice')],
        iterations=2,
        pending_calls=[ToolCall(id="c1", name="add", arguments='{"a": 1}')],
    )
    saved = CheckpointReached.of(state).saved
    state.iterations = 3  # the loop goes on: the event keeps the state it was given
    fields: dict[str, Any] = {"artifact_id": "art-1", "chunks_sent": 4}
    fields["trace_carrier"] = {"traceparent": "00-abc-def-01"}
    written = TurnCheckpoint.saved(saved, **fields)
    expected = TurnCheckpoint(loop=LoopState.model_validate_json(saved), **fields)
    assert written == expected.model_dump_json()
    assert TurnCheckpoint.model_validate_json(written).loop.iterations == 2
