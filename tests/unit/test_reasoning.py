"""Reasoning (thinking) kept with the assistant turn that produced it: in the loop state, the
checkpoint and the stored conversation; sent back as the model takes it; shown to a client only
with AGENT_REASONING=stream (thought status updates), never in the answer."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from agent.events import ReasoningDelta, TextDelta, TurnCompleted, Usage
from agent.llm.reasoning import for_provider, replay_of
from agent.state import LoopState
from stores.codec import dump_message, load_message
from stores.models import ChatMessage, Part, Thinking, ToolCall

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
    start_turn,
    status_updates,
)
from .scripted_llm import ScriptedLLM, blocked, call, text, tools
from .test_checkpoints import crash, recover_elsewhere

SIGNED = {"type": "thinking", "thinking": "I should add and echo.", "signature": "sig-1/+=="}
REDACTED = {"type": "redacted_thinking", "data": "opaque-redacted-bytes"}
ROUND_THINKING = Thinking(text="I should add and echo.", blocks=[SIGNED, REDACTED])
ANSWER_THINKING = Thinking(
    text="Both done.",
    blocks=[{"type": "thinking", "thinking": "Both done.", "signature": "sig-2"}],
)
PARALLEL = (call("c1", "add", {"a": 1, "b": 2}), call("c2", "echo", {"text": "hi"}))


def thinking_round() -> list:
    """A parallel tool round after reasoning, then an answer after more reasoning."""
    return [
        tools(*PARALLEL, thinking=ROUND_THINKING, reasoning=["I should ", "add and echo."]),
        text("3 and hi", thinking=ANSWER_THINKING, usage=Usage(reasoning_tokens=7)),
    ]


def assistant(messages: list[dict]) -> list[dict]:
    return [message for message in messages if message["role"] == "assistant"]


async def test_blocks_go_back_unchanged_with_the_tool_round_and_are_stored() -> None:
    llm = ScriptedLLM(*thinking_round())
    state = LoopState(conversation=[USER])
    events = await collect(make_loop(llm, ToolLog().tools()), state)
    llm.assert_done()

    (sent,) = assistant(llm.messages(1))
    assert sent["thinking_blocks"] == [SIGNED, REDACTED]  # signature and order as given
    assert [c["id"] for c in sent["tool_calls"]] == ["c1", "c2"]
    assert sent["reasoning_content"] == "I should add and echo."  # the adapter picks (below)
    (completed,) = of(events, TurnCompleted)
    assert completed.answer == "3 and hi"
    assert "".join(e.text for e in of(events, TextDelta)) == "3 and hi"
    assert of(events, ReasoningDelta) == []  # hide (the default): no thought leaves the loop
    assert completed.usage.reasoning_tokens == 7
    round_message, answer = [m for m in state.conversation if m.role == "assistant"]
    assert round_message.thinking == ROUND_THINKING
    assert answer.thinking == ANSWER_THINKING
    assert state.pending_thinking is None


async def test_the_adapter_sends_each_provider_only_the_field_it_takes_back(
    llm: ScriptedLLM,
) -> None:
    llm.script(*thinking_round())
    await collect(make_loop(llm, ToolLog().tools()), LoopState(conversation=[USER]))
    messages = llm.messages(1)
    (sent,) = assistant(messages)
    (anthropic,) = assistant(for_provider(messages, replay_of("anthropic")))
    assert anthropic == {k: v for k, v in sent.items() if k != "reasoning_content"}
    (deepseek,) = assistant(for_provider(messages, replay_of("deepseek")))
    assert deepseek == {k: v for k, v in sent.items() if k != "thinking_blocks"}
    (openai,) = assistant(for_provider(messages, replay_of("openai")))
    assert set(openai) == {"role", "content", "tool_calls"}
    assert messages[2]["thinking_blocks"] == [SIGNED, REDACTED]  # the request is not changed
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert for_provider(plain, None) is plain  # a model that does not think: no copy made


async def test_stream_yields_the_reasoning_as_it_comes_never_as_answer_text() -> None:
    llm = ScriptedLLM(*thinking_round())
    loop = make_loop(llm, ToolLog().tools(), stream_reasoning=True)
    events = await collect(loop, LoopState(conversation=[USER]))
    llm.assert_done()
    kinds = [e.kind for e in events if isinstance(e, ReasoningDelta | TextDelta)]
    assert kinds == ["reasoning_delta", "reasoning_delta", "reasoning_delta", "text_delta"]
    assert [e.text for e in of(events, ReasoningDelta)] == [
        "I should ",
        "add and echo.",
        "Both done.",
    ]
    assert of(events, TurnCompleted)[0].answer == "3 and hi"


async def test_the_runtime_streams_thoughts_before_the_answer_and_keeps_them_out_of_it() -> None:
    stores = Stores()
    llm = ScriptedLLM(*thinking_round())
    runner = stores.runner(make_loop(llm, ToolLog().tools(), stream_reasoning=True), holder="p1")
    try:
        task = await stores.submit(runner, "add and echo")
        entries = await stores.journal_until_end(task.id)
        await runner.until_local_turn_ends(task.id, owner=OWNER)
    finally:
        await runner.shutdown()
    thoughts = [
        (entry.position, update)
        for entry in entries
        if entry.kind == "status"
        and (update := entry.event).status.message is not None
        and (update.status.message.parts[0].metadata or {}).get("thought")
    ]
    assert [u.status.message.parts[0].text for _, u in thoughts] == [
        "I should ",
        "add and echo.",
        "Both done.",
    ]
    assert all(u.status.state == "TASK_STATE_WORKING" for _, u in thoughts)
    assert all(u.status.message.parts == [u.status.message.parts[0]] for _, u in thoughts)
    first_chunk = next(e.position for e in entries if e.kind == "artifact")
    assert max(position for position, _ in thoughts) < first_chunk
    assert "".join(chunk_text(u) for u in chunks(entries)) == "3 and hi"
    final = await stores.snapshot(task.id)
    assert [a.parts for a in final.artifacts] == [[Part(text="3 and hi")]]
    assert final.history[-1].parts == [Part(text="3 and hi")]
    assert final.metadata["usage"]["reasoningTokens"] == 7
    assert status_updates(entries)[-1].metadata["usage"]["reasoningTokens"] == 7
    # the follow-up turn of the context reads the reasoning back with the history
    llm.script(text("again"))
    runner = stores.runner(make_loop(llm, ToolLog().tools()), holder="p2")
    try:
        follow, message = await stores.new_task("again", context_id=task.context_id)
        await start_turn(runner, follow, message)
        await stores.journal_until_end(follow.id)
        await runner.until_local_turn_ends(follow.id, owner=OWNER)
    finally:
        await runner.shutdown()
    history = assistant(llm.messages(-1))
    assert [m.get("thinking_blocks") for m in history] == [
        [SIGNED, REDACTED],
        ANSWER_THINKING.blocks,
    ]
    llm.assert_done()


async def test_hide_sends_no_thought_and_no_reasoning_usage_when_none_is_reported() -> None:
    stores = Stores()
    llm = ScriptedLLM(tools(*PARALLEL, thinking=ROUND_THINKING), text("3 and hi"))
    runner = stores.runner(make_loop(llm, ToolLog().tools()), holder="p1")
    try:
        task = await stores.submit(runner, "add and echo")
        entries = await stores.journal_until_end(task.id)
        await runner.until_local_turn_ends(task.id, owner=OWNER)
    finally:
        await runner.shutdown()
    texts = [
        part
        for update in status_updates(entries)
        if update.status.message is not None
        for part in update.status.message.parts
    ]
    assert texts, "tool progress is still sent"
    assert not any((part.metadata or {}).get("thought") for part in texts)
    assert not any("add and echo." in (part.text or "") for part in texts)
    usage = (await stores.snapshot(task.id)).metadata["usage"]
    assert set(usage) == {"promptTokens", "completionTokens", "llmCalls", "toolCalls"}
    llm.assert_done()


async def crashed_after_the_round(log: ToolLog):
    """A turn whose model reasoned, asked for a parallel tool round, got both results, and whose
    process died during the next model call."""
    stores = Stores()
    second = blocked(label="never answered")
    llm = ScriptedLLM(tools(*PARALLEL, thinking=ROUND_THINKING), second)
    runner = stores.runner(make_loop(llm, log.tools()), holder="process-1")
    task = await stores.submit(runner, "add and echo")
    await asyncio.wait_for(second.entered.wait(), 2)
    await crash(runner, stores, task.id)
    return stores, task


@pytest.mark.parametrize("when", ["within-the-round", "after-the-round"])
async def test_a_takeover_from_the_checkpoint_sends_the_rounds_thinking_back(when: str) -> None:
    log = ToolLog()
    stores, task = await crashed_after_the_round(log)
    saved = stores.checkpoints.of(task.id)
    within = [c for c in saved if c.loop.pending_calls and len(c.loop.results) == 2]
    assert within and all(c.loop.pending_thinking == ROUND_THINKING for c in within)
    checkpoint = within[-1] if when == "within-the-round" else saved[-1]
    assert bool(checkpoint.loop.pending_calls) == (when == "within-the-round")

    llm2 = ScriptedLLM(text("3 and hi"))
    await recover_elsewhere(stores, task.id, checkpoint, llm2, log.tools(), holder="process-2")
    llm2.assert_done()
    (sent,) = assistant(llm2.messages(0))
    assert sent["thinking_blocks"] == [SIGNED, REDACTED]
    stored = [m for m in await stores.conversation(task.context_id) if m.tool_calls]
    assert [m.thinking for m in stored] == [ROUND_THINKING]


class OldChatMessage(BaseModel):
    """ChatMessage as a replica built before `thinking` existed reads it."""

    role: str
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


def test_stored_messages_old_and_new_load() -> None:
    old = (
        b'{"role":"assistant","content":"hi","tool_calls":[{"id":"c","name":"n","arguments":"{}"}]}'
    )
    assert load_message(old) == ChatMessage(
        role="assistant", content="hi", tool_calls=[ToolCall(id="c", name="n", arguments="{}")]
    )
    assert dump_message(load_message(old)) == old  # no thinking: the stored form is as before
    new = ChatMessage(role="assistant", content=None, tool_calls=[], thinking=ROUND_THINKING)
    stored = dump_message(new)
    assert load_message(stored) == new
    assert b'"signature":"sig-1/+=="' in stored
    # an older replica reads the message without its reasoning (and sends none back)
    assert OldChatMessage.model_validate_json(stored).model_dump(exclude_none=True) == {
        "role": "assistant",
        "tool_calls": [],
    }


async def test_every_backend_keeps_the_reasoning_of_a_stored_message(backend) -> None:
    round_message = ChatMessage(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="c1", name="add", arguments="{}")],
        thinking=ROUND_THINKING,
    )
    unit = [round_message, ChatMessage(role="tool", content="3", tool_call_id="c1", name="add")]
    await backend.messages.append("ctx-think", unit, owner=OWNER, unit_id="u1")
    assert await backend.messages.window("ctx-think", owner=OWNER, limit=10) == unit
