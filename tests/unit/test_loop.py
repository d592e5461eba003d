"""AgentLoop: one turn, observed through the events it yields and the requests the model gets."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agent.context import TurnContext
from agent.events import (
    CheckpointReached,
    IterationStarted,
    LLMCallFinished,
    MessagesCommitted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
)
from agent.loop import ANSWER_SEPARATOR, AgentLoop
from agent.state import LoopState
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from stores.models import ChatMessage
from tests.fakes.tools import add

from .scripted_llm import ScriptedLLM, Step, blocked, call, fail, text, tools, truncated

SYSTEM = "You are a unit-test assistant."
USER = ChatMessage(role="user", content="hello there")


# --- tools used by the tests -----------------------------------------------------------------


def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: The text.
    """
    return text.upper()


def explode(reason: str = "boom") -> str:
    """Always fails.

    Args:
        reason: What to say.
    """
    raise RuntimeError(reason)


async def nap(seconds: float, tag: str) -> str:
    """Sleep, then return the tag.

    Args:
        seconds: How long to sleep.
        tag: Returned after the sleep.
    """
    await asyncio.sleep(seconds)
    return tag


def make_loop(
    llm: ScriptedLLM,
    *functions,
    system_prompt: str | None = SYSTEM,
    max_iterations: int = 10,
    timeout_s: float = 5.0,
    concurrency: int = 5,
    **options,
) -> AgentLoop:
    toolbox = Toolbox(
        [FunctionTool(f) for f in functions], concurrency=concurrency, timeout_s=timeout_s
    )
    return AgentLoop(
        llm, toolbox, system_prompt=system_prompt, max_iterations=max_iterations, **options
    )


TURN = TurnContext(owner="owner-1", context_id="ctx-1", task_id="task-1")


def run_events(loop: AgentLoop, conversation: list[ChatMessage] | None = None):
    """The loop's event stream for a new turn over `conversation`."""
    state = LoopState(conversation=list(conversation or [USER]))
    return loop.run(state, TURN)


async def run_turn(loop: AgentLoop, conversation: list[ChatMessage] | None = None) -> list:
    """All events of a turn, without checkpoints (they are the runner's business)."""
    return [
        event
        async for event in run_events(loop, conversation)
        if not isinstance(event, CheckpointReached)
    ]


def of(events: list, kind: type) -> list:
    return [event for event in events if isinstance(event, kind)]


def kinds(events: list) -> list[str]:
    return [event.kind for event in events]


def tool_messages(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["role"] == "tool"]


# --- a plain answer --------------------------------------------------------------------------


async def test_text_only_turn_streams_deltas_in_order_and_completes(llm: ScriptedLLM) -> None:
    llm.script(text("Hel", "lo", " world", usage=Usage(prompt_tokens=7, completion_tokens=3)))
    events = await run_turn(make_loop(llm, add))

    assert kinds(events) == [
        "turn_started",
        "iteration_started",
        "llm_call_started",
        "text_delta",
        "text_delta",
        "text_delta",
        "llm_call_finished",
        "messages_committed",
        "turn_completed",
    ]
    assert [d.text for d in of(events, TextDelta)] == ["Hel", "lo", " world"]
    (committed,) = of(events, MessagesCommitted)
    assert committed.messages == [ChatMessage(role="assistant", content="Hello world")]
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "Hello world"
    assert completed.llm_calls == 1
    assert completed.tool_calls == 0
    assert completed.usage == Usage(prompt_tokens=7, completion_tokens=3)
    assert of(events, IterationStarted) == [IterationStarted(iteration=1)]


async def test_empty_text_chunks_are_not_emitted(llm: ScriptedLLM) -> None:
    llm.script(text("", "a", "", "b"))
    events = await run_turn(make_loop(llm))
    assert [d.text for d in of(events, TextDelta)] == ["a", "b"]
    assert events[-1].answer == "ab"


async def test_request_carries_conversation_and_tool_schemas(llm: ScriptedLLM) -> None:
    llm.script(text("ok"))
    history = [
        ChatMessage(role="user", content="first"),
        ChatMessage(role="assistant", content="reply"),
        ChatMessage(role="user", content="second"),
    ]
    await run_turn(make_loop(llm, add, shout), history)

    (request,) = llm.requests
    assert request.messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "second"},
    ]
    names = [tool["function"]["name"] for tool in request.tools]
    assert names[:2] == ["add", "shout"]
    assert all(tool["type"] == "function" for tool in request.tools)
    assert request.tools[0] == FunctionTool(add).schema()


async def test_without_control_tools_only_the_toolbox_is_offered(llm: ScriptedLLM) -> None:
    llm.script(text("ok"))
    await run_turn(make_loop(llm, add, shout, ask_user_tool=False, finish_tool=False))
    assert [tool["function"]["name"] for tool in llm.requests[0].tools] == ["add", "shout"]


async def test_system_prompt_is_first_in_every_request_and_never_committed(
    llm: ScriptedLLM,
) -> None:
    llm.script(
        tools(call("c1", "add", {"a": 1, "b": 2})),
        tools(call("c2", "shout", {"text": "x"})),
        text("done"),
    )
    events = await run_turn(make_loop(llm, add, shout))

    assert llm.calls == 3
    for request in llm.requests:
        assert request.messages[0] == {"role": "system", "content": SYSTEM}
        assert sum(1 for m in request.messages if m["role"] == "system") == 1
    committed = [m for unit in of(events, MessagesCommitted) for m in unit.messages]
    assert committed, "the turn committed nothing"
    assert all(m.role != "system" for m in committed)
    assert all(m.content != SYSTEM for m in committed)


async def test_without_system_prompt_no_system_message_is_sent(llm: ScriptedLLM) -> None:
    llm.script(text("ok"))
    await run_turn(make_loop(llm, system_prompt=None))
    assert llm.messages(0) == [{"role": "user", "content": "hello there"}]


# --- tools -----------------------------------------------------------------------------------


async def test_tool_round_trip_sends_assistant_call_and_results_in_call_order(
    llm: ScriptedLLM,
) -> None:
    first = tools(call("c1", "add", {"a": 2, "b": 3}), call("c2", "shout", {"text": "hi"}))
    llm.script(first, text("The sum is 5."))
    events = await run_turn(make_loop(llm, add, shout))

    second = llm.messages(1)
    assert second[:2] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "hello there"},
    ]
    assistant, result_1, result_2 = second[2:]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
        },
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "shout", "arguments": '{"text": "hi"}'},
        },
    ]
    assert result_1 == {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"}
    assert result_2 == {"role": "tool", "content": "HI", "tool_call_id": "c2", "name": "shout"}

    units = of(events, MessagesCommitted)
    assert len(units) == 2
    tool_unit = units[0].messages
    assert [m.role for m in tool_unit] == ["assistant", "tool", "tool"]
    assert [c.id for c in tool_unit[0].tool_calls] == ["c1", "c2"]
    assert [(m.tool_call_id, m.content) for m in tool_unit[1:]] == [("c1", "5"), ("c2", "HI")]
    assert units[1].messages == [ChatMessage(role="assistant", content="The sum is 5.")]

    # the tool-call events come after the first model call and before the second
    names = kinds(events)
    assert names.index("tool_call_started") > names.index("llm_call_finished")
    assert [e.call_id for e in of(events, ToolCallStarted)] == ["c1", "c2"]
    assert sorted(e.call_id for e in of(events, ToolCallFinished)) == ["c1", "c2"]
    assert all(e.ok for e in of(events, ToolCallFinished))
    # the tool unit is committed before the second model call starts
    assert (
        names.index("messages_committed")
        < [i for i, e in enumerate(events) if isinstance(e, IterationStarted)][1]
    )
    assert events[-1].answer == "The sum is 5."


async def test_non_string_tool_results_are_json_encoded(llm: ScriptedLLM) -> None:
    def stats(text: str) -> dict[str, int]:
        """Measure a text.

        Args:
            text: The text.
        """
        return {"chars": len(text)}

    llm.script(tools(call("c1", "stats", {"text": "abcd"})), text("ok"))
    await run_turn(make_loop(llm, stats))
    (result,) = tool_messages(llm.messages(1))
    assert json.loads(result["content"]) == {"chars": 4}


async def test_parallel_tools_run_concurrently_and_results_keep_call_order(
    llm: ScriptedLLM,
) -> None:
    llm.script(
        tools(
            call("slow", "nap", {"seconds": 0.3, "tag": "A"}),
            call("fast", "nap", {"seconds": 0.1, "tag": "B"}),
            call("mid", "nap", {"seconds": 0.2, "tag": "C"}),
        ),
        text("done"),
    )
    loop = make_loop(llm, nap)
    started = time.monotonic()
    events = await run_turn(loop)
    elapsed = time.monotonic() - started

    assert elapsed < 0.75, f"three tool calls took {elapsed:.2f} s: they did not run concurrently"
    # finish events come as the tools finish ...
    assert [e.call_id for e in of(events, ToolCallFinished)] == ["fast", "mid", "slow"]
    # ... but results are reported in call order
    results = tool_messages(llm.messages(1))
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("slow", "A"),
        ("fast", "B"),
        ("mid", "C"),
    ]
    unit = of(events, MessagesCommitted)[0].messages
    assert [m.tool_call_id for m in unit[1:]] == ["slow", "fast", "mid"]


async def test_three_parallel_sleeps_finish_well_under_their_sum(llm: ScriptedLLM) -> None:
    llm.script(
        tools(*(call(f"c{i}", "nap", {"seconds": 0.3, "tag": str(i)}) for i in range(3))),
        text("done"),
    )
    started = time.monotonic()
    events = await run_turn(make_loop(llm, nap))
    assert time.monotonic() - started < 0.75
    assert isinstance(events[-1], TurnCompleted)
    assert [m["content"] for m in tool_messages(llm.messages(1))] == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("tool_call", "expected_fragment"),
    [
        pytest.param(
            call("c1", "explode", {"reason": "kaboom"}), "RuntimeError: kaboom", id="exception"
        ),
        pytest.param(
            call("c1", "no_such_tool", {}), "unknown tool 'no_such_tool'", id="unknown-tool"
        ),
        pytest.param(call("c1", "add", '{"a": 1, "b": '), "not valid JSON", id="invalid-json"),
        pytest.param(call("c1", "add", "[1, 2]"), "must be a JSON object", id="json-not-object"),
        pytest.param(call("c1", "add", {"a": 1}), "b", id="missing-required"),
        pytest.param(call("c1", "add", {"a": "one", "b": 2}), "a", id="wrong-type"),
        pytest.param(call("c1", "add", {"a": 1, "b": 2, "c": 3}), "c", id="extra-argument"),
        pytest.param(call("c1", "nap", {"seconds": 5, "tag": "late"}), "timed out", id="timeout"),
    ],
)
async def test_tool_errors_become_error_results_and_the_turn_continues(
    llm: ScriptedLLM, tool_call, expected_fragment: str
) -> None:
    llm.script(tools(tool_call), text("Sorry, that did not work."))
    loop = make_loop(llm, add, explode, nap, timeout_s=0.2)
    started = time.monotonic()
    events = await run_turn(loop)

    assert time.monotonic() - started < 3, "the timed-out tool was not abandoned"
    (result,) = tool_messages(llm.messages(1))
    assert result["tool_call_id"] == "c1"
    assert result["content"].startswith("Error:"), result["content"]
    assert expected_fragment in result["content"]
    (finished,) = of(events, ToolCallFinished)
    assert finished.ok is False
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "Sorry, that did not work."
    assert completed.tool_calls == 1
    assert completed.llm_calls == 2


async def test_one_failing_tool_does_not_spoil_its_siblings(llm: ScriptedLLM) -> None:
    llm.script(
        tools(
            call("ok1", "add", {"a": 1, "b": 1}),
            call("bad", "explode", {}),
            call("ok2", "shout", {"text": "y"}),
        ),
        text("done"),
    )
    await run_turn(make_loop(llm, add, explode, shout))
    results = tool_messages(llm.messages(1))
    assert [m["content"] for m in results] == ["2", results[1]["content"], "Y"]
    assert results[1]["content"].startswith("Error:")


async def test_empty_arguments_mean_no_arguments(llm: ScriptedLLM) -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    llm.script(tools(call("c1", "ping", "")), text("ok"))
    await run_turn(make_loop(llm, ping))
    assert tool_messages(llm.messages(1))[0]["content"] == "pong"


# --- how a turn ends -------------------------------------------------------------------------


async def test_max_iterations_fails_the_turn_naming_the_setting(llm: ScriptedLLM) -> None:
    llm.script(*(tools(call(f"c{i}", "add", {"a": i, "b": i})) for i in range(3)))
    events = await run_turn(make_loop(llm, add, max_iterations=3))

    failed = events[-1]
    assert isinstance(failed, TurnFailed)
    assert "AGENT_MAX_ITERATIONS" in failed.reason
    assert "3" in failed.reason
    assert failed.llm_calls == 3
    assert failed.tool_calls == 3
    assert not of(events, TurnCompleted)
    assert llm.calls == 3  # no fourth model call
    # every tool unit was still committed: history stays consistent
    assert len(of(events, MessagesCommitted)) == 3


async def test_llm_error_fails_the_turn_with_the_provider_text(llm: ScriptedLLM) -> None:
    llm.script(fail("rate limited by provider: quota exceeded"))
    events = await run_turn(make_loop(llm))

    failed = events[-1]
    assert isinstance(failed, TurnFailed)
    assert "rate limited by provider: quota exceeded" in failed.reason
    assert failed.llm_calls == 1
    assert not of(events, MessagesCommitted)
    assert not of(events, TurnCompleted)


async def test_llm_error_after_a_tool_round_keeps_the_committed_tool_unit(llm: ScriptedLLM) -> None:
    llm.script(
        tools(
            call("c1", "add", {"a": 1, "b": 2}), usage=Usage(prompt_tokens=5, completion_tokens=1)
        ),
        fail("upstream 503", chunks=["partial "]),
    )
    events = await run_turn(make_loop(llm, add))

    failed = events[-1]
    assert isinstance(failed, TurnFailed)
    assert "upstream 503" in failed.reason
    assert failed.llm_calls == 2
    assert failed.tool_calls == 1
    assert failed.usage == Usage(prompt_tokens=5, completion_tokens=1)
    (unit,) = of(events, MessagesCommitted)
    assert [m.role for m in unit.messages] == ["assistant", "tool"]


async def test_finish_reason_length_fails_the_turn(llm: ScriptedLLM) -> None:
    llm.script(truncated("The answer is", usage=Usage(prompt_tokens=3, completion_tokens=100)))
    events = await run_turn(make_loop(llm))

    failed = events[-1]
    assert isinstance(failed, TurnFailed)
    assert "length" in failed.reason
    assert failed.llm_calls == 1
    assert failed.usage == Usage(prompt_tokens=3, completion_tokens=100)
    assert not of(events, TurnCompleted)
    assert not of(events, MessagesCommitted), "a cut-off answer must not enter the history"


async def test_answer_separator_between_texts_of_two_model_calls(llm: ScriptedLLM) -> None:
    llm.script(
        tools(call("c1", "add", {"a": 1, "b": 1}), chunks=["Let me ", "check."]),
        text("It is ", "2."),
    )
    events = await run_turn(make_loop(llm, add))

    deltas = [d.text for d in of(events, TextDelta)]
    assert deltas == ["Let me ", "check.", ANSWER_SEPARATOR, "It is ", "2."]
    assert events[-1].answer == "Let me check." + ANSWER_SEPARATOR + "It is 2."
    assert events[-1].answer == "".join(deltas)
    # the assistant messages keep their own text; the separator is only in the answer
    units = of(events, MessagesCommitted)
    assert units[0].messages[0].content == "Let me check."
    assert units[1].messages[0].content == "It is 2."


async def test_a_text_sink_takes_the_text_where_the_deltas_were(llm: ScriptedLLM) -> None:
    """With `on_text`, no TextDelta is yielded: the sink gets the same texts, separator
    included, at the same points among the other events (the publisher keeps their order)."""
    script = (
        tools(call("c1", "add", {"a": 1, "b": 1}), chunks=["Let me ", "", "check."]),
        text("It is ", "2."),
    )
    llm.script(*script)
    yielded = [kinds([event]) for event in await run_turn(make_loop(llm, add))]
    llm.script(*script)
    log: list[object] = []

    async def sink(text: str) -> None:
        await asyncio.sleep(0)  # a sink that waits (a store write) holds the loop up
        log.append(("text", text))

    state = LoopState(conversation=[USER])
    async for event in make_loop(llm, add).run(state, TURN, on_text=sink):
        if not isinstance(event, CheckpointReached):
            log.append(kinds([event]))

    def texts(entries: list[object]) -> list[object]:
        return [entry for entry in entries if isinstance(entry, tuple)]

    assert texts(log) == [
        ("text", piece) for piece in ["Let me ", "check.", ANSWER_SEPARATOR, "It is ", "2."]
    ]
    assert ["text_delta"] not in log
    # Each text stands where its delta stood.
    assert [["text_delta"] if isinstance(entry, tuple) else entry for entry in log] == yielded


async def test_no_separator_when_the_first_call_had_no_text(llm: ScriptedLLM) -> None:
    llm.script(tools(call("c1", "add", {"a": 1, "b": 1})), text("Two."))
    events = await run_turn(make_loop(llm, add))
    assert [d.text for d in of(events, TextDelta)] == ["Two."]
    assert events[-1].answer == "Two."


async def test_no_trailing_separator_when_the_last_call_has_no_text(llm: ScriptedLLM) -> None:
    llm.script(
        tools(call("c1", "add", {"a": 1, "b": 1}), chunks=["Working on it."]),
        text(),  # the final response carries no text at all
    )
    events = await run_turn(make_loop(llm, add))
    assert events[-1].answer == "Working on it."


async def test_usage_and_call_tallies_add_up(llm: ScriptedLLM) -> None:
    llm.script(
        tools(
            call("c1", "add", {"a": 1, "b": 1}),
            call("c2", "add", {"a": 2, "b": 2}),
            usage=Usage(prompt_tokens=10, completion_tokens=2),
        ),
        tools(
            call("c3", "shout", {"text": "z"}), usage=Usage(prompt_tokens=20, completion_tokens=3)
        ),
        text("fin", usage=Usage(prompt_tokens=30, completion_tokens=4)),
    )
    events = await run_turn(make_loop(llm, add, shout))

    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.usage == Usage(prompt_tokens=60, completion_tokens=9)
    assert completed.llm_calls == 3
    assert completed.tool_calls == 3
    finished = of(events, LLMCallFinished)
    assert [(f.iteration, f.usage.prompt_tokens, f.finish_reason) for f in finished] == [
        (1, 10, "tool_calls"),
        (2, 20, "tool_calls"),
        (3, 30, "stop"),
    ]
    assert [e.iteration for e in of(events, IterationStarted)] == [1, 2, 3]
    assert len(of(events, ToolCallStarted)) == len(of(events, ToolCallFinished)) == 3
    assert isinstance(events[0], TurnStarted)


# --- cancellation ----------------------------------------------------------------------------


async def test_cancelling_the_consumer_while_tools_run_leaves_no_tool_running(
    llm: ScriptedLLM,
) -> None:
    started: list[str] = []
    cancelled: list[str] = []
    completed: list[str] = []
    never = asyncio.Event()

    async def hang(tag: str) -> str:
        """Wait forever.

        Args:
            tag: Identifies the call.
        """
        started.append(tag)
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(tag)
            raise
        completed.append(tag)
        return tag

    llm.script(tools(call("c1", "hang", {"tag": "a"}), call("c2", "hang", {"tag": "b"})))
    loop = make_loop(llm, hang, timeout_s=30)
    events: list = []

    async def consume() -> None:
        async for event in run_events(loop):
            events.append(event)

    before = asyncio.all_tasks()
    consumer = asyncio.create_task(consume())
    for _ in range(200):
        if len(started) == 2:
            break
        await asyncio.sleep(0.01)
    assert started == ["a", "b"]

    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    # Give the event loop a few ticks to deliver the cancellation to the tool tasks.
    for _ in range(5):
        await asyncio.sleep(0.01)

    assert sorted(cancelled) == ["a", "b"]
    assert completed == []
    leftovers = asyncio.all_tasks() - before - {asyncio.current_task()}
    assert not [t for t in leftovers if not t.done()], f"tasks still running: {leftovers}"
    assert not of(events, MessagesCommitted), "a cancelled tool round must not be committed"
    assert not of(events, TurnCompleted) and not of(events, TurnFailed)


async def test_cancelling_the_consumer_mid_model_call_stops_the_stream(llm: ScriptedLLM) -> None:
    step: Step = blocked()
    llm.script(step)
    loop = make_loop(llm)

    async def consume() -> list:
        return [event async for event in run_events(loop)]

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(step.entered.wait(), 2)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert step.cancelled
    assert not step.finished
