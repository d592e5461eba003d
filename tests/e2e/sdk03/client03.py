"""A real A2A 0.3 client (a2a-sdk 0.3.x, in a venv of its own) run against our server.

Run by tests/e2e/test_sdk03_client.py as `python client03.py BASE_URL TRANSPORT MARKER`
with the interpreter of `.venv-a2a03`; prints one JSON object with what the client saw. It uses
only the 0.3 SDK's public client API: the card resolver, `ClientFactory`, send (blocking and
streamed), get, cancel, resubscribe. The fake model is scripted by the test on MARKER.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any
from uuid import uuid4

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    Message,
    Part,
    Role,
    Task,
    TaskIdParams,
    TaskQueryParams,
    TextPart,
)


def user_message(text: str, **fields: Any) -> Message:
    return Message(
        role=Role.user, message_id=uuid4().hex, parts=[Part(root=TextPart(text=text))], **fields
    )


def answer_text(task: Task) -> str:
    return "".join(
        part.root.text
        for artifact in task.artifacts or []
        for part in artifact.parts
        if getattr(part.root, "text", None)
    )


async def last_task(client: Any, message: Message) -> tuple[Task, list[str]]:
    """Send; the task as the client last saw it, and the kinds of the events it received."""
    kinds: list[str] = []
    task = None
    async for item in client.send_message(message):
        assert isinstance(item, tuple), f"expected (task, update), got {item!r}"
        task, update = item
        kinds.append(update.kind if update is not None else "task")
    assert task is not None
    return task, kinds


async def main(base_url: str, transport: str, marker: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30, trust_env=False) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        seen["card"] = {"url": card.url, "preferred": card.preferred_transport}

        def client_for(streaming: bool, polling: bool = False) -> Any:
            config = ClientConfig(
                httpx_client=http,
                streaming=streaming,
                polling=polling,
                supported_transports=[transport],
            )
            return ClientFactory(config).create(card)

        blocking = client_for(streaming=False)
        task, _ = await last_task(blocking, user_message(f"hello {marker}"))
        seen["send"] = {"state": task.status.state.value, "text": answer_text(task)}
        got = await blocking.get_task(TaskQueryParams(id=task.id, history_length=1))
        seen["get"] = {"state": got.status.state.value, "history": len(got.history or [])}

        streamed, kinds = await last_task(
            client_for(streaming=True), user_message(f"stream {marker}")
        )
        seen["stream"] = {
            "state": streamed.status.state.value,
            "text": answer_text(streamed),
            "kinds": sorted(set(kinds)),
        }

        asked, _ = await last_task(blocking, user_message(f"ask {marker}"))
        canceled = await blocking.cancel_task(TaskIdParams(id=asked.id))
        seen["cancel"] = {"before": asked.status.state.value, "after": canceled.status.state.value}

        running, _ = await last_task(
            client_for(streaming=False, polling=True), user_message(f"slow {marker}")
        )
        states = []
        async for running_task, _update in client_for(streaming=True).resubscribe(
            TaskIdParams(id=running.id)
        ):
            states.append(running_task.status.state.value)
        seen["resubscribe"] = {"first": running.status.state.value, "last": states[-1]}
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
