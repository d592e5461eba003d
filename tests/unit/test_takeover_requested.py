"""A task accepted whose process dies before its turn begins is started by the process that takes
it over as it was asked: with the A2A extensions its request activated and in the client's trace
(TurnRequested, kept in the checkpoint's place until the first checkpoint). Memory and real Redis.
"""

from __future__ import annotations

from typing import Any

from agent.agent import Agent
from agent.hooks import Hooks, TurnContext
from agent.runtime.runner import TaskRunner, TurnStart
from agent.runtime.supervisor import TurnSupervisor
from agent.runtime.turn import TurnRequested
from agent.tracing import trace_id_of
from app.handler import SendRequest
from stores.models import TaskState

from .backends import Backend
from .engine_helpers import OWNER, make_loop, user_message, wait_until
from .handler_rig import build_handler
from .scripted_llm import ScriptedLLM, text

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
EXTENSIONS = frozenset({"https://ext.example/a/v1", "https://ext.example/b/v1"})


class TurnsSeen(Hooks):
    """What each turn's hooks see: its extensions and its trace."""

    def __init__(self) -> None:
        self.seen: list[tuple[frozenset[str], str | None]] = []

    async def on_turn_start(self, turn: TurnContext) -> None:
        self.seen.append((turn.extensions, trace_id_of(turn.trace)))


def runner_of(backend: Backend, llm: ScriptedLLM, hooks: Any, *, holder: str) -> TaskRunner:
    return TaskRunner(
        Agent(make_loop(llm, hooks=[hooks]), backend.messages),
        tasks=backend.tasks,
        messages=backend.messages,
        checkpoints=backend.checkpoints,
        leases=backend.leases,
        holder=holder,
        lease_ttl_s=15.0,
        max_running_turns=8,
    )


async def test_a_turn_that_never_began_is_taken_over_as_it_was_asked(
    backend: Backend, llm: ScriptedLLM
) -> None:
    llm.script(text("Taken over."))
    first_hooks, survivor_hooks = TurnsSeen(), TurnsSeen()
    dying = runner_of(backend, llm, first_hooks, holder="p1")
    accepted: list[TurnStart] = []

    def dies_before_the_turn(start: TurnStart, *_: Any, **__: Any) -> None:
        start.launched = True  # accepted (its slot and lease kept), then the process is gone
        accepted.append(start)

    dying._launch = dies_before_the_turn  # type: ignore[method-assign]
    handler = build_handler(
        dying, tasks=backend.tasks, messages=backend.messages, checkpoints=backend.checkpoints
    )
    request = SendRequest(
        message=user_message("stamp this"),
        return_immediately=True,
        trace_carrier={"traceparent": TRACEPARENT},
        extensions=EXTENSIONS,
    )
    task = (await handler.send_message(request, owner=OWNER)).task
    assert task.status.state == TaskState.SUBMITTED
    saved = TurnRequested.read(await backend.checkpoints.load(task.id, owner=OWNER))
    assert saved is not None and set(saved.extensions) == EXTENSIONS
    [start] = accepted
    assert start.fence is not None
    await backend.leases.hand_over(task.id, owner=OWNER, holder=start.fence.holder)

    survivor = runner_of(backend, llm, survivor_hooks, holder="p2")
    supervisor = TurnSupervisor(
        survivor, tasks=backend.tasks, checkpoints=backend.checkpoints, leases=backend.leases
    )
    try:
        await supervisor.recover_orphans()

        await wait_until(lambda: survivor.turns_held() == 1, timeout_s=5, what="the takeover")
        await wait_until(lambda: survivor.turns_held() == 0, timeout_s=10, what="its end")
        record = await backend.tasks.get(task.id, owner=OWNER)
        assert record is not None and record.task.status.state == TaskState.COMPLETED
    finally:
        await survivor.shutdown()
    assert first_hooks.seen == []
    assert survivor_hooks.seen == [(EXTENSIONS, TRACE_ID)]
    assert await backend.checkpoints.load(task.id, owner=OWNER) is None  # tidied at the end


async def test_nothing_is_kept_for_a_request_a_takeover_cannot_lose(
    backend: Backend, llm: ScriptedLLM
) -> None:
    """No extensions, no client tools, no trace: no write beyond the task (the hot path)."""
    runner = runner_of(backend, llm, TurnsSeen(), holder="p1")
    runner._launch = lambda start, *_, **__: setattr(start, "launched", True)  # type: ignore[method-assign]
    handler = build_handler(
        runner, tasks=backend.tasks, messages=backend.messages, checkpoints=backend.checkpoints
    )
    request = SendRequest(message=user_message("plain"), return_immediately=True)
    task = (await handler.send_message(request, owner=OWNER)).task
    assert await backend.checkpoints.load(task.id, owner=OWNER) is None
