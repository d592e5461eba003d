"""Per-principal limits on one replica (A2A_MAX_TURNS_PER_PRINCIPAL,
A2A_MAX_STREAMS_PER_PRINCIPAL): one principal at its limit is refused with the overload error,
before anything is written, while another principal is still served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from agent.runtime.admission import Overloaded
from agent.runtime.runner import TaskRunner
from app.handler import RequestHandler, SendRequest
from app.main import create_app
from app.settings import Settings
from stores.base import TaskQuery
from stores.models import Message, Part, Role

from .engine_helpers import wait_until
from .scripted_llm import ScriptedLLM, blocked, text


def send(words: str, *, at_once: bool = True) -> SendRequest:
    message = Message(message_id=f"m-{words}", role=Role.USER, parts=[Part(text=words)])
    return SendRequest(message=message, return_immediately=at_once)


@pytest.fixture
async def app(llm: ScriptedLLM) -> AsyncIterator[FastAPI]:
    settings = Settings(
        llm_model="openai/not-called",
        a2a_api_keys="alice:key-alice-0123456789,bob:key-bob-0123456789",  # type: ignore[arg-type]
        a2a_max_turns_per_principal=1,
        a2a_max_streams_per_principal=1,
    )
    app: FastAPI = create_app(settings, llm=llm)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
def handler(app: FastAPI) -> RequestHandler:
    handler: RequestHandler = app.state.handler
    return handler


@pytest.fixture
def runner(app: FastAPI) -> TaskRunner:
    runner: TaskRunner = app.state.runner
    return runner


async def owned(handler: RequestHandler, owner: str) -> int:
    page = await handler.list_tasks(TaskQuery(page_size=100), owner=owner)
    return len(page.tasks)


async def test_running_turns_are_limited_per_principal(
    handler: RequestHandler, runner: TaskRunner, llm: ScriptedLLM
) -> None:
    gate = asyncio.Event()
    alice_turn, bob_turn = blocked(gate, then=text("a")), blocked(gate, then=text("b"))
    llm.script(alice_turn, bob_turn, text("again"))
    await handler.send_message(send("alice 1"), owner="alice")
    await asyncio.wait_for(alice_turn.entered.wait(), 5)
    with pytest.raises(Overloaded, match="your limit of 1 running turns"):
        await handler.send_message(send("alice 2"), owner="alice")
    assert await owned(handler, "alice") == 1  # the refused send wrote nothing
    await handler.send_message(send("bob 1"), owner="bob")  # another principal is served
    await asyncio.wait_for(bob_turn.entered.wait(), 5)
    gate.set()
    await wait_until(  # alice's turn ends: her slot is free again
        lambda: runner.turns_held("alice") == 0, timeout_s=5, what="alice's slot"
    )
    await handler.send_message(send("alice 3"), owner="alice")
    assert await owned(handler, "alice") == 2


async def test_open_streams_are_limited_per_principal(
    handler: RequestHandler, llm: ScriptedLLM
) -> None:
    gate = asyncio.Event()
    alice_turn = blocked(gate, then=text("a"))
    llm.script(alice_turn, text("b"))
    stream = await handler.stream_message(send("alice stream"), owner="alice")
    (first,) = await anext(stream)  # the store's reads come in lists: the snapshot's is its own
    task_id = first.event.task.id  # type: ignore[union-attr]
    with pytest.raises(Overloaded, match="your limit of 1 open streams"):
        await handler.subscribe(task_id, owner="alice")
    with pytest.raises(Overloaded, match="your limit of 1 open streams"):
        await handler.send_message(send("alice blocking", at_once=False), owner="alice")
    bob = await handler.send_message(send("bob blocking", at_once=False), owner="bob")
    assert bob.task.status.state.value == "TASK_STATE_COMPLETED"
    await stream.aclose()  # the slot is given back: alice may open a stream again
    again = await handler.subscribe(task_id, owner="alice")
    await again.aclose()
    gate.set()


async def test_without_authentication_only_the_replica_limits_apply(llm: ScriptedLLM) -> None:
    """Every caller is the one anonymous owner then: a per-principal share would be the
    replica's whole budget cut down to one principal's."""
    settings = Settings(
        llm_model="openai/not-called",
        a2a_max_turns_per_principal=1,
        a2a_max_running_turns=3,
    )
    app: FastAPI = create_app(settings, llm=llm)
    gate = asyncio.Event()
    llm.script(*(blocked(gate, then=text(str(n))) for n in range(3)))
    async with app.router.lifespan_context(app):
        handler: RequestHandler = app.state.handler
        runner: TaskRunner = app.state.runner
        for n in range(3):
            await handler.send_message(send(f"anonymous {n}"), owner="anonymous")
        with pytest.raises(Overloaded, match="server is at its limit of 3 running turns"):
            await handler.send_message(send("one too many"), owner="anonymous")
        gate.set()
        # All three turns end here, not cut short by the shutdown (one may have waited a pass
        # at the turn gate before reaching its model).
        await wait_until(lambda: runner.turns_held("anonymous") == 0, timeout_s=5, what="the turns")
