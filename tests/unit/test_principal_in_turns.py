"""A turn runs as the principal that sent its message: hooks see the principal's owner, and so
does what the turn stores (the conversation, under that owner only)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agent.context import TurnContext
from agent.hooks import Hooks
from app.main import create_app
from app.settings import Settings
from stores.memory import InMemoryMessageStore

from .scripted_llm import ScriptedLLM, text


class SeenOwners(Hooks):
    def __init__(self) -> None:
        self.owners: list[str] = []

    async def on_turn_start(self, turn: TurnContext) -> None:
        self.owners.append(turn.owner)


def send(context_id: str) -> dict[str, object]:
    message = {
        "messageId": f"m-{context_id}",
        "role": "ROLE_USER",
        "parts": [{"text": "hello"}],
        "contextId": context_id,
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_hooks_see_the_principal_and_its_data_is_under_it(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[InMemoryMessageStore] = []  # the app's conversations, read back below
    init = InMemoryMessageStore.__init__

    def recorded(self: InMemoryMessageStore, **kwargs: Any) -> None:
        init(self, **kwargs)
        made.append(self)

    monkeypatch.setattr(InMemoryMessageStore, "__init__", recorded)
    seen = SeenOwners()
    settings = Settings(
        llm_model="openai/not-called",
        a2a_api_keys="alice:key-alice-0123456789,bob:key-bob-0123456789",  # type: ignore[arg-type]
    )
    app: FastAPI = create_app(settings, llm=llm, hooks=[seen])
    llm.script(text("hi alice"), text("hi bob"))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        for who in ("alice", "bob"):
            reply = await client.post(
                "/", json=send("shared-ctx"), headers={"X-API-Key": f"key-{who}-0123456789"}
            )
            assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        (messages,) = made
        alice = await messages.window("shared-ctx", owner="api-key:alice", limit=10)
        bob = await messages.window("shared-ctx", owner="api-key:bob", limit=10)
    assert seen.owners == ["api-key:alice", "api-key:bob"]
    # One contextId, two principals: two conversations of one turn each, never one of two.
    assert [m.content for m in alice] == ["hello", "hi alice"]
    assert [m.content for m in bob] == ["hello", "hi bob"]
