"""Refusing work cleanly, in process: the open-streams limit (A2A_MAX_STREAMS) and the drain a
SIGTERM starts. Both refuse before anything is written, with -32603 and a retry hint on JSON-RPC
and 503 + Retry-After on REST. (Real streams, disconnects and signals: tests/e2e.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings

from .scripted_llm import ScriptedLLM, blocked, text

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def message(text_: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": f"m-{text_}", "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def assert_overloaded_rpc(response: httpx.Response, says: str) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["retry-after"] == "1"
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}, body
    error = body["error"]
    assert error["code"] == -32603 and says in error["message"], error
    (info,) = [d for d in error["data"] if d["@type"] == ERROR_INFO]
    assert info["reason"] == "OVERLOADED" and info["metadata"] == {"retryAfterSeconds": "1"}
    (retry,) = [d for d in error["data"] if d["@type"] == RETRY_INFO]
    assert retry["retryDelay"] == "1s"


def assert_overloaded_rest(response: httpx.Response, says: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["code"] == 503 and error["status"] == "UNAVAILABLE", error
    assert says in error["message"], error
    assert {d["@type"] for d in error["details"]} == {ERROR_INFO, RETRY_INFO}


@pytest.fixture
async def served(llm: ScriptedLLM) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(Settings(llm_model="openai/not-called", a2a_max_streams=1), llm=llm)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield app, client


async def list_tasks(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return list((await client.post("/", json=rpc("ListTasks", {}))).json()["result"]["tasks"])


async def test_a_blocking_send_holds_a_stream_slot_and_more_are_refused_unwritten(
    served: tuple[FastAPI, httpx.AsyncClient], llm: ScriptedLLM
) -> None:
    _, client = served
    gate = asyncio.Event()
    first = blocked(gate, then=text("first done"))
    llm.script(first, text("quick"), text("second done"))
    waiting = asyncio.create_task(
        client.post("/", json=rpc("SendMessage", {"message": message("a")}))
    )
    await asyncio.wait_for(first.entered.wait(), 5)

    limit = "limit of 1 open streams and blocking sends"
    refused = {"message": message("b", contextId="ctx-refused")}
    assert_overloaded_rpc(await client.post("/", json=rpc("SendMessage", refused)), limit)
    assert_overloaded_rpc(await client.post("/", json=rpc("SendStreamingMessage", refused)), limit)
    assert_overloaded_rest(await client.post("/message:send", json=refused), limit)
    assert_overloaded_rest(await client.post("/message:stream", json=refused), limit)
    (only,) = await list_tasks(client)  # nothing was written for the refused requests
    subscribe = await client.post("/", json=rpc("SubscribeToTask", {"id": only["id"]}))
    assert_overloaded_rpc(subscribe, limit)

    # Returning at once holds no slot.
    quick = {"message": message("c"), "configuration": {"returnImmediately": True}}
    reply = (await client.post("/", json=rpc("SendMessage", quick))).json()
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED", reply

    gate.set()
    done = (await asyncio.wait_for(waiting, 5)).json()["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    # The slot is back: a blocking send is taken again.
    again = (await client.post("/", json=rpc("SendMessage", {"message": message("d")}))).json()
    assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", again
    assert len(await list_tasks(client)) == 3


async def test_a_refused_start_gives_its_slot_back(
    served: tuple[FastAPI, httpx.AsyncClient], llm: ScriptedLLM
) -> None:
    _, client = served
    llm.script(text("taken"))
    bad = {"message": {**message("x"), "role": "ROLE_AGENT"}}
    for _ in range(3):
        reply = (await client.post("/", json=rpc("SendMessage", bad))).json()
        assert reply["error"]["code"] == -32602, reply
        missing = await client.post("/", json=rpc("SubscribeToTask", {"id": "no-such-task"}))
        assert missing.json()["error"]["code"] == -32001
    reply = (await client.post("/", json=rpc("SendMessage", {"message": message("y")}))).json()
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply


async def test_draining_answers_waiting_sends_and_refuses_new_work(
    served: tuple[FastAPI, httpx.AsyncClient], llm: ScriptedLLM
) -> None:
    app, client = served
    hanging = blocked()  # the turn hangs in its model call until the server stops it
    llm.script(hanging)
    assert (await client.get("/readyz")).status_code == 200
    waiting = asyncio.create_task(
        client.post("/", json=rpc("SendMessage", {"message": message("a")}))
    )
    await asyncio.wait_for(hanging.entered.wait(), 5)

    app.state.drain.start()

    # The waiting send answers at once, with the task as it stands: the client has its id.
    reply = (await asyncio.wait_for(waiting, 5)).json()
    task = reply["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING", reply
    assert [t["id"] for t in await list_tasks(client)] == [task["id"]]
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (503, {"status": "draining"})
    shutting_down = "shutting down"
    new = {"message": message("b")}
    assert_overloaded_rpc(await client.post("/", json=rpc("SendMessage", new)), shutting_down)
    assert_overloaded_rest(await client.post("/message:stream", json=new), shutting_down)
    subscribe = await client.post("/", json=rpc("SubscribeToTask", {"id": task["id"]}))
    assert_overloaded_rpc(subscribe, shutting_down)
    assert len(await list_tasks(client)) == 1
    # Reads still work while draining.
    got = (await client.post("/", json=rpc("GetTask", {"id": task["id"]}))).json()
    assert got["result"]["id"] == task["id"]
