"""The control tools the loop offers the model: ask_user (suspend for an answer) and finish."""

from __future__ import annotations

import pytest

from agent.events import (
    CheckpointReached,
    MessagesCommitted,
    TextDelta,
    ToolCallStarted,
    TurnCompleted,
    TurnStarted,
    TurnSuspended,
)
from agent.loop import ANSWER_SEPARATOR
from agent.state import LoopState
from agent.tools.control import ASK_USER, FINISH

from .engine_helpers import (
    USER,
    ToolLog,
    collect,
    make_loop,
    of,
    tool_messages,
    tool_names,
)
from .scripted_llm import ScriptedLLM, call, text, tools


def new_state() -> LoopState:
    return LoopState(conversation=[USER])


# --- the tools offered -----------------------------------------------------------------------


async def test_control_tools_are_offered_after_the_toolbox(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(text("ok"))
    await collect(make_loop(llm, log.tools()), new_state())
    assert tool_names(llm.requests[0]) == ["add", "echo", "danger", ASK_USER, FINISH]
    schemas = {t["function"]["name"]: t for t in llm.requests[0].tools}
    assert schemas[ASK_USER]["function"]["parameters"]["required"] == ["question"]
    assert schemas[FINISH]["function"]["parameters"]["required"] == ["result"]


@pytest.mark.parametrize(
    ("ask_user_tool", "finish_tool", "expected"),
    [
        (False, True, ["add", FINISH]),
        (True, False, ["add", ASK_USER]),
        (False, False, ["add"]),
    ],
)
async def test_disabled_control_tools_are_not_offered(
    llm: ScriptedLLM, ask_user_tool: bool, finish_tool: bool, expected: list[str]
) -> None:
    log = ToolLog()
    llm.script(text("ok"))
    loop = make_loop(llm, log.tools()[:1], ask_user_tool=ask_user_tool, finish_tool=finish_tool)
    await collect(loop, new_state())
    assert tool_names(llm.requests[0]) == expected


@pytest.mark.parametrize(
    ("disabled", "arguments"),
    [(ASK_USER, {"question": "Which one?"}), (FINISH, {"result": "all done"})],
)
async def test_a_call_of_a_disabled_control_tool_is_an_unknown_tool_error(
    llm: ScriptedLLM, disabled: str, arguments: dict
) -> None:
    log = ToolLog()
    llm.script(tools(call("c1", disabled, arguments)), text("ok then"))
    loop = make_loop(llm, log.tools()[:1], ask_user_tool=False, finish_tool=False)
    events = await collect(loop, new_state())

    assert not of(events, TurnSuspended)
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "ok then"
    (result,) = tool_messages(llm.messages(1))
    assert result["tool_call_id"] == "c1"
    assert result["content"].startswith("Error:")
    assert f"unknown tool {disabled!r}" in result["content"]


# --- ask_user --------------------------------------------------------------------------------


async def test_ask_user_suspends_after_a_checkpoint_with_the_question(llm: ScriptedLLM) -> None:
    llm.script(tools(call("q1", ASK_USER, {"question": "  Which city?  "})))
    state = new_state()
    events = await collect(make_loop(llm), state)

    *_, checkpoint, suspended = events
    assert isinstance(suspended, TurnSuspended)
    assert suspended.awaiting.kind == "ask_user"
    assert suspended.awaiting.question == "Which city?"
    assert suspended.awaiting.call.id == "q1"
    assert isinstance(checkpoint, CheckpointReached)
    assert checkpoint.state.awaiting == suspended.awaiting
    assert [c.id for c in checkpoint.state.pending_calls] == ["q1"]
    # nothing is committed while the call waits for its result
    assert not of(events, MessagesCommitted)
    assert not of(events, TurnCompleted)
    assert not of(events, ToolCallStarted)


async def test_ask_user_without_a_question_gets_a_default_one(llm: ScriptedLLM) -> None:
    llm.script(tools(call("q1", ASK_USER, {})))
    events = await collect(make_loop(llm), new_state())
    assert events[-1].awaiting.question == "Please provide more input."


async def test_resume_with_the_answer_feeds_it_as_the_tool_result(llm: ScriptedLLM) -> None:
    llm.script(
        tools(call("q1", ASK_USER, {"question": "Which city?"}), chunks=["Let me ask."]),
        text("Paris is nice."),
    )
    loop = make_loop(llm)
    first = await collect(loop, new_state())
    saved = of(first, CheckpointReached)[-1].state
    state = LoopState.model_validate_json(saved.model_dump_json())  # as a store would give it

    loop.resume(state, answer="Paris")
    assert state.awaiting is None
    events = await collect(loop, state)

    assert not of(events, TurnStarted), "a resumed turn does not start again"
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "Let me ask." + ANSWER_SEPARATOR + "Paris is nice."
    assert completed.llm_calls == 2
    assert llm.calls == 2
    second = llm.messages(1)
    assert second[-2]["tool_calls"][0]["function"]["name"] == ASK_USER
    assert second[-1] == {
        "role": "tool",
        "content": "Paris",
        "tool_call_id": "q1",
        "name": ASK_USER,
    }
    tool_unit, answer_unit = of(events, MessagesCommitted)
    assert [m.role for m in tool_unit.messages] == ["assistant", "tool"]
    assert tool_unit.messages[0].content == "Let me ask."
    assert tool_unit.messages[1].content == "Paris"
    assert answer_unit.messages[0].content == "Paris is nice."


async def test_other_calls_in_the_same_response_run_before_suspending_and_not_again(
    llm: ScriptedLLM,
) -> None:
    log = ToolLog()
    llm.script(
        tools(
            call("c1", "add", {"a": 1, "b": 2}),
            call("q1", ASK_USER, {"question": "And then?"}),
            call("c2", "echo", {"text": "hi"}),
        ),
        text("done"),
    )
    loop = make_loop(llm, log.tools())
    state = new_state()
    first = await collect(loop, state)

    assert isinstance(first[-1], TurnSuspended)
    assert sorted(log.names()) == ["add", "echo"]
    saved = of(first, CheckpointReached)[-1].state
    assert set(saved.results) == {"c1", "c2"}
    assert saved.tool_calls_made == 2

    resumed = saved.model_copy(deep=True)
    loop.resume(resumed, answer="stop")
    events = await collect(loop, resumed)

    assert sorted(log.names()) == ["add", "echo"], "a tool ran again after the resume"
    assert not of(events, ToolCallStarted)
    assert isinstance(events[-1], TurnCompleted)
    assert events[-1].tool_calls == 2
    results = tool_messages(llm.messages(1))
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("c1", "3"),
        ("q1", "stop"),
        ("c2", "hi"),
    ]


async def test_two_questions_in_one_response_are_asked_one_after_the_other(
    llm: ScriptedLLM,
) -> None:
    llm.script(
        tools(
            call("q1", ASK_USER, {"question": "First?"}),
            call("q2", ASK_USER, {"question": "Second?"}),
        ),
        text("thanks"),
    )
    loop = make_loop(llm)
    state = new_state()
    events = await collect(loop, state)
    questions = [events[-1].awaiting.question]
    loop.resume(state, answer="one")
    events = await collect(loop, state)
    questions.append(events[-1].awaiting.question)
    loop.resume(state, answer="two")
    events = await collect(loop, state)

    assert sorted(questions) == ["First?", "Second?"]
    assert isinstance(events[-1], TurnCompleted)
    results = tool_messages(llm.messages(1))
    answers = dict(zip(questions, ["one", "two"], strict=True))
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("q1", answers["First?"]),
        ("q2", answers["Second?"]),
    ]


# --- finish ----------------------------------------------------------------------------------


async def test_finish_ends_the_turn_with_its_result(llm: ScriptedLLM) -> None:
    llm.script(tools(call("f1", FINISH, {"result": "The answer is 42."})))
    events = await collect(make_loop(llm), new_state())

    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "The answer is 42."
    assert completed.llm_calls == 1
    assert llm.calls == 1, "finish must not call the model again"
    assert [d.text for d in of(events, TextDelta)] == ["The answer is 42."]
    (unit,) = of(events, MessagesCommitted)
    assert [m.role for m in unit.messages] == ["assistant", "tool"]
    assert unit.messages[0].tool_calls[0].name == FINISH
    assert unit.messages[1].content == "The answer is 42."


async def test_finish_after_earlier_text_joins_with_the_separator(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(
        tools(call("c1", "add", {"a": 2, "b": 2}), chunks=["Computing."]),
        tools(call("f1", FINISH, {"result": "4"})),
    )
    events = await collect(make_loop(llm, log.tools()), new_state())

    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.answer == "Computing." + ANSWER_SEPARATOR + "4"
    assert "".join(d.text for d in of(events, TextDelta)) == completed.answer


async def test_finish_with_text_in_the_same_response(llm: ScriptedLLM) -> None:
    llm.script(tools(call("f1", FINISH, {"result": "Done."}), chunks=["Wrapping up."]))
    events = await collect(make_loop(llm), new_state())
    assert events[-1].answer == "Wrapping up." + ANSWER_SEPARATOR + "Done."


async def test_finish_alongside_other_calls_runs_them_first(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(
        tools(call("c1", "echo", {"text": "side effect"}), call("f1", FINISH, {"result": "ok"}))
    )
    events = await collect(make_loop(llm, log.tools()), new_state())
    assert log.calls == [("echo", {"text": "side effect"})]
    assert events[-1].answer == "ok"
    (unit,) = of(events, MessagesCommitted)
    assert [m.content for m in unit.messages[1:]] == ["side effect", "ok"]
