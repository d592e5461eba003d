"""GetTask's answer is the same task whichever way it is written: an unshaped read (the task
as stored, written out as it is) against a shaped one (built and rendered: `historyLength`
beyond the history) and against ListTasks' rendering, on JSON-RPC and HTTP+JSON, in 1.0 and 1.1
(with its generation); a task another owner holds stays not found."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import app.services
from app.main import create_app
from app.settings import Settings
from stores.base import ANONYMOUS, JournalWrite
from stores.memory import InMemoryStores
from stores.models import TaskState

from .scripted_llm import ScriptedLLM
from .test_store_contract import make_task, status_event, with_state

VERSIONS = {"1.0": {"A2A-Version": "1.0"}, "1.1": {"A2A-Version": "1.1"}}


@pytest.fixture
async def stores(monkeypatch: pytest.MonkeyPatch) -> InMemoryStores:
    stores = InMemoryStores.create(ttl_s=3600)
    monkeypatch.setattr(app.services, "build_stores", lambda settings: stores)
    task = make_task("t-forms")
    task.metadata = {"note": "é ✓", "nested": {"n": [1, 2.5, None, True]}}
    await stores.tasks.create(task, owner=ANONYMOUS)
    return stores


@pytest.fixture
async def client(stores: InMemoryStores) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(Settings(), llm=ScriptedLLM()))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def get_task(
    client: httpx.AsyncClient, binding: str, version: str, **params: Any
) -> dict[str, Any]:
    headers = VERSIONS[version]
    if binding == "jsonrpc":
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": params}
        reply = (await client.post("/", json=body, headers=headers)).json()
        return reply["result"] if "result" in reply else reply
    query = {"historyLength": params["historyLength"]} if "historyLength" in params else {}
    response = await client.get(f"/tasks/{params['id']}", params=query, headers=headers)
    return response.json()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_an_unshaped_read_is_the_task_a_shaped_one_and_a_list_render(
    client: httpx.AsyncClient, stores: InMemoryStores, binding: str, version: str
) -> None:
    unshaped = await get_task(client, binding, version, id="t-forms")
    shaped = await get_task(client, binding, version, id="t-forms", historyLength=100)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"includeArtifacts": True}}
    listed = (await client.post("/", json=body, headers=VERSIONS[version])).json()
    assert unshaped == shaped == listed["result"]["tasks"][0], (unshaped, shaped)
    assert unshaped["metadata"] == {"note": "é ✓", "nested": {"n": [1, 2.5, None, True]}}
    assert unshaped["history"][0]["parts"], unshaped
    assert ("generation" in unshaped) == (version == "1.1")
    if version == "1.1":
        assert unshaped["generation"] == "1"


@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
async def test_an_unshaped_read_shows_each_change(
    client: httpx.AsyncClient, stores: InMemoryStores, binding: str
) -> None:
    assert (await get_task(client, binding, "1.1", id="t-forms"))["generation"] == "1"
    record = await stores.tasks.get("t-forms", owner=ANONYMOUS)
    assert record is not None
    working = with_state(record.task, TaskState.WORKING)
    write = JournalWrite(status_event(record.task, TaskState.WORKING), snapshot=working)
    await stores.tasks.publish("t-forms", write, owner=ANONYMOUS)
    after = await get_task(client, binding, "1.1", id="t-forms")
    assert after["status"]["state"] == "TASK_STATE_WORKING"
    assert after["generation"] == "2"


async def test_another_owners_task_is_not_found(
    client: httpx.AsyncClient, stores: InMemoryStores
) -> None:
    await stores.tasks.create(make_task("t-theirs"), owner="someone-else")
    reply = await get_task(client, "jsonrpc", "1.0", id="t-theirs")
    assert reply["error"]["code"] == -32001, reply
    rest = await client.get("/tasks/t-theirs", headers=VERSIONS["1.0"])
    assert rest.status_code == 404, rest.text
