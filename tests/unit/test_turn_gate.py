"""TurnGate: once turns have used their slice of a loop pass, further turns wait, first come first
served, and what arrived meanwhile runs before them. Time is a fake clock the tests move; the
passes are the real event loop's."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from agent.runtime import runner as runner_module
from agent.runtime import turn_gate
from agent.runtime.turn_gate import RUNNING_TURN_SLICES, TurnGate
from app.main import create_app
from app.settings import Settings

from .fake_clock import Clock

SLICE_S = 0.001


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(turn_gate.time, "perf_counter", fake)
    return fake


async def _turn(gate: TurnGate, name: str, log: list[str], clock: Clock, cost_s: float) -> bool:
    """A turn that takes `cost_s` of loop time; whether it waited at the gate."""
    waited = await gate.admit()
    log.append(name)
    clock.now += cost_s  # the turn's work: loop time it takes
    return waited


async def test_turns_within_the_slice_run_at_once(clock: Clock) -> None:
    gate, log = TurnGate(SLICE_S), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, SLICE_S / 4)) for n in "abc"]
    await asyncio.sleep(0)  # one pass: each turn's first step
    assert log == ["a", "b", "c"]
    assert await asyncio.gather(*turns) == [False, False, False]
    assert gate.waiting == 0


async def test_once_the_slice_is_spent_turns_wait_in_order_and_arrivals_go_first(
    clock: Clock,
) -> None:
    gate, log = TurnGate(SLICE_S), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, SLICE_S * 2)) for n in "abcd"]
    await asyncio.sleep(0)  # the pass in which they start: `a` spends the whole slice
    assert log == ["a"]
    assert gate.waiting == 3
    # A request read at the end of this pass: its task starts in the next one.
    asyncio.get_running_loop().call_soon(log.append, "request")
    assert await asyncio.gather(*turns) == [False, True, True, True]
    assert log == ["a", "request", "b", "c", "d"]
    assert gate.waiting == 0


async def test_a_waiting_turn_cancelled_does_not_hold_up_the_others(clock: Clock) -> None:
    gate, log = TurnGate(SLICE_S), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, SLICE_S * 2)) for n in "abc"]
    await asyncio.sleep(0)
    turns[1].cancel()
    await asyncio.gather(*turns, return_exceptions=True)
    assert log == ["a", "c"]
    assert turns[1].cancelled()
    assert gate.waiting == 0


async def test_a_turn_let_go_into_a_spent_pass_keeps_its_place(clock: Clock) -> None:
    gate, log = TurnGate(SLICE_S), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, SLICE_S * 2)) for n in "abcd"]
    for _ in range(2):  # `a` ran; `b` let go, `c` and `d` wait
        await asyncio.sleep(0)
    turns.append(asyncio.create_task(_turn(gate, "e", log, clock, SLICE_S * 2)))  # behind them
    # then `b` runs, `c` and `d` are let go together; `c` spends the pass
    await asyncio.gather(*turns)
    # `c` spent the pass, so `d` went back: to the front, not behind `e` that came later
    assert log == ["a", "b", "c", "d", "e"]


async def test_a_turn_cancelled_after_it_was_let_go_holds_no_one_up(clock: Clock) -> None:
    gate, log = TurnGate(SLICE_S), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, SLICE_S * 2)) for n in "abc"]
    await asyncio.sleep(0)  # `a` ran; `b` and `c` wait
    await asyncio.sleep(0)  # the gate's next pass: `b` let go, not yet resumed
    turns[1].cancel()
    await asyncio.gather(*turns, return_exceptions=True)
    assert log == ["a", "c"]
    assert gate.waiting == 0
    await asyncio.sleep(0)  # a new pass, nothing spent: the next turn runs at once
    last = asyncio.create_task(_turn(gate, "z", log, clock, 0.0))
    await asyncio.sleep(0)
    assert log == ["a", "c", "z"]
    assert last.done()


async def test_a_turn_under_way_goes_back_only_after_several_slices(clock: Clock) -> None:
    gate = TurnGate(SLICE_S)
    assert not gate.spent()  # the pass's first turn step starts its budget
    clock.now += SLICE_S * (RUNNING_TURN_SLICES - 0.5)
    assert gate.spent() and not gate.overrun()
    clock.now += SLICE_S
    assert gate.overrun()
    other = asyncio.create_task(asyncio.sleep(0))  # runs at the loop's next pass
    await gate.admit()  # back in the queue: let go at a later pass
    assert other.done()
    assert gate.waiting == 0


async def test_no_slice_means_no_gate(clock: Clock) -> None:
    gate, log = TurnGate(0.0), []
    turns = [asyncio.create_task(_turn(gate, n, log, clock, 1.0)) for n in "abc"]
    await asyncio.sleep(0)
    assert log == ["a", "b", "c"]
    await asyncio.gather(*turns)
    assert not gate.spent() and not gate.overrun()


class ClosedGate(TurnGate):
    """A gate that holds every turn until opened."""

    def __init__(self) -> None:
        super().__init__(SLICE_S)
        self.opened = asyncio.Event()
        self.held = 0

    async def admit(self) -> bool:
        self.held += 1
        await self.opened.wait()
        return True

    def overrun(self) -> bool:
        return False


async def _state(app_client: httpx.AsyncClient, task_id: str) -> str:
    reply = await app_client.post("/", json=_rpc("GetTask", {"id": task_id}))
    return str(reply.json()["result"]["status"]["state"])


def _rpc(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def _message(text: str) -> dict[str, object]:
    return {"message": {"messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]}}


async def test_a_blocking_send_does_not_wait_at_the_gate_other_turns_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A blocking send's client waits for the turn's end: holding its turn back helps no one.
    A turn whose client already has its answer (returnImmediately, or a stream's first event)
    waits at the gate."""
    monkeypatch.setenv("LLM_MODEL", "scripted")
    monkeypatch.setenv("SCRIPTED_CHUNKS", "2")
    gate = ClosedGate()
    monkeypatch.setattr(runner_module, "TurnGate", lambda slice_s: gate)
    app = create_app(Settings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        blocking = (await client.post("/", json=_rpc("SendMessage", _message("a")))).json()
        assert blocking["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert gate.held == 0
        params = _message("b") | {"configuration": {"returnImmediately": True}}
        started = (await client.post("/", json=_rpc("SendMessage", params))).json()
        task_id = started["result"]["task"]["id"]
        for _ in range(5):
            await asyncio.sleep(0)
        assert gate.held == 1
        assert await _state(client, task_id) == "TASK_STATE_SUBMITTED"
        gate.opened.set()
        for _ in range(100):
            if await _state(client, task_id) == "TASK_STATE_COMPLETED":
                break
            await asyncio.sleep(0.01)
        assert await _state(client, task_id) == "TASK_STATE_COMPLETED"
