"""One stored task that cannot be rendered never breaks the others' reads (in-memory store).

The API refuses such input now (A2A_MAX_JSON_DEPTH), and neither store can be given it (both
keep a task serialized, and the serializer refuses it), so the poison is put straight into the
stored form: a task whose data part nests deeper than the parser goes, as a version with other
limits could have left it. ListTasks leaves it out and logs it once at WARNING (no traceback);
GetTask answers it as not found, in each binding's shape.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import app.services
from app.main import create_app
from app.settings import Settings
from stores.base import ANONYMOUS
from stores.memory import InMemoryStores
from stores.models import Task

from .scripted_llm import ScriptedLLM

POISON_LEVELS = 300  # pydantic's JSON parser stops near 200, its serializer near 255


def task(task_id: str, data: Any) -> Task:
    return Task.model_validate(
        {
            "id": task_id,
            "contextId": "ctx-poison",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}],
        }
    )


def poisoned(stored: bytes) -> bytes:
    """The stored task with its data part nested POISON_LEVELS deep."""
    marker = b'"data":"poison"'
    assert marker in stored, stored
    return stored.replace(marker, b'"data":' + b"[" * POISON_LEVELS + b"1" + b"]" * POISON_LEVELS)


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    stores = InMemoryStores.create(ttl_s=3600)
    monkeypatch.setattr(app.services, "build_stores", lambda settings: stores)
    await stores.tasks.create(task("good", {"fine": [1, 2]}), owner=ANONYMOUS)
    await stores.tasks.create(task("poison", "poison"), owner=ANONYMOUS)
    stored = stores.tasks._tasks[(ANONYMOUS, "poison")]
    stored.snapshot = poisoned(stored.snapshot)
    transport = httpx.ASGITransport(app=create_app(Settings(), llm=ScriptedLLM()))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def test_list_tasks_leaves_out_a_task_it_cannot_render(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        listed = (await client.post("/", json=rpc("ListTasks", {}))).json()
        rest = await client.get("/tasks")
    assert [t["id"] for t in listed["result"]["tasks"]] == ["good"], listed
    assert rest.status_code == 200, rest.text
    assert [t["id"] for t in rest.json()["tasks"]] == ["good"]
    warnings = [r for r in caplog.records if "poison" in r.getMessage()]
    assert len(warnings) == 2, caplog.text  # once per list
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in warnings)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_get_task_answers_an_unrenderable_task_as_not_found(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        body = (await client.post("/", json=rpc("GetTask", {"id": "poison"}))).json()
        rest = await client.get("/tasks/poison")
    assert body["error"]["code"] == -32001, body
    assert body["error"]["data"][0]["metadata"] == {"taskId": "poison"}
    assert rest.status_code == 404, rest.text
    assert rest.json()["error"]["status"] == "NOT_FOUND"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert all(r.exc_info is None for r in caplog.records)
    good = (await client.post("/", json=rpc("GetTask", {"id": "good"}))).json()
    assert good["result"]["history"][0]["parts"][0]["data"] == {"fine": [1, 2]}
