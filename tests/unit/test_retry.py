"""persistently(): retry a store write while the store is unavailable, and only then."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agent import retry
from agent.agent import Agent
from agent.context import TurnContext
from agent.events import TurnCompleted
from agent.loop import AgentLoop
from agent.retry import persistently
from agent.tools.toolbox import Toolbox
from stores.base import StoreError, StoreUnavailable, TaskGone
from stores.memory import InMemoryMessageStore
from stores.models import ChatMessage

from .scripted_llm import ScriptedLLM, text

REAL_SLEEP = asyncio.sleep


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays persistently() waits, without waiting them."""
    recorded: list[float] = []
    ours = threading.get_ident()  # asyncio.sleep is patched for every thread of the process

    async def fake_sleep(delay: float) -> None:
        if threading.get_ident() != ours:  # e.g. a test server's loop still winding down
            await REAL_SLEEP(delay)
            return
        recorded.append(delay)
        await REAL_SLEEP(0)

    monkeypatch.setattr(retry.asyncio, "sleep", fake_sleep)
    return recorded


class Flaky:
    """Fails with `error` the first `failures` times, then returns `result`."""

    def __init__(self, failures: int, *, result: object = "ok", error: Exception | None = None):
        self.failures = failures
        self.result = result
        self.error = error or StoreUnavailable("connection refused")
        self.calls = 0

    async def __call__(self) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.result


async def test_returns_at_once_when_the_store_answers(sleeps: list[float]) -> None:
    operation = Flaky(0, result=42)
    assert await persistently(operation, what="test") == 42
    assert operation.calls == 1
    assert sleeps == []


async def test_retries_with_growing_delays_until_the_store_answers(sleeps: list[float]) -> None:
    operation = Flaky(9, result={"saved": True})
    assert await persistently(operation, what="test") == {"saved": True}
    assert operation.calls == 10
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


async def test_custom_delays_are_capped(sleeps: list[float]) -> None:
    operation = Flaky(4)
    await persistently(operation, what="test", first_delay_s=1.0, max_delay_s=3.0)
    assert sleeps == pytest.approx([1.0, 2.0, 3.0, 3.0])


@pytest.mark.parametrize(
    "error", [TaskGone("gone"), StoreError("bad"), ValueError("bug"), RuntimeError("boom")]
)
async def test_other_exceptions_propagate_at_once(sleeps: list[float], error: Exception) -> None:
    operation = Flaky(1, error=error)
    with pytest.raises(type(error)) as raised:
        await persistently(operation, what="test")
    assert raised.value is error
    assert operation.calls == 1
    assert sleeps == []


async def test_an_other_exception_after_retries_propagates(sleeps: list[float]) -> None:
    calls = 0

    async def operation() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise StoreUnavailable("down")
        raise TaskGone("expired while we waited")

    with pytest.raises(TaskGone):
        await persistently(operation, what="test")
    assert calls == 3
    assert len(sleeps) == 2


async def test_cancellation_interrupts_the_waiting() -> None:
    operation = Flaky(10**9)
    job = asyncio.create_task(persistently(operation, what="test", first_delay_s=30.0))
    while operation.calls == 0:
        await REAL_SLEEP(0.001)
    await REAL_SLEEP(0.01)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(job, 1.0)
    assert operation.calls == 1


async def test_cancellation_during_the_operation_is_not_retried() -> None:
    started = asyncio.Event()
    calls = 0

    async def operation() -> None:
        nonlocal calls
        calls += 1
        started.set()
        await asyncio.Event().wait()

    job = asyncio.create_task(persistently(operation, what="test", first_delay_s=0.001))
    await started.wait()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert calls == 1


async def test_real_short_delays_eventually_succeed() -> None:
    operation = Flaky(3, result="done")
    result = await asyncio.wait_for(
        persistently(operation, what="test", first_delay_s=0.001, max_delay_s=0.002), 1.0
    )
    assert result == "done"
    assert operation.calls == 4


# --- a turn rides out a store outage ----------------------------------------------------------


class FlakyMessageStore(InMemoryMessageStore):
    """The first `failures` appends of turn units fail as if the store were down."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.attempts = 0

    async def append(self, context_id, messages, *, owner, unit_id, fence=None) -> bool:
        if not unit_id.endswith(":user"):
            self.attempts += 1
            if self.attempts <= self.failures:
                raise StoreUnavailable("redis is restarting")
        return await super().append(context_id, messages, owner=owner, unit_id=unit_id, fence=fence)


async def test_a_turn_waits_for_the_store_and_commits_once(sleeps: list[float]) -> None:
    store = FlakyMessageStore(failures=3)
    llm = ScriptedLLM(text("answer"))
    agent = Agent(AgentLoop(llm, Toolbox([])), store)
    turn = TurnContext(owner="o", context_id="c", task_id="t")
    state = await agent.start_turn(turn, ChatMessage(role="user", content="q"))
    events = [event async for event in agent.run(turn, state)]

    assert isinstance(events[-1], TurnCompleted)
    assert store.attempts == 4
    assert len(sleeps) == 3
    assert await store.window("c", owner="o", limit=10) == [
        ChatMessage(role="user", content="q"),
        ChatMessage(role="assistant", content="answer"),
    ]
