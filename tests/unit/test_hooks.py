"""Hooks: the order they are called in, how their decisions steer a turn, failure modes, loading."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent.events import (
    CheckpointReached,
    ToolCallFinished,
    TurnCompleted,
    TurnFailed,
)
from agent.hooks import (
    Approval,
    HookChain,
    HookFailed,
    HookLoadError,
    Hooks,
    ReplaceArguments,
    SupplyResult,
    load_hooks,
)
from agent.llm.base import LLMRequest
from agent.state import LoopState
from agent.tools.base import ToolResult

from . import engine_helpers
from .engine_helpers import (
    SYSTEM,
    TURN,
    USER,
    HookClass,
    OtherHookClass,
    RecordingHooks,
    ToolLog,
    collect,
    make_loop,
    of,
    tool_messages,
)
from .scripted_llm import ScriptedLLM, call, fail, text, tools

HELPERS = engine_helpers.__name__


def new_state() -> LoopState:
    return LoopState(conversation=[USER])


# --- order -----------------------------------------------------------------------------------


async def test_hook_order_for_a_turn_with_one_tool_call(llm: ScriptedLLM) -> None:
    log = ToolLog()
    hooks = RecordingHooks()
    llm.script(tools(call("c1", "add", {"a": 1, "b": 2})), text("3"))
    events = await collect(make_loop(llm, log.tools(), hooks=[hooks]), new_state())

    assert isinstance(events[-1], TurnCompleted)
    assert hooks.names() == [
        "on_turn_start",
        "before_llm_call",
        "after_llm_call",
        "approve_tool_call",
        "before_tool_call",
        "after_tool_call",
        "before_llm_call",
        "after_llm_call",
        "on_turn_end",
    ]
    details = dict(hooks.log[:1])
    assert details["on_turn_start"] == TURN
    (_, approved), (_, before), (_, (after_call, after_result)) = hooks.log[3:6]
    assert approved.id == before.id == after_call.id == "c1"
    assert after_result == ToolResult(call_id="c1", name="add", content="3", ok=True)
    assert hooks.log[-1] == ("on_turn_end", events[-1])
    # after_llm_call sees the responses in order
    assert [r.finish_reason for name, r in hooks.log if name == "after_llm_call"] == [
        "tool_calls",
        "stop",
    ]


async def test_hook_order_for_a_text_only_turn(llm: ScriptedLLM) -> None:
    hooks = RecordingHooks()
    llm.script(text("hi"))
    await collect(make_loop(llm, hooks=[hooks]), new_state())
    assert hooks.names() == ["on_turn_start", "before_llm_call", "after_llm_call", "on_turn_end"]


async def test_on_turn_end_gets_the_failure(llm: ScriptedLLM) -> None:
    hooks = RecordingHooks()
    llm.script(fail("provider down"))
    events = await collect(make_loop(llm, hooks=[hooks]), new_state())
    assert isinstance(events[-1], TurnFailed)
    assert hooks.log[-1] == ("on_turn_end", events[-1])


# --- steering --------------------------------------------------------------------------------


class ExtraSystemMessage(Hooks):
    async def before_llm_call(self, turn, request: LLMRequest) -> LLMRequest:
        return LLMRequest(
            messages=[*request.messages, {"role": "system", "content": "Be brief."}],
            tools=request.tools[:1],
        )


async def test_before_llm_call_changed_request_is_what_the_model_receives(
    llm: ScriptedLLM,
) -> None:
    log = ToolLog()
    llm.script(text("ok"))
    await collect(make_loop(llm, log.tools(), hooks=[ExtraSystemMessage()]), new_state())
    (request,) = llm.requests
    assert request.messages == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "hello there"},
        {"role": "system", "content": "Be brief."},
    ]
    assert [t["function"]["name"] for t in request.tools] == ["add"]


async def test_before_llm_call_changes_chain_through_hooks(llm: ScriptedLLM) -> None:
    class Tag(Hooks):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        async def before_llm_call(self, turn, request):
            return LLMRequest(
                messages=[*request.messages, {"role": "user", "content": self.tag}],
                tools=request.tools,
            )

    llm.script(text("ok"))
    await collect(make_loop(llm, hooks=[Tag("first"), Tag("second")]), new_state())
    assert [m["content"] for m in llm.messages(0)[-2:]] == ["first", "second"]


async def test_changed_request_is_not_stored_in_the_conversation(llm: ScriptedLLM) -> None:
    log = ToolLog()
    llm.script(tools(call("c1", "add", {"a": 1, "b": 1})), text("2"))
    await collect(make_loop(llm, log.tools(), hooks=[ExtraSystemMessage()]), new_state())
    second = llm.messages(1)
    # the extra message of the first call is not in the second call's history
    assert [m["content"] for m in second if m["role"] == "system"] == [SYSTEM, "Be brief."]


async def test_replace_arguments_changes_what_the_tool_gets(llm: ScriptedLLM) -> None:
    log = ToolLog()

    class Double(Hooks):
        async def before_tool_call(self, turn, call):
            args = json.loads(call.arguments)
            return ReplaceArguments(arguments={"a": args["a"] * 2, "b": args["b"] * 2})

    llm.script(tools(call("c1", "add", {"a": 1, "b": 2})), text("6"))
    events = await collect(make_loop(llm, log.tools(), hooks=[Double()]), new_state())

    assert log.calls == [("add", {"a": 2, "b": 4})]
    (result,) = tool_messages(llm.messages(1))
    assert result["content"] == "6"
    assert isinstance(events[-1], TurnCompleted)


async def test_supply_result_skips_the_tool(llm: ScriptedLLM) -> None:
    log = ToolLog()
    recorder = RecordingHooks()

    class Cached(Hooks):
        async def before_tool_call(self, turn, call):
            return SupplyResult(content="cached: 42")

    llm.script(tools(call("c1", "add", {"a": 1, "b": 2})), text("42"))
    events = await collect(make_loop(llm, log.tools(), hooks=[Cached(), recorder]), new_state())

    assert log.calls == [], "the tool ran although a hook supplied its result"
    (result,) = tool_messages(llm.messages(1))
    assert result == {"role": "tool", "content": "cached: 42", "tool_call_id": "c1", "name": "add"}
    (finished,) = of(events, ToolCallFinished)
    assert finished.ok is True
    # the first decision wins: the second hook's before_tool_call is not asked
    assert "before_tool_call" not in recorder.names()
    # after_tool_call still sees the supplied result
    ((call_seen, result_seen),) = [d for n, d in recorder.log if n == "after_tool_call"]
    assert result_seen.content == "cached: 42"


async def test_supply_result_not_ok_is_an_error_result(llm: ScriptedLLM) -> None:
    log = ToolLog()

    class Block(Hooks):
        async def before_tool_call(self, turn, call):
            return SupplyResult(content="Error: blocked by policy", ok=False)

    llm.script(tools(call("c1", "echo", {"text": "x"})), text("sorry"))
    events = await collect(make_loop(llm, log.tools(), hooks=[Block()]), new_state())
    assert log.calls == []
    (finished,) = of(events, ToolCallFinished)
    assert finished.ok is False
    assert tool_messages(llm.messages(1))[0]["content"] == "Error: blocked by policy"


async def test_after_tool_call_changes_the_result_the_model_sees(llm: ScriptedLLM) -> None:
    log = ToolLog()

    class Redact(Hooks):
        async def after_tool_call(self, turn, call, result):
            return ToolResult(
                call_id=result.call_id, name=result.name, content="[redacted]", ok=result.ok
            )

    llm.script(tools(call("c1", "echo", {"text": "secret"})), text("ok"))
    events = await collect(make_loop(llm, log.tools(), hooks=[Redact()]), new_state())
    assert log.calls == [("echo", {"text": "secret"})]
    assert tool_messages(llm.messages(1))[0]["content"] == "[redacted]"
    tool_unit = next(e for e in events if getattr(e, "kind", "") == "messages_committed")
    assert tool_unit.messages[1].content == "[redacted]"


async def test_approval_deny_gives_an_error_result_and_the_tool_is_not_called(
    llm: ScriptedLLM,
) -> None:
    log = ToolLog()

    class Deny(Hooks):
        async def approve_tool_call(self, turn, call):
            return Approval.deny("not on weekends") if call.name == "danger" else None

    llm.script(
        tools(call("c1", "danger", {"target": "db"}), call("c2", "add", {"a": 1, "b": 1})),
        text("could not"),
    )
    events = await collect(make_loop(llm, log.tools(), hooks=[Deny()]), new_state())

    assert log.names() == ["add"]
    denied, added = tool_messages(llm.messages(1))
    assert denied["tool_call_id"] == "c1"
    assert denied["content"].startswith("Error:")
    assert "not on weekends" in denied["content"]
    assert "danger" in denied["content"]
    assert added["content"] == "2"
    assert isinstance(events[-1], TurnCompleted)


# --- HookChain: first decision wins ----------------------------------------------------------


async def test_chain_first_tool_decision_wins(llm: ScriptedLLM) -> None:
    log = ToolLog()

    class First(Hooks):
        async def before_tool_call(self, turn, call):
            return ReplaceArguments(arguments={"text": "from first"})

    class Second(Hooks):
        async def before_tool_call(self, turn, call):
            return SupplyResult(content="from second")

    llm.script(tools(call("c1", "echo", {"text": "orig"})), text("ok"))
    await collect(make_loop(llm, log.tools(), hooks=[First(), Second()]), new_state())
    assert log.calls == [("echo", {"text": "from first"})]
    assert tool_messages(llm.messages(1))[0]["content"] == "from first"


async def test_chain_first_approval_wins_and_no_opinion_defers(llm: ScriptedLLM) -> None:
    log = ToolLog()
    asked: list[str] = []

    class NoOpinion(Hooks):
        async def approve_tool_call(self, turn, call):
            asked.append("no-opinion")
            return None

    class Denier(Hooks):
        async def approve_tool_call(self, turn, call):
            asked.append("denier")
            return Approval.deny("first says no")

    class Allower(Hooks):
        async def approve_tool_call(self, turn, call):
            asked.append("allower")
            return Approval.allow()

    llm.script(tools(call("c1", "echo", {"text": "x"})), text("ok"))
    hooks = [NoOpinion(), Denier(), Allower()]
    await collect(make_loop(llm, log.tools(), hooks=hooks), new_state())
    assert asked == ["no-opinion", "denier"]
    assert log.calls == []
    assert "first says no" in tool_messages(llm.messages(1))[0]["content"]


async def test_hook_chain_direct_defaults() -> None:
    chain = HookChain([Hooks(), Hooks()])
    call_ = call("c1", "echo", {"text": "x"})
    request = LLMRequest(messages=[{"role": "user", "content": "x"}])
    result = ToolResult(call_id="c1", name="echo", content="x", ok=True)
    assert await chain.before_llm_call(TURN, request) is request
    assert await chain.before_tool_call(TURN, call_) is None
    assert await chain.after_tool_call(TURN, call_, result) is result
    assert await chain.approve_tool_call(TURN, call_) == Approval.allow()


# --- failure modes ---------------------------------------------------------------------------

HOOK_POINTS = [
    "on_turn_start",
    "before_llm_call",
    "after_llm_call",
    "approve_tool_call",
    "before_tool_call",
    "after_tool_call",
    "on_turn_end",
]


class Broken(Hooks):
    """Raises from one hook point."""

    def __init__(self, point: str) -> None:
        self.point = point

    def _maybe_raise(self, name: str) -> None:
        if name == self.point:
            raise RuntimeError(f"{name} exploded")

    async def on_turn_start(self, turn):
        self._maybe_raise("on_turn_start")

    async def on_turn_end(self, turn, outcome):
        self._maybe_raise("on_turn_end")

    async def before_llm_call(self, turn, request):
        self._maybe_raise("before_llm_call")

    async def after_llm_call(self, turn, response):
        self._maybe_raise("after_llm_call")

    async def before_tool_call(self, turn, call):
        self._maybe_raise("before_tool_call")

    async def after_tool_call(self, turn, call, result):
        self._maybe_raise("after_tool_call")

    async def approve_tool_call(self, turn, call):
        self._maybe_raise("approve_tool_call")


def _script_for(point: str, llm: ScriptedLLM, mode: str) -> None:
    """Enough model steps for a turn with one tool call that reaches `point`."""
    tool_step = tools(call("c1", "add", {"a": 1, "b": 2}))
    if mode == "warn":
        llm.script(tool_step, text("3"))
    elif point == "on_turn_start":
        pass  # the turn fails before the model is called
    elif point in ("before_llm_call",):
        pass
    elif point == "after_llm_call":
        llm.script(tool_step)
    elif point == "on_turn_end":
        llm.script(tool_step, text("3"))
    else:
        llm.script(tool_step)


@pytest.mark.parametrize("point", HOOK_POINTS)
async def test_failure_mode_fail_ends_the_turn_with_turn_failed_naming_the_hook(
    llm: ScriptedLLM, point: str
) -> None:
    log = ToolLog()
    _script_for(point, llm, "fail")
    loop = make_loop(llm, log.tools(), hooks=[Broken(point)], failure_mode="fail")
    events = await collect(loop, new_state())

    failed = events[-1]
    assert isinstance(failed, TurnFailed), events[-1]
    assert "hook" in failed.reason
    assert f"Broken.{point}" in failed.reason
    assert f"{point} exploded" in failed.reason
    assert not of(events, TurnCompleted)


async def test_failure_mode_fail_in_on_turn_end_of_a_failing_turn_still_yields_turn_failed(
    llm: ScriptedLLM,
) -> None:
    """The turn fails (model error) and then on_turn_end raises: still a TurnFailed event."""
    llm.script(fail("provider down"))
    loop = make_loop(llm, hooks=[Broken("on_turn_end")], failure_mode="fail")
    events = await collect(loop, new_state())
    failed = events[-1]
    assert isinstance(failed, TurnFailed)


@pytest.mark.parametrize("point", HOOK_POINTS)
async def test_failure_mode_warn_completes_the_turn(llm: ScriptedLLM, point: str) -> None:
    log = ToolLog()
    _script_for(point, llm, "warn")
    loop = make_loop(llm, log.tools(), hooks=[Broken(point), RecordingHooks()], failure_mode="warn")
    events = await collect(loop, new_state())
    completed = events[-1]
    assert isinstance(completed, TurnCompleted), events[-1]
    assert completed.answer == "3"
    assert log.calls == [("add", {"a": 1, "b": 2})]
    assert tool_messages(llm.messages(1))[0]["content"] == "3"


async def test_warn_mode_runs_the_later_hooks_after_a_failing_one(llm: ScriptedLLM) -> None:
    recorder = RecordingHooks()
    llm.script(text("ok"))
    loop = make_loop(llm, hooks=[Broken("before_llm_call"), recorder], failure_mode="warn")
    await collect(loop, new_state())
    assert recorder.names() == [
        "on_turn_start",
        "before_llm_call",
        "after_llm_call",
        "on_turn_end",
    ]


async def test_hook_failure_stops_sibling_tool_calls(llm: ScriptedLLM) -> None:
    """A turn that fails in a hook must not leave the other tool calls running."""
    started = asyncio.Event()
    finished: list[str] = []

    async def slow(tag: str) -> str:
        """Sleep a little, then return the tag.

        Args:
            tag: Returned.
        """
        started.set()
        await asyncio.sleep(0.2)
        finished.append(tag)
        return tag

    class FailOnFast(Hooks):
        async def before_tool_call(self, turn, call):
            if call.id == "fast":
                await started.wait()
                raise RuntimeError("policy engine down")
            return None

    llm.script(tools(call("slow", "slow", {"tag": "s"}), call("fast", "slow", {"tag": "f"})))
    loop = make_loop(llm, [slow], hooks=[FailOnFast()], failure_mode="fail")
    events = await collect(loop, new_state())
    assert isinstance(events[-1], TurnFailed)
    assert "policy engine down" in events[-1].reason
    await asyncio.sleep(0.35)
    assert finished == [], "a tool call kept running after its turn failed"


# --- resumed turns do not start again --------------------------------------------------------


async def test_on_turn_start_is_not_repeated_when_a_suspended_turn_goes_on(
    llm: ScriptedLLM,
) -> None:
    hooks = RecordingHooks()
    llm.script(tools(call("q1", "ask_user", {"question": "Which?"})), text("ok"))
    loop = make_loop(llm, hooks=[hooks])
    state = new_state()
    await collect(loop, state)
    suspended_state = state.model_copy(deep=True)
    loop.resume(suspended_state, answer="that one")
    events = await collect(loop, suspended_state)
    assert isinstance(events[-1], TurnCompleted)
    assert hooks.names().count("on_turn_start") == 1
    assert hooks.names().count("on_turn_end") == 1
    assert of(events, CheckpointReached)[0].state.awaiting is None


# --- load_hooks ------------------------------------------------------------------------------


def test_load_hooks_instance() -> None:
    (hook,) = load_hooks([f"{HELPERS}:HOOK_INSTANCE"])
    assert hook is engine_helpers.HOOK_INSTANCE


def test_load_hooks_class_is_instantiated() -> None:
    (hook,) = load_hooks([f"{HELPERS}:HookClass"])
    assert type(hook) is HookClass


def test_load_hooks_list_and_tuple_in_order() -> None:
    hooks = load_hooks([f"{HELPERS}:HOOK_LIST", f"{HELPERS}:HOOK_TUPLE"])
    assert len(hooks) == 3
    assert hooks[0] is engine_helpers.HOOK_INSTANCE
    assert type(hooks[1]) is OtherHookClass
    assert hooks[2] is engine_helpers.HOOK_TUPLE[0]


def test_load_hooks_nothing() -> None:
    assert load_hooks([]) == []


@pytest.mark.parametrize(
    "reference",
    [
        "no_such_module_for_hooks:anything",
        f"{HELPERS}:does_not_exist",
        f"{HELPERS}",  # no attribute
        ":HookClass",  # no module
        f"{HELPERS}:NOT_A_HOOK",
        f"{HELPERS}:LIST_WITH_NOT_A_HOOK",
        "builtins:dict",  # a class, but not a Hooks subclass
        "json:dumps",
    ],
)
def test_load_hooks_bad_references(reference: str) -> None:
    with pytest.raises(HookLoadError) as raised:
        load_hooks([reference])
    assert reference in str(raised.value)


def test_load_hooks_class_that_needs_arguments_is_a_load_error() -> None:
    """A Hooks subclass that cannot be built without arguments is a bad reference too: the CLI
    only turns HookLoadError into a clean configuration error."""
    with pytest.raises(HookLoadError):
        load_hooks([f"{HELPERS}:NeedsArguments"])


# --- HookChain on its own: each hook point's answer checked by type, failures named -------------


class _NotAsync(Hooks):
    def before_llm_call(self, turn, request):  # type: ignore[override]  # a plugin's mistake
        return None


async def test_a_hook_method_that_is_not_async_is_a_failure_of_that_hook() -> None:
    request = LLMRequest(messages=[], tools=[])
    chain = HookChain([_NotAsync()], failure_mode="warn")
    assert await chain.before_llm_call(None, request) is request  # type: ignore[arg-type]
    failing = HookChain([_NotAsync()], failure_mode="fail")
    with pytest.raises(HookFailed, match=r"hook _NotAsync\.before_llm_call raised"):
        await failing.before_llm_call(None, request)  # type: ignore[arg-type]


class _RaisesAtOnce(Hooks):
    def on_turn_start(self, turn):  # type: ignore[override]  # not async: raises on the call
        raise RuntimeError("boom")


async def test_a_hook_that_raises_before_it_returns_goes_through_the_failure_mode() -> None:
    await HookChain([_RaisesAtOnce()], failure_mode="warn").on_turn_start(None)  # type: ignore[arg-type]
    failing = HookChain([_RaisesAtOnce()], failure_mode="fail")
    with pytest.raises(HookFailed, match=r"hook _RaisesAtOnce\.on_turn_start raised"):
        await failing.on_turn_start(None)  # type: ignore[arg-type]


async def test_an_answer_of_the_wrong_type_is_no_opinion_and_the_next_hook_decides() -> None:
    class Wrong(Hooks):
        async def approve_tool_call(self, turn, call):
            return "allow"  # not an Approval

    class Denies(Hooks):
        async def approve_tool_call(self, turn, call):
            return Approval.deny("no")

    approval = await HookChain([Wrong(), Denies()]).approve_tool_call(None, None)  # type: ignore[arg-type]
    assert approval == Approval.deny("no")


def test_the_engines_run_errors_share_one_base() -> None:
    from agent.errors import AgentError
    from agent.llm.base import LLMError
    from agent.tool_round import ToolRoundFailed

    for error in (HookFailed("x"), LLMError("x"), ToolRoundFailed("x")):
        assert isinstance(error, AgentError)
