"""A stream whose store stops answering ends with an error its client can act on.

The follower (agent.runtime.journal) passes on what it read, then the store's StoreUnavailable:
it neither swallows it nor turns it into keep-alives. Each binding and generation renders it as
the stream's last event: JSON-RPC a -32603 error with ErrorInfo STORE_UNAVAILABLE (as a unary
request gets), HTTP+JSON an `event: error` with the AIP-193 body of a 503. The client then
resubscribes (elsewhere) with the last id it has. (How soon a Redis that stopped answering ends
a read: tests/redis/test_redis_read_watch.py; end to end: tests/e2e_chaos/test_chaos_partition.py.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import app.services
from agent.runtime.journal import JournalFollower
from app.main import create_app
from app.settings import Settings
from stores.base import ANONYMOUS, StoreUnavailable
from stores.memory import InMemoryStores
from stores.memory.tasks import InMemoryTaskStore
from stores.models import JournalEntry, Task

from .scripted_llm import ScriptedLLM

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class CutOff(InMemoryTaskStore):
    """The in-memory task store, until `cut`: then every read waiting, and every later call
    that reaches the store, fails as a Redis that stopped answering makes it fail."""

    def __init__(self) -> None:
        super().__init__(ttl_s=3600)
        self.cut = asyncio.Event()
        self.reads = 0

    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> list[JournalEntry]:
        self.reads += 1
        if not self.cut.is_set():
            found = asyncio.ensure_future(
                super().read(task_id, owner=owner, after=after, timeout_s=timeout_s)
            )
            cut = asyncio.ensure_future(self.cut.wait())
            await asyncio.wait({found, cut}, return_when=asyncio.FIRST_COMPLETED)
            cut.cancel()
            if found.done():
                return found.result()
            found.cancel()
        raise StoreUnavailable("Redis did not answer a ping")

    async def get(self, task_id: str, *, owner: str) -> Any:
        if self.cut.is_set():
            raise StoreUnavailable("Redis did not answer")
        return await super().get(task_id, owner=owner)


def working(task_id: str) -> Task:
    return Task.model_validate(
        {"id": task_id, "contextId": f"ctx-{task_id}", "status": {"state": "TASK_STATE_WORKING"}}
    )


async def test_the_follower_passes_on_what_it_read_then_the_store_error() -> None:
    store = CutOff()
    record = await store.create(working("t1"), owner=ANONYMOUS)
    follower = JournalFollower(store, read_block_s=30.0)
    tail = follower.snapshot_then_tail(record, owner=ANONYMOUS, at_interrupt=True)
    first = await anext(tail)
    assert first is not None and [entry.position for entry in first] == [record.position]
    waiting = asyncio.ensure_future(anext(tail))
    await asyncio.sleep(0.05)
    assert not waiting.done() and store.reads == 1  # waiting on the journal: nothing to send
    store.cut.set()
    with pytest.raises(StoreUnavailable):
        await asyncio.wait_for(waiting, 2)  # not a keep-alive, not a retry: the error


async def test_a_reader_whose_wait_ends_empty_learns_the_store_is_gone_from_its_check() -> None:
    """A read that waited its time for nothing checks the snapshot: that check fails too."""
    store = CutOff()
    record = await store.create(working("t2"), owner=ANONYMOUS)
    follower = JournalFollower(store, read_block_s=0.05)
    tail = follower.tail("t2", owner=ANONYMOUS, after=record.position, at_interrupt=True)
    assert await anext(tail) is None  # one keep-alive: the store answered, with nothing
    store.cut.set()
    with pytest.raises(StoreUnavailable):
        await anext(tail)


@pytest.fixture
async def served(
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[httpx.AsyncClient, CutOff]]:
    stores = InMemoryStores.create(ttl_s=3600)
    stores.tasks = cut_off = CutOff()
    monkeypatch.setattr(app.services, "build_stores", lambda settings: stores)
    transport = httpx.ASGITransport(app=create_app(Settings(), llm=ScriptedLLM()))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http, cut_off


def sse(body: str) -> list[tuple[str | None, str | None, Any]]:
    """(id, event, data) of each event."""
    out = []
    for block in body.strip().split("\r\n\r\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\r\n") if ": " in line)
        out.append((fields.get("id"), fields.get("event"), json.loads(fields["data"])))
    return out


def reason(details: Any) -> str | None:
    return next((d.get("reason") for d in details or [] if d.get("@type") == ERROR_INFO), None)


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}


SUBSCRIPTIONS = {
    "JSON-RPC 1.0": ("POST", "/", rpc("SubscribeToTask", {"id": "{id}"}), {"A2A-Version": "1.0"}),
    "JSON-RPC 0.3": ("POST", "/", rpc("tasks/resubscribe", {"id": "{id}"}), {}),
    "HTTP+JSON 1.0": ("GET", "/tasks/{id}:subscribe", None, {"A2A-Version": "1.0"}),
    "HTTP+JSON 0.3": ("POST", "/v1/tasks/{id}:subscribe", None, {}),
}


@pytest.mark.parametrize("binding", list(SUBSCRIPTIONS))
async def test_a_stream_ends_with_the_store_unavailable_error_in_its_binding_shape(
    served: tuple[httpx.AsyncClient, CutOff], binding: str
) -> None:
    http, store = served
    task_id = f"t-{binding.replace(' ', '-').replace('+', '')}"
    await store.create(working(task_id), owner=ANONYMOUS)
    method, path, body, headers = SUBSCRIPTIONS[binding]
    raw = json.dumps(body).replace("{id}", task_id) if body is not None else None
    request = http.request(
        method,
        path.replace("{id}", task_id),
        content=raw,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
    )
    answer = asyncio.ensure_future(request)
    for _ in range(100):  # the stream is open and waits on the journal
        await asyncio.sleep(0.01)
        if store.reads:
            break
    assert store.reads and not answer.done()
    store.cut.set()
    response = await asyncio.wait_for(answer, 5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    assert "Traceback" not in response.text
    assert len(events) == 2, events  # the task as it stood, then the error
    snapshot_id, _, snapshot = events[0]
    assert snapshot_id == "1" and task_id in json.dumps(snapshot)
    event_id, event, error = events[-1]
    assert event_id is None  # not a journal position: resuming from the snapshot's id is right
    if binding.startswith("JSON-RPC"):
        assert event is None and error["id"] == "s" and "result" not in error
        assert error["error"]["code"] == -32603, error
        assert reason(error["error"]["data"]) == "STORE_UNAVAILABLE", error
    else:
        assert event == "error", events
        assert error["error"]["code"] == 503 and error["error"]["status"] == "UNAVAILABLE", error
        assert reason(error["error"]["details"]) == "STORE_UNAVAILABLE", error
