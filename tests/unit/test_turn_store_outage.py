"""A turn that meets a store outage waits for the store; tidying after it never fails it.

Found by tests/e2e_chaos/test_chaos_redis_crash.py (Redis killed under load): a turn whose
start (its history read and user message append, one script) met the outage crashed, logged at
ERROR with a traceback, and its task was FAILED with "internal error" once Redis was back; a
turn that ended just before the outage raised out of its task ("Task exception was never
retrieved") while releasing its claim. Now the start is retried like every write of a turn
(the append once, by its unit id, even when the store ran it and only the answer was lost), and
the release of what an ended turn held is left for later when the store is unavailable: a claim
or lease whose task ended is found stale anyway.
"""

from __future__ import annotations

import logging
from typing import Literal

import pytest

from agent.loop import AgentLoop
from agent.runtime.runner import TaskRunner
from agent.tools.toolbox import Toolbox
from stores.base import ContextFence, Fence, StoreUnavailable
from stores.memory import InMemoryMessageStore
from stores.models import ChatMessage, TaskState

from .engine_helpers import Stores, start_turn
from .scripted_llm import ScriptedLLM, text


class OutageAtStart(InMemoryMessageStore):
    """Once `armed`, the next turn's start fails once: before the store ran it, or after
    (its answer lost)."""

    def __init__(self, when: Literal["before", "after"]) -> None:
        super().__init__()
        self.when = when
        self.armed = False

    async def window_then_append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        limit: int,
        fence: ContextFence | None = None,
    ) -> list[ChatMessage]:
        if not self.armed:
            return await super().window_then_append(
                context_id, messages, owner=owner, unit_id=unit_id, limit=limit, fence=fence
            )
        self.armed = False
        if self.when == "after":
            await super().window_then_append(
                context_id, messages, owner=owner, unit_id=unit_id, limit=limit, fence=fence
            )
        raise StoreUnavailable("Redis is unavailable: Connection refused")


class ReleaseRefused(InMemoryMessageStore):
    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        raise StoreUnavailable("Redis is unavailable: Connection refused")


def runner_of(stores: Stores, llm: ScriptedLLM) -> TaskRunner:
    return stores.runner(AgentLoop(llm, Toolbox([], timeout_s=5), max_iterations=3), holder="p1")


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_turn_whose_start_meets_an_outage_waits_and_commits_its_message_once(
    llm: ScriptedLLM, when: Literal["before", "after"], caplog: pytest.LogCaptureFixture
) -> None:
    stores = Stores(messages=OutageAtStart(when))
    runner = runner_of(stores, llm)
    llm.script(text("first answer"))
    earlier = await stores.submit(runner, "earlier")
    await stores.journal_until_end(earlier.id)
    stores.messages.armed = True  # the outage meets the next turn of the same conversation
    llm.script(text("second answer"))
    task, message = await stores.new_task("later", context_id=earlier.context_id)
    await stores.messages.release(earlier.context_id, earlier.id, owner="anonymous")
    with caplog.at_level(logging.WARNING):
        await start_turn(runner, task, message)
        await stores.journal_until_end(task.id)
    assert (await stores.snapshot(task.id)).status.state is TaskState.COMPLETED
    said = [(m["role"], m.get("content")) for m in llm.messages()]
    assert said[-3:] == [
        ("user", "earlier"),
        ("assistant", "first answer"),
        ("user", "later"),
    ], said  # the model got the user message once, after the history before it
    stored = await stores.conversation(earlier.context_id)
    assert [(m.role, m.content) for m in stored] == [
        ("user", "earlier"),
        ("assistant", "first answer"),
        ("user", "later"),
        ("assistant", "second answer"),
    ]
    assert "turn crashed" not in caplog.text
    await runner.shutdown()


async def test_a_turn_that_ended_as_the_store_went_away_keeps_its_outcome(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    stores = Stores(messages=ReleaseRefused())
    runner = runner_of(stores, llm)
    llm.script(text("done"))
    with caplog.at_level(logging.WARNING):
        task = await stores.submit(runner)
        await stores.journal_until_end(task.id)
        await runner.shutdown()  # waits for the turn's last step: nothing escapes it
    assert (await stores.snapshot(task.id)).status.state is TaskState.COMPLETED
    assert "tidying left for later" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
