"""Push delivery follows a new task only if a config can exist for it: one that came with its
first message (no other can be registered before the task exists). Without one, a turn costs no
push-config read (a Redis round trip per turn) and no delivery task."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agent.llm.scripted import ScriptedModel
from app.main import create_app
from app.settings import Settings
from stores.memory import InMemoryPushConfigStore


@pytest.fixture
async def client_and_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    reads: list[str] = []
    listed = InMemoryPushConfigStore.list

    async def counted(self: InMemoryPushConfigStore, task_id: str, **kwargs: Any) -> Any:
        reads.append(task_id)
        return await listed(self, task_id, **kwargs)

    monkeypatch.setattr(InMemoryPushConfigStore, "list", counted)
    settings = Settings(a2a_push_allowed_hosts=["127.0.0.1"], a2a_push_max_attempts=1)
    app = create_app(settings, llm=ScriptedModel(chunks=2))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        yield client, reads


def send(text: str, **configuration: Any) -> dict[str, Any]:
    message = {"messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, "configuration": configuration}


async def test_a_task_without_a_config_is_not_followed(
    client_and_reads: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, reads = client_and_reads
    reply = await client.post("/message:send", json=send("plain"), headers={"A2A-Version": "1.0"})
    assert reply.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reads == []


async def test_a_task_sent_with_a_config_is_followed(
    client_and_reads: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, reads = client_and_reads
    config = {"url": "http://127.0.0.1:9/hook"}  # nothing listens: delivery is what is checked
    body = send("pushed", taskPushNotificationConfig=config)
    reply = await client.post("/message:send", json=body, headers={"A2A-Version": "1.0"})
    task = reply.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["id"] in reads
