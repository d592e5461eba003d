"""What a round of a store crash under load does on either store (test_chaos_redis_crash.py,
test_chaos_postgres_crash.py): the turns completed before it, the turns streaming through it, the
load of blocking sends going on across it, and the checks after it that do not depend on which
store crashed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.e2e.harness import A2A_HEADERS, TERMINAL_STATES, RpcClient, send_params
from tests.e2e_chaos.client import error_reason, task_answer
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.redis_view import journal_problems
from tests.e2e_chaos.takeovers import chunks_seen, positioned, resubscribe, stream_turn, task_id_of
from tests.e2e_chaos.targets import Target, wait_until
from tests.e2e_redis.support import (
    BackgroundStream,
    assert_contiguous,
    ids,
    rebuild_answer,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text

DONE, FLIGHT, LOADERS = 6, 6, 4


@dataclass
class Load:
    """Blocking sends on every replica, from a few threads, until `stop`; what each answered."""

    urls: list[str]
    marker: str
    completed: dict[str, tuple[str, str]] = field(default_factory=dict)  # task: (answer, context)
    settled_otherwise: list[str] = field(default_factory=list)
    unclean: list[str] = field(default_factory=list)
    store_errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _numbers: Iterator[int] = field(default_factory=itertools.count)

    def run(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(LOADERS)]
        for thread in threads:
            thread.start()
        return threads

    def _loop(self) -> None:
        with httpx.Client(trust_env=False, timeout=30) as http:
            while not self.stop.is_set():
                n = next(self._numbers)
                self._send(http, self.urls[n % len(self.urls)], f"load {n} {self.marker}")

    def _send(self, http: httpx.Client, url: str, said: str) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params(said)}
        try:
            r = http.post(url + "/", json=body, headers=A2A_HEADERS)
            answer = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            with self._lock:
                self.unclean.append(f"{said}: {exc!r}")
            return
        with self._lock:
            if "error" in answer:
                err = answer["error"]
                if err.get("code") == -32603 and error_reason(err.get("data")) == (
                    "STORE_UNAVAILABLE"
                ):
                    self.store_errors += 1
                else:
                    self.unclean.append(f"{said}: {err}")
                return
            task = answer["result"]["task"]
            if task["status"]["state"] == "TASK_STATE_COMPLETED":
                self.completed[task["id"]] = (task_answer(task), task["contextId"])
                if task_answer(task) != f"echo: {said}":
                    self.unclean.append(f"{said}: answered {task_answer(task)!r}")
            else:
                self.settled_otherwise.append(task["id"])


@dataclass
class Flights:
    """The turns streaming when the store dies: each task's stream and the answer it must get."""

    streams: dict[str, BackgroundStream] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)


def complete_turns(rpcs: list[RpcClient], marker: str) -> dict[str, tuple[str, str]]:
    """DONE turns completed before the crash, alternating replicas: task -> (answer, context)."""
    done: dict[str, tuple[str, str]] = {}
    for k in range(DONE):
        task = rpcs[k % len(rpcs)].send(f"done {k} {marker}")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        done[task["id"]] = (task_text(task), task["contextId"])
    return done


def start_flights(target: Target, gated_llm: GatedLLM, marker: str, round_: int) -> Flights:
    """FLIGHT turns streaming on alternating replicas, each a few chunks in when this returns."""
    flights = Flights()
    for k in range(FLIGHT):
        said = f"flight {k} {marker}"
        chunks = [f"r{round_}f{k}c{i:02d} " for i in range(40)]
        gated_llm.script(text(chunks, chunk_delay=0.1, when_user_contains=said, times=3))
        stream = stream_turn(target.urls[k % 2], said, f"flight-{k}")
        task_id = task_id_of(stream)
        flights.streams[task_id], flights.answers[task_id] = stream, "".join(chunks)
    wait_until(
        lambda: all(chunks_seen(s) >= 3 for s in flights.streams.values()),
        30,
        "every turn in flight to stream a few chunks",
    )
    return flights


def stop_load(load: Load, loaders: list[threading.Thread]) -> None:
    load.stop.set()
    for thread in loaders:
        thread.join(40)


def wait_flights_ended(
    rpc: RpcClient, flights: Flights, bound: float, restarted: float
) -> dict[str, dict[str, Any]]:
    """Every turn in flight ends within `bound` of the restart (monotonic): each task at its end."""
    ended = {
        task_id: rpc.wait_for_state(task_id, TERMINAL_STATES, timeout=bound)
        for task_id in flights.streams
    }
    took = time.monotonic() - restarted
    assert took < bound, f"the turns in flight took {took:.1f}s to end"
    return ended


def readback_problems(target: Target, rpcs: list[RpcClient], task_id: str, want: str) -> list[str]:
    """A task a client was told is COMPLETED, read back over the wire and from the store."""
    view = target.view
    assert view is not None
    problems = []
    for rpc in rpcs:
        task = rpc.get_task(task_id)
        if task["status"]["state"] != "TASK_STATE_COMPLETED" or task_text(task) != want:
            problems.append(f"GetTask on {rpc.base_url}: {task['status']} {task_text(task)!r}")
    stored = view.task(task_id)
    if view.task_state(task_id) != "TASK_STATE_COMPLETED" or task_text(stored or {}) != want:
        problems.append(f"in the store: {view.task_state(task_id)} {task_text(stored or {})!r}")
    problems += journal_problems(view.journal(task_id), want)
    return [f"{task_id}: {p}" for p in problems]


def after_crash_problems(
    target: Target,
    rpcs: list[RpcClient],
    told: dict[str, tuple[str, str]],
    flights: Flights,
    ended: dict[str, dict[str, Any]],
) -> list[str]:
    """Every task a client was told is COMPLETED reads back so; every turn in flight, its client
    resubscribing with the last id it had, gets every event once and, if it completed, the whole
    answer, and its journal is whole."""
    view = target.view
    assert view is not None
    problems: list[str] = []
    for task_id, (want, _) in told.items():
        problems += readback_problems(target, rpcs, task_id, want)
    for n, (task_id, stream) in enumerate(flights.streams.items()):
        before = positioned(stream.join(30))
        rest = resubscribe(target.urls[n % 2], task_id, before[-1].id or "", f"again-{n}")
        union = before + rest
        assert_contiguous(ids(union), f"turn in flight {task_id}, resubscribed")
        state = ended[task_id]["status"]["state"]
        if state_of_event(union[-1]) != state:
            problems.append(f"{task_id}: its stream ended at {union[-1].raw[:200]}")
        answer = flights.answers[task_id]
        if state == "TASK_STATE_COMPLETED" and rebuild_answer(union) != answer:
            problems.append(f"{task_id}: the client rebuilt {rebuild_answer(union)!r}")
        want = answer if state == "TASK_STATE_COMPLETED" else None
        problems += [f"{task_id}: {p}" for p in journal_problems(view.journal(task_id), want)]
    return problems


def send_on_every_context(rpcs: list[RpcClient], contexts: list[str], marker: str) -> None:
    """No conversation stays locked: each context takes a new message, which completes."""
    for n, context_id in enumerate(contexts):
        task = rpcs[n % len(rpcs)].send(f"next {n} {marker}", context_id=context_id)
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", (context_id, task["status"])
