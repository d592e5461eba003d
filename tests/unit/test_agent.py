"""Agent: multi-turn memory over a MessageStore, the history window, and commit-by-unit."""

from __future__ import annotations

import asyncio

import pytest

from agent.agent import Agent, starts_on_boundary
from agent.context import TurnContext
from agent.events import CheckpointReached, MessagesCommitted, TurnCompleted, TurnFailed
from agent.loop import AgentLoop, to_llm_message
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from stores.memory import InMemoryMessageStore
from stores.models import ChatMessage, ToolCall
from tests.fakes.tools import add

from .scripted_llm import ScriptedLLM, blocked, call, fail, text, tools

OWNER = "owner-a"
CONTEXT = "ctx-1"
SYSTEM = "system prompt"


def make_agent(
    llm: ScriptedLLM,
    store: InMemoryMessageStore,
    *,
    history: int = 50,
    max_iterations: int = 10,
    extra_tools=(),
) -> Agent:
    toolbox = Toolbox([FunctionTool(add), *(FunctionTool(f) for f in extra_tools)], timeout_s=5)
    loop = AgentLoop(llm, toolbox, system_prompt=SYSTEM, max_iterations=max_iterations)
    return Agent(loop, store, history_max_messages=history)


def user(content: str) -> ChatMessage:
    return ChatMessage(role="user", content=content)


async def run_turn(agent: Agent, content: str, *, context: str = CONTEXT, owner: str = OWNER):
    """A turn as the runner drives it: start_turn (commits the user message), then run."""
    ctx = TurnContext(owner=owner, context_id=context, task_id=f"task-{content}")
    state = await agent.start_turn(ctx, user(content))
    async for event in agent.run(ctx, state):
        yield event


async def turn(agent: Agent, content: str, *, context: str = CONTEXT, owner: str = OWNER) -> list:
    return [
        event
        async for event in run_turn(agent, content, context=context, owner=owner)
        if not isinstance(event, CheckpointReached)
    ]


def history_part(messages: list[dict]) -> list[dict]:
    """A request's messages without the injected system prompt."""
    assert messages[0] == {"role": "system", "content": SYSTEM}
    return messages[1:]


def assert_tool_calls_paired(messages: list) -> None:
    """Every assistant tool call is answered by a tool message, and every tool message answers a
    call made earlier in the same list (works on ChatMessages and on request dicts)."""

    def get(message, key):
        return message[key] if isinstance(message, dict) else getattr(message, key)

    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = get(message, "role")
        if role == "tool":
            call_id = get(message, "tool_call_id")
            assert call_id in pending, f"message {index}: tool result {call_id!r} without its call"
            pending.discard(call_id)
        else:
            assert not pending, f"message {index}: calls {pending} have no result before it"
            calls = (
                message.get("tool_calls") if isinstance(message, dict) else message.tool_calls
            ) or []
            pending = {c["id"] if isinstance(c, dict) else c.id for c in calls}
    assert not pending, f"calls {pending} have no result"


@pytest.fixture
def store() -> InMemoryMessageStore:
    return InMemoryMessageStore()


async def test_second_turn_sees_the_first_turn(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(text("Hi, I am the agent."), text("You said hello."))
    agent = make_agent(llm, store)
    await turn(agent, "hello")
    events = await turn(agent, "what did I say?")

    assert isinstance(events[-1], TurnCompleted)
    assert history_part(llm.messages(1)) == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hi, I am the agent."},
        {"role": "user", "content": "what did I say?"},
    ]
    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert [(m.role, m.content) for m in stored] == [
        ("user", "hello"),
        ("assistant", "Hi, I am the agent."),
        ("user", "what did I say?"),
        ("assistant", "You said hello."),
    ]


async def test_turn_with_tools_stores_the_whole_exchange_in_order(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(tools(call("c1", "add", {"a": 1, "b": 2})), text("3"), text("ok"))
    agent = make_agent(llm, store)
    await turn(agent, "add 1 and 2")
    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls == [ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}')]
    assert (stored[2].tool_call_id, stored[2].content) == ("c1", "3")

    await turn(agent, "thanks")
    assert history_part(llm.messages(2))[:4] == [
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "content": "3", "tool_call_id": "c1", "name": "add"},
        {"role": "assistant", "content": "3"},
    ]


async def test_conversations_are_separate_per_context_and_owner(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(text("one"), text("two"), text("three"))
    agent = make_agent(llm, store)
    await turn(agent, "in ctx-1")
    await turn(agent, "in ctx-2", context="ctx-2")
    await turn(agent, "other owner, ctx-1", owner="owner-b")
    assert history_part(llm.messages(1)) == [{"role": "user", "content": "in ctx-2"}]
    assert history_part(llm.messages(2)) == [{"role": "user", "content": "other owner, ctx-1"}]


async def _seed(store: InMemoryMessageStore, messages: list[ChatMessage]) -> None:
    await store.append(CONTEXT, messages, owner=OWNER, unit_id="seed")


def _plain_history(pairs: int) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for i in range(1, pairs + 1):
        out += [user(f"u{i}"), ChatMessage(role="assistant", content=f"a{i}")]
    return out


async def test_history_window_limit_counts_the_new_message(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    await _seed(store, _plain_history(5))  # u1 a1 ... u5 a5
    llm.script(text("ok"))
    await turn(make_agent(llm, store, history=4), "new")
    assert [m["content"] for m in history_part(llm.messages(0))] == ["a4", "u5", "a5", "new"]


def _tool_history() -> list[ChatMessage]:
    """u1, assistant(2 calls), tool, tool, a1, u2, assistant(1 call), tool, a2."""
    return [
        user("u1"),
        ChatMessage(
            role="assistant",
            tool_calls=[
                ToolCall(id="x1", name="add", arguments="{}"),
                ToolCall(id="x2", name="add", arguments="{}"),
            ],
        ),
        ChatMessage(role="tool", content="r1", tool_call_id="x1", name="add"),
        ChatMessage(role="tool", content="r2", tool_call_id="x2", name="add"),
        ChatMessage(role="assistant", content="a1"),
        user("u2"),
        ChatMessage(role="assistant", tool_calls=[ToolCall(id="y1", name="add", arguments="{}")]),
        ChatMessage(role="tool", content="r3", tool_call_id="y1", name="add"),
        ChatMessage(role="assistant", content="a2"),
    ]


@pytest.mark.parametrize("limit", range(2, 12))
async def test_history_window_never_starts_with_a_tool_message(
    llm: ScriptedLLM, store: InMemoryMessageStore, limit: int
) -> None:
    await _seed(store, _tool_history())
    llm.script(text("ok"))
    await turn(make_agent(llm, store, history=limit), "new")

    sent = history_part(llm.messages(0))
    assert len(sent) <= limit
    assert sent[0]["role"] != "tool"
    assert sent[-1] == {"role": "user", "content": "new"}
    assert_tool_calls_paired(sent)
    # The window is the most recent `limit - 1` stored messages; only cut-off tool results go.
    expected = _tool_history()[-(limit - 1) :]
    while expected and expected[0].role == "tool":
        expected = expected[1:]
    assert sent[:-1] == [to_llm_message(m) for m in expected]


def test_starts_on_boundary() -> None:
    history = _tool_history()
    assert starts_on_boundary(history) == history
    assert starts_on_boundary(history[2:]) == history[4:]
    assert starts_on_boundary(history[3:]) == history[4:]
    assert starts_on_boundary(history[7:]) == history[8:]
    assert starts_on_boundary([]) == []
    assert starts_on_boundary(history[2:4]) == []


async def test_llm_failure_after_tools_leaves_no_call_without_result(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(
        tools(call("c1", "add", {"a": 1, "b": 2}), call("c2", "add", {"a": 3, "b": 4})),
        fail("boom"),
    )
    events = await turn(make_agent(llm, store), "go")
    assert isinstance(events[-1], TurnFailed)
    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool"]
    assert_tool_calls_paired(stored)


async def test_max_iterations_failure_leaves_history_consistent(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(
        tools(call("c1", "add", {"a": 1, "b": 1})), tools(call("c2", "add", {"a": 2, "b": 2}))
    )
    events = await turn(make_agent(llm, store, max_iterations=2), "loop forever")
    assert isinstance(events[-1], TurnFailed)
    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "tool"]
    assert_tool_calls_paired(stored)


async def test_turn_cancelled_during_tools_leaves_no_call_without_result(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def hang() -> str:
        """Hang until released."""
        started.set()
        await gate.wait()
        return "late"

    llm.script(tools(call("c1", "add", {"a": 1, "b": 1})), text("first round done"))
    agent = make_agent(llm, store, extra_tools=[hang])
    await turn(agent, "warm up")

    llm.script(tools(call("h1", "hang"), call("h2", "add", {"a": 1, "b": 1})))

    async def consume() -> None:
        async for _ in run_turn(agent, "hang"):
            pass

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 2)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    await asyncio.sleep(0.01)

    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert_tool_calls_paired(stored)
    assert stored[-1] == user("hang")


async def test_turn_cancelled_mid_model_call_keeps_the_user_message(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    step = blocked()
    llm.script(step)
    agent = make_agent(llm, store)

    async def consume() -> None:
        async for _ in run_turn(agent, "q"):
            pass

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(step.entered.wait(), 2)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    stored = await store.window(CONTEXT, owner=OWNER, limit=100)
    assert stored == [user("q")]


async def test_committed_events_are_persisted_before_they_are_yielded(
    llm: ScriptedLLM, store: InMemoryMessageStore
) -> None:
    llm.script(tools(call("c1", "add", {"a": 1, "b": 1})), text("2"))
    agent = make_agent(llm, store)
    async for event in run_turn(agent, "q"):
        if isinstance(event, MessagesCommitted):
            stored = await store.window(CONTEXT, owner=OWNER, limit=100)
            assert stored[-len(event.messages) :] == event.messages
