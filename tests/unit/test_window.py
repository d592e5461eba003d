"""The history window: fit_to_window (token budget) and the Agent's message-count window.

Generated-input tests: random conversations of user / assistant / assistant-with-tool-calls units
(each tool-calling assistant message followed by all its results), 200 seeds each.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agent.agent import Agent, starts_on_boundary
from agent.context import TurnContext
from agent.events import TurnCompleted
from agent.loop import AgentLoop, to_llm_message
from agent.state import LoopState
from agent.tools.function import FunctionTool
from agent.tools.toolbox import Toolbox
from agent.window import fit_to_window, output_reserve
from stores.memory import InMemoryMessageStore
from stores.models import ChatMessage, ToolCall

from .scripted_llm import ScriptedLLM, call, text, tools

SEEDS = range(200)
SYSTEM = {"role": "system", "content": "system prompt"}

Messages = list[dict[str, Any]]


# --- generating conversations ----------------------------------------------------------------


def generate(
    rng: random.Random, *, units: int | None = None, end: str = "any"
) -> list[ChatMessage]:
    """A conversation as stored: whole units only. `end`: "any", "tool" (ends with a tool round,
    the shape of a request in the middle of a turn) or "plain" (ends with a non-tool message)."""
    count = units if units is not None else rng.randint(1, 12)
    messages: list[ChatMessage] = []
    call_number = 0
    for index in range(count):
        last = index == count - 1
        kind = rng.choice(["user", "assistant", "tools"])
        if last and end == "tool":
            kind = "tools"
        elif last and end == "plain" and kind == "tools":
            kind = rng.choice(["user", "assistant"])
        if kind == "user":
            messages.append(ChatMessage(role="user", content="u" * rng.randint(0, 40)))
        elif kind == "assistant":
            messages.append(ChatMessage(role="assistant", content="a" * rng.randint(0, 40)))
        else:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call_number += 1
                calls.append(ToolCall(id=f"call{call_number}", name="add", arguments="{}"))
            content = "t" * rng.randint(1, 20) if rng.random() < 0.3 else None
            messages.append(ChatMessage(role="assistant", content=content, tool_calls=calls))
            messages.extend(
                ChatMessage(
                    role="tool",
                    content="r" * rng.randint(0, 60),
                    tool_call_id=call.id,
                    name=call.name,
                )
                for call in calls
            )
    return messages


def as_request(rng: random.Random, history: list[ChatMessage]) -> Messages:
    request = [to_llm_message(m) for m in history]
    return [dict(SYSTEM), *request] if rng.random() < 0.7 else request


def count_tokens(messages: Messages) -> int:
    """A deterministic stand-in for a tokenizer: grows with every message kept."""
    total = 0
    for message in messages:
        total += 4 + len(message.get("content") or "")
        total += 10 * len(message.get("tool_calls") or [])
    return total


def split_head(messages: Messages) -> tuple[Messages, Messages]:
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    return head, messages[len(head) :]


def pairing_problems(body: list[Any]) -> list[str]:
    """Tool messages whose call is not in an earlier message of `body` (dicts or ChatMessages)."""

    def get(message: Any, key: str) -> Any:
        return message.get(key) if isinstance(message, dict) else getattr(message, key)

    seen: set[str] = set()
    problems = []
    for index, message in enumerate(body):
        for tool_call in get(message, "tool_calls") or []:
            seen.add(tool_call["id"] if isinstance(tool_call, dict) else tool_call.id)
        if get(message, "role") == "tool" and get(message, "tool_call_id") not in seen:
            problems.append(f"message {index}: tool result {get(message, 'tool_call_id')!r}")
    return problems


def check_fit(messages: Messages, budget: int) -> list[str]:
    """Every property fit_to_window promises, as a list of violations."""
    result = fit_to_window(messages, budget=budget, count=count_tokens)
    head, body = split_head(messages)
    result_head, result_body = split_head(result)
    problems: list[str] = []
    if result_head != head:
        problems.append(f"system prompt not kept: {result_head} vs {head}")
    if body and (not result_body or result_body[-1] != body[-1]):
        problems.append("the newest message was dropped")
    if result_body != body[len(body) - len(result_body) :]:
        problems.append("the result is not the newest messages in order")
    if result_body and result_body[0]["role"] == "tool":
        problems.append("the result starts with a tool message")
    problems += pairing_problems(result_body)
    boundaries = [i for i, m in enumerate(body) if m["role"] != "tool"]
    fitting = [i for i in boundaries if count_tokens(head + body[i:]) <= budget]
    if fitting:
        if count_tokens(result) > budget:
            problems.append(f"over budget although {len(body) - fitting[0]} messages fit")
        elif len(result_body) != len(body) - fitting[0]:
            problems.append(
                f"kept {len(result_body)} messages, but {len(body) - fitting[0]} fit the budget"
            )
    return problems


def budgets(rng: random.Random, messages: Messages) -> list[int]:
    total = count_tokens(messages)
    head, body = split_head(messages)
    exact = [count_tokens(head + body[i:]) for i in range(len(body))]
    picks = [0, 1, total, total + 1, total - 1, *rng.sample(exact, min(3, len(exact)))]
    picks += [rng.randint(0, total + 20) for _ in range(5)]
    return [max(0, b) for b in picks]


# --- fit_to_window ---------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["plain", "any", "tool"])
def test_fit_to_window_properties_on_generated_histories(end: str) -> None:
    """end="tool": the request ends with a tool round, as every request in the middle of a turn
    does; the cut must not orphan those results either."""
    failures: list[str] = []
    for seed in SEEDS:
        rng = random.Random(seed)
        messages = as_request(rng, generate(rng, end=end))
        for budget in budgets(rng, messages):
            for problem in check_fit(messages, budget):
                failures.append(f"seed={seed} budget={budget}: {problem}")
    assert not failures, f"{len(failures)} violations, e.g.:\n" + "\n".join(failures[:5])


def test_fit_to_window_tight_budget_keeps_the_whole_last_tool_round() -> None:
    """The smallest case: the last unit (a call and its two results) alone is over budget."""
    messages: Messages = [
        dict(SYSTEM),
        {"role": "user", "content": "question"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "content": "x" * 50, "tool_call_id": "c1"},
        {"role": "tool", "content": "y" * 50, "tool_call_id": "c2"},
    ]
    result = fit_to_window(messages, budget=10, count=count_tokens)
    assert result[0] == SYSTEM
    assert result[1]["role"] != "tool", f"the request starts with an orphaned result: {result}"
    assert not pairing_problems(result[1:])
    assert result[-1] == messages[-1]


def test_fit_to_window_keeps_everything_that_fits() -> None:
    messages = [dict(SYSTEM), {"role": "user", "content": "hi"}]
    assert fit_to_window(messages, budget=10_000, count=count_tokens) == messages
    assert fit_to_window([], budget=0, count=count_tokens) == []
    assert fit_to_window([dict(SYSTEM)], budget=0, count=count_tokens) == [SYSTEM]


def test_output_reserve() -> None:
    assert output_reserve(1000) == 256
    assert output_reserve(8000) == 1000
    assert output_reserve(128_000) == 16_000


# --- starts_on_boundary ----------------------------------------------------------------------


def test_starts_on_boundary_on_generated_windows() -> None:
    for seed in SEEDS:
        rng = random.Random(seed)
        history = generate(rng)
        for size in {1, len(history), rng.randint(1, len(history)), rng.randint(1, len(history))}:
            window = history[-size:]
            result = starts_on_boundary(window)
            context = f"seed={seed} size={size}"
            assert result == window[len(window) - len(result) :], context
            assert not result or result[0].role != "tool", context
            assert not pairing_problems(result), context
            dropped = window[: len(window) - len(result)]
            assert all(m.role == "tool" for m in dropped), context


# --- the Agent's window ----------------------------------------------------------------------


class RecordingStore(InMemoryMessageStore):
    def __init__(self) -> None:
        super().__init__()
        self.limits: list[int] = []

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        self.limits.append(limit)
        return await super().window(context_id, owner=owner, limit=limit)


async def test_agent_reads_only_the_window_and_sends_at_most_the_limit() -> None:
    for seed in range(60):
        rng = random.Random(seed)
        history = generate(rng, units=rng.randint(1, 20))
        limit = rng.randint(1, len(history) + 3)
        store = RecordingStore()
        turn = TurnContext(owner="o", context_id=f"ctx-{seed}", task_id=f"t-{seed}")
        await store.append(turn.context_id, history, owner="o", unit_id="seed")
        llm = ScriptedLLM(text("ok"))
        loop = AgentLoop(llm, Toolbox([]), system_prompt="system prompt")
        agent = Agent(loop, store, history_max_messages=limit)

        new = ChatMessage(role="user", content="new")
        state = await agent.start_turn(turn, new)
        events = [event async for event in agent.run(turn, state)]
        assert isinstance(events[-1], TurnCompleted)
        llm.assert_done()

        context = f"seed={seed} limit={limit} stored={len(history)}"
        assert store.limits == [limit - 1], context
        (request,) = llm.requests
        assert request.messages[0] == {"role": "system", "content": "system prompt"}, context
        sent = request.messages[1:]
        assert len(sent) <= limit, context
        assert sent[-1] == {"role": "user", "content": "new"}, context
        expected = starts_on_boundary(history[-(limit - 1) :] if limit > 1 else [])
        assert sent[:-1] == [to_llm_message(m) for m in expected], context
        assert not sent or sent[0]["role"] != "tool", context
        assert not pairing_problems(sent), context


# --- the loop fits each request into the model's window --------------------------------------


class WindowedLLM(ScriptedLLM):
    def __init__(self, *steps, window: int) -> None:
        super().__init__(*steps)
        self.window = window

    def context_window(self) -> int:
        return self.window

    def count_tokens(self, messages: Messages) -> int:
        return count_tokens(messages)


async def test_loop_trims_the_request_to_the_model_window() -> None:
    rng = random.Random(7)
    history = generate(rng, units=40, end="plain")
    llm = WindowedLLM(text("ok"), window=1000)
    loop = AgentLoop(llm, Toolbox([]), system_prompt="system prompt")
    turn = TurnContext(owner="o", context_id="c", task_id="t")
    events = [e async for e in loop.run(LoopState(conversation=history), turn)]
    assert isinstance(events[-1], TurnCompleted)
    (request,) = llm.requests
    budget = 1000 - output_reserve(1000)
    full = [SYSTEM, *(to_llm_message(m) for m in history)]
    assert count_tokens(full) > budget, "the test history must not fit"
    assert count_tokens(request.messages) <= budget
    assert request.messages[0] == SYSTEM
    assert request.messages[-1] == to_llm_message(history[-1])
    assert request.messages[1]["role"] != "tool"
    assert not pairing_problems(request.messages[1:])


# --- the message cap (AGENT_HISTORY_MAX_MESSAGES) -----------------------------------------------


def test_fit_to_window_message_cap_on_generated_histories() -> None:
    failures: list[str] = []
    for seed in SEEDS:
        rng = random.Random(seed)
        messages = as_request(rng, generate(rng, end=rng.choice(["plain", "tool"])))
        head, body = split_head(messages)
        for cap in (1, 2, 3, 5, 8, len(body), len(body) + 1):
            result = fit_to_window(messages, max_messages=cap)
            result_head, result_body = split_head(result)
            last_unit_start = max(i for i, m in enumerate(body) if m["role"] != "tool")
            last_unit = body[last_unit_start:]
            where = f"seed={seed} cap={cap}"
            if result_head != head:
                failures.append(f"{where}: system prompt not kept")
            if result_body[-len(last_unit) :] != last_unit:
                failures.append(f"{where}: the newest unit is not kept whole")
            if len(result_body) > max(cap, len(last_unit)):
                failures.append(f"{where}: {len(result_body)} messages kept")
            if result_body[0]["role"] == "tool" or pairing_problems(result_body):
                failures.append(f"{where}: a tool result lost its call")
    assert not failures, f"{len(failures)} violations, e.g.:\n" + "\n".join(failures[:5])


async def test_a_long_turn_sends_at_most_the_message_cap() -> None:
    """Tool rounds inside one turn count too: every request stays within the cap."""
    llm = ScriptedLLM(
        tools(call("c1", "add", {"a": 1, "b": 2})),
        tools(call("c2", "add", {"a": 3, "b": 4})),
        tools(call("c3", "add", {"a": 5, "b": 6})),
        text("done"),
    )

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    loop = AgentLoop(
        llm, Toolbox([FunctionTool(add)]), system_prompt="system prompt", max_messages=4
    )
    turn = TurnContext(owner="o", context_id="c", task_id="t")
    conversation = [ChatMessage(role="user", content="add things")]
    events = [e async for e in loop.run(LoopState(conversation=conversation), turn)]
    assert isinstance(events[-1], TurnCompleted)
    assert len(llm.requests) == 4
    for request in llm.requests:
        body = request.messages[1:]
        assert request.messages[0] == SYSTEM
        assert len(body) <= 4, [m["role"] for m in body]
        assert body[0]["role"] != "tool" and not pairing_problems(body)
    last = llm.requests[-1].messages
    assert last[-2]["tool_calls"][0]["id"] == "c3" and last[-1]["tool_call_id"] == "c3"
