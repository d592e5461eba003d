"""SIGTERM of a server while every kind of request is in flight, on both stores.

On the victim, with every turn held at the fake model's gate: blocking SendMessage (JSON-RPC and
REST), SendStreamingMessage (JSON-RPC and REST), SubscribeToTask (JSON-RPC and REST) on a running
task, and clients calling GetTask and ListTasks (JSON-RPC and REST) in a loop. Then SIGTERM.

Counted:
* every blocking send is answered, in its binding's shape: the task (so the client learns its
  id) or a JSON-RPC error object / an AIP-193 error body; never plain text, never a 5xx without
  that body, never a connection closed without an answer;
* every stream ends cleanly: each event is a JSON document (a last error event in the binding's
  shape is fine), and the response ends properly instead of being cut;
* every GetTask / ListTasks answer the loops got is clean JSON in the binding's shape (requests
  that find the server gone are not counted);
* the server exits;
* on Redis, the other replica takes the turns over: every task under the prefix completes, none
  is left SUBMITTED/WORKING without a live lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS
from tests.e2e_chaos.client import (
    TASK,
    Outcome,
    http_client,
    rpc_payload,
    stream_result,
)
from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.streams import open_stream
from tests.e2e_chaos.targets import (
    Target,
    gather_within,
    memory_server,
    redis_replicas,
    wait_async,
    wait_until,
)

pytestmark = [pytest.mark.timeout(120)]

LEASE_TTL_S = 3


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def victims(
    request: pytest.FixtureRequest, gated_llm: GatedLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    """The victim first; on Redis a second replica that survives it."""
    if request.param == "memory":
        with memory_server(gated_llm.base_url) as target:
            yield target
        return
    request.getfixturevalue("main_redis")  # fails clearly without a Redis
    workdir = tmp_path_factory.mktemp("sigterm")
    env = {"LEASE_TTL_S": str(LEASE_TTL_S)}
    with redis_replicas(gated_llm.base_url, workdir, name="sigterm", env=env) as replicas:
        yield replicas[0]


def body_problem(r: httpx.Response, rest: bool) -> str | None:
    """None if `r` is a clean answer in the binding's shape (a task, a result, or an error)."""
    where = f"HTTP {r.status_code} {r.headers.get('content-type', '')!r}"
    if "Traceback" in r.text:
        return f"{where}: traceback: {r.text[:300]}"
    try:
        body = r.json()
    except ValueError:
        return f"{where}: not JSON: {r.text[:200]!r}"
    if not isinstance(body, dict):
        return f"{where}: {str(body)[:200]}"
    if rest:
        if r.status_code == 200:
            return None
        error = body.get("error")
        ok = isinstance(error, dict) and error.get("code") == r.status_code and error.get("message")
        return None if ok else f"{where}: not an AIP-193 error body: {str(body)[:300]}"
    if r.status_code != 200:
        return f"{where}: JSON-RPC answered outside HTTP 200: {str(body)[:300]}"
    error = body.get("error")
    if "result" in body or (isinstance(error, dict) and isinstance(error.get("code"), int)):
        return None
    return f"{where}: not a JSON-RPC response: {str(body)[:300]}"


async def blocking_send(http: httpx.AsyncClient, base: str, text: str, rest: bool) -> str | None:
    """A blocking send cut by the shutdown: None if its answer is clean, else what is wrong."""
    params = {
        "message": {
            "messageId": os.urandom(6).hex(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }
    try:
        if rest:
            r = await http.post(base + "/message:send", json=params, headers=A2A_HEADERS)
        else:
            r = await http.post(
                base + "/", json=rpc_payload("SendMessage", params, text), headers=A2A_HEADERS
            )
    except httpx.HTTPError as exc:
        return f"{text}: no answer: {exc!r}"
    problem = body_problem(r, rest)
    return f"{text}: {problem}" if problem else None


def stream_problem(out: Outcome, rest: bool) -> str | None:
    if out.kind != TASK:
        return f"{out.label}: did not open before the shutdown: {out.detail}"
    if out.stream_problem and out.stream_problem.startswith("stream cut"):
        return f"{out.label}: {out.stream_problem}"
    for ev in out.events:
        data = ev.data
        if not isinstance(data, dict):
            return f"{out.label}: an event is not JSON: {ev.raw[:200]!r}"
        if stream_result(data) is None:  # an error event: in the binding's shape?
            error = data.get("error")
            if (
                not isinstance(error, dict)
                or not error.get("message")
                or (not rest and data.get("id") != out.label)
            ):
                return f"{out.label}: malformed error event: {ev.raw[:300]}"
    return None


async def poll_loop(
    http: httpx.AsyncClient, base: str, what: str, stop: asyncio.Event, seen: list[str]
) -> list[str]:
    """GetTask / ListTasks until the server is gone; the problems among the answers received."""
    problems: list[str] = []
    rest = what.startswith("REST")
    while not stop.is_set():
        try:
            if what == "REST ListTasks":
                r = await http.get(base + "/tasks", headers=A2A_HEADERS)
            elif what == "REST GetTask":
                r = await http.get(f"{base}/tasks/{seen[0]}", headers=A2A_HEADERS)
            elif what == "GetTask":
                r = await http.post(
                    base + "/", json=rpc_payload("GetTask", {"id": seen[0]}, 1), headers=A2A_HEADERS
                )
            else:
                r = await http.post(
                    base + "/", json=rpc_payload("ListTasks", {}, 1), headers=A2A_HEADERS
                )
        except httpx.HTTPError:
            await asyncio.sleep(0.05)
            continue
        seen.append(what)
        problem = body_problem(r, rest)
        if problem:
            problems.append(f"{what}: {problem}")
        await asyncio.sleep(0.02)
    return problems


async def test_sigterm_during_every_kind_of_request_answers_cleanly(
    victims: Target, gated_llm: GatedLLM, marker: str
) -> None:
    target = victims
    victim = target.servers[0]
    base = victim.url
    assert victim.proc is not None
    first: set[str] = set()
    problems: list[str] = []

    async with http_client(timeout=60) as http:
        with gated_llm.gate(marker) as gate:
            r = await http.post(
                base + "/",
                headers=A2A_HEADERS,
                json=rpc_payload(
                    "SendMessage",
                    {
                        "message": {
                            "messageId": "m0",
                            "role": "ROLE_USER",
                            "parts": [{"text": f"subscribed {marker}"}],
                        },
                        "configuration": {"returnImmediately": True},
                    },
                    0,
                ),
            )
            running = r.json()["result"]["task"]["id"]

            def note(out: Outcome) -> None:
                first.add(out.label)

            def msg(k: str) -> dict[str, Any]:
                return {
                    "message": {
                        "messageId": os.urandom(6).hex(),
                        "role": "ROLE_USER",
                        "parts": [{"text": f"{k} {marker}"}],
                    }
                }

            streams = {
                "rpc-stream-1": (
                    base + "/",
                    rpc_payload("SendStreamingMessage", msg("s1"), "rpc-stream-1"),
                    False,
                    "POST",
                ),
                "rpc-stream-2": (
                    base + "/",
                    rpc_payload("SendStreamingMessage", msg("s2"), "rpc-stream-2"),
                    False,
                    "POST",
                ),
                "rest-stream": (base + "/message:stream", msg("s3"), True, "POST"),
                "rpc-subscribe-1": (
                    base + "/",
                    rpc_payload("SubscribeToTask", {"id": running}, "rpc-subscribe-1"),
                    False,
                    "POST",
                ),
                "rpc-subscribe-2": (
                    base + "/",
                    rpc_payload("SubscribeToTask", {"id": running}, "rpc-subscribe-2"),
                    False,
                    "POST",
                ),
                "rest-subscribe": (f"{base}/tasks/{running}:subscribe", None, True, "GET"),
            }
            stream_jobs = {
                label: asyncio.ensure_future(
                    open_stream(
                        http, url, body, label=label, rest=rest, method=method, on_first=note
                    )
                )
                for label, (url, body, rest, method) in streams.items()
            }
            sends = {f"send-{k} {marker}": k >= 3 for k in range(5)}  # the last two over REST
            send_jobs = [
                asyncio.ensure_future(blocking_send(http, base, text, rest))
                for text, rest in sends.items()
            ]
            stop = asyncio.Event()
            seen = [running]
            loops = [
                asyncio.ensure_future(poll_loop(http, base, what, stop, seen))
                for what in ("GetTask", "ListTasks", "REST GetTask", "REST ListTasks")
            ]

            turns = 1 + 3 + len(sends)  # the subscribed task, the streamed sends, the sends
            everything_in_flight = await wait_async(
                lambda: (
                    gated_llm.waiting(marker) >= turns
                    and len(first) == len(streams)
                    and len(set(seen)) >= 5
                ),
                30,
            )
            assert everything_in_flight, (
                f"not all in flight: {gated_llm.waiting(marker)}/{turns} turns at the model, "
                f"{sorted(first)} streams open, loops answered: {sorted(set(seen[1:]))}"
            )

            os.kill(victim.proc.pid, signal.SIGTERM)
            sent = await gather_within(send_jobs, 60, "blocking sends during the shutdown")
            problems += [p for p in sent if p]
            outs = await gather_within(list(stream_jobs.values()), 60, "streams")
            for out in outs:
                problem = stream_problem(out, streams[out.label][2])
                if problem:
                    problems.append(problem)
            await asyncio.to_thread(victim.proc.wait, 30)
            stop.set()
            for loop_problems in await gather_within(loops, 30, "polling loops"):
                problems += loop_problems[:3]
            gate.open()

    if target.view is not None:
        view = target.view
        try:
            wait_until(
                lambda: not view.active(),
                4 * LEASE_TTL_S + 20,
                "the other replica to finish every turn",
            )
        except AssertionError as exc:
            problems.append(f"{exc}; stuck: {view.stuck()}")
        states = {t: view.task_state(t) for t in view.task_ids()}
        if set(states.values()) != {"TASK_STATE_COMPLETED"}:
            problems.append(f"after the takeover: {states}")
    assert not problems, "during the shutdown:\n" + "\n".join(problems)
