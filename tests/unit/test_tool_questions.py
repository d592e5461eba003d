"""A tool call that needs the user (another agent asked): the turn suspends with its question,
the answer resumes that call (from the checkpoint, as any replica would), and a cancel lets go."""

from __future__ import annotations

from typing import Any

from agent.context import TurnContext
from agent.events import (
    CheckpointReached,
    ToolCallFinished,
    ToolProgress,
    TurnCompleted,
    TurnSuspended,
)
from agent.hooks import HookChain
from agent.loop import AgentLoop
from agent.state import LoopState
from agent.tools.base import ToolNeedsInput, ToolProvider, ToolSpec, report_progress
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox

from .engine_helpers import USER, ToolLog, collect, of, tool_messages
from .scripted_llm import ScriptedLLM, call, text, tools


class AskingAgent(ToolProvider):
    """Like a sub-agent: reports progress, asks a question, finishes with the answer."""

    name = "helper"

    def __init__(self) -> None:
        super().__init__()
        self.resumed: list[tuple[dict[str, Any], str]] = []
        self.abandoned: list[dict[str, Any]] = []

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return [ToolSpec(name="helper", description="A helper agent.")]

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        report_progress("looking it up")
        raise ToolNeedsInput("Which city?", {"taskId": "sub-1"})

    async def resume(
        self, name: str, state: dict[str, Any], answer: str, turn: TurnContext | None
    ) -> Any:
        self.resumed.append((state, answer))
        return f"Sunny in {answer}."

    async def abandon(self, name: str, state: dict[str, Any]) -> None:
        self.abandoned.append(state)


async def make(llm: ScriptedLLM, helper: AskingAgent) -> tuple[AgentLoop, ToolLog]:
    log = ToolLog()
    toolbox = Toolbox([FunctionTool(f) for f in log.tools()[:1]], providers=[helper])
    await toolbox.start()
    return AgentLoop(llm, toolbox, hooks=HookChain([])), log


async def asked(llm: ScriptedLLM, helper: AskingAgent) -> tuple[AgentLoop, ToolLog, LoopState]:
    llm.script(
        tools(call("h1", "helper", {"message": "weather?"}), call("a1", "add", {"a": 2, "b": 3}))
    )
    loop, log = await make(llm, helper)
    events = await collect(loop, LoopState(conversation=[USER]))

    [progress] = of(events, ToolProgress)
    assert (progress.name, progress.text) == ("helper", "looking it up")
    suspended = events[-1]
    assert isinstance(suspended, TurnSuspended)
    assert suspended.awaiting.kind == "tool_input"
    assert suspended.awaiting.question == "Which city?"
    assert suspended.awaiting.call.id == "h1"
    # The other call of the same response ran and is kept; the asking one has no result yet.
    assert [e.name for e in of(events, ToolCallFinished)] == ["add"]
    saved = of(events, CheckpointReached)[-1].state
    assert set(saved.results) == {"a1"}
    assert saved.tool_inputs["h1"].state == {"taskId": "sub-1"}
    # As a store gives it back to whichever replica gets the answer.
    return loop, log, LoopState.model_validate_json(saved.model_dump_json())


async def test_the_answer_resumes_the_call_that_asked(llm: ScriptedLLM) -> None:
    helper = AskingAgent()
    loop, log, state = await asked(llm, helper)

    llm.script(text("Sunny in Paris, and 5."))
    loop.resume(state, answer="Paris")
    events = await collect(loop, state)

    assert helper.resumed == [({"taskId": "sub-1"}, "Paris")]
    assert log.names() == ["add"], "a call that had its result ran again"
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(llm.requests[1].messages)}
    assert results == {"h1": "Sunny in Paris.", "a1": "5"}
    assert completed.tool_calls == 2


async def test_a_canceled_question_lets_go_of_what_the_call_holds(llm: ScriptedLLM) -> None:
    helper = AskingAgent()
    loop, _, state = await asked(llm, helper)
    await loop.abandon(state)
    assert helper.abandoned == [{"taskId": "sub-1"}]
    assert helper.resumed == []


async def test_a_function_tool_cannot_be_resumed_and_says_so(llm: ScriptedLLM) -> None:
    def asks() -> str:
        """Asks."""
        raise ToolNeedsInput("Really?", {})

    llm.script(tools(call("q1", "asks", {})), text("ok"))
    loop = AgentLoop(llm, Toolbox([FunctionTool(asks)]), hooks=HookChain([]))
    events = await collect(loop, LoopState(conversation=[USER]))
    state = of(events, CheckpointReached)[-1].state
    loop.resume(state, answer="yes")
    events = await collect(loop, state)
    [result] = tool_messages(llm.requests[1].messages)
    assert "cannot take an answer" in result["content"]
