"""The work a streamed chunk costs, counted (not timed, so it holds on a loaded machine), through
the whole stack a client uses: SendStreamingMessage over JSON-RPC, the runner, the publisher, the
in-memory store and the SSE writer. Per chunk: at most one store write (chunks that come while
a write is out go in the next one: a burst is one write), one serialization (the event, written
once, relayed as written), no parse, no copy, and nothing of the whole task. A return of
the quadratic copy (the task copied or re-serialized at every publish, growing with the answer)
or of a per-reader re-serialization fails here.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, TypeAdapter

from agent.llm.scripted import ScriptedModel
from app.main import create_app
from app.settings import Settings
from stores.codec import ArtifactChunks
from stores.memory import InMemoryTaskStore

SHORT, LONG = 20, 220
EXTRA = LONG - SHORT


def counted(counts: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        if name.startswith("Task."):  # a whole task serialized, parsed or copied
            counts["whole task"] += 1
        return function(*args, **kwargs)

    return counting


def instrument(patch: pytest.MonkeyPatch, counts: Counter[str]) -> None:
    """Count every pydantic serialization, parse and copy, by the class it was made on."""
    for method in ("model_dump", "model_dump_json", "model_copy"):
        original = getattr(BaseModel, method)

        def by_class(self: BaseModel, *args: Any, _m: str = method, _o: Any = original, **kw: Any):
            return counted(counts, f"{type(self).__name__}.{_m}", _o)(self, *args, **kw)

        patch.setattr(BaseModel, method, by_class)
    validate_json = BaseModel.model_validate_json.__func__  # type: ignore[attr-defined]

    def parse(cls: type[BaseModel], *args: Any, **kwargs: Any) -> Any:
        return counted(counts, f"{cls.__name__}.model_validate_json", validate_json)(
            cls, *args, **kwargs
        )

    patch.setattr(BaseModel, "model_validate_json", classmethod(parse))
    for method in ("dump_json", "validate_json", "dump_python"):
        patch.setattr(
            TypeAdapter, method, counted(counts, f"event.{method}", getattr(TypeAdapter, method))
        )
    patch.setattr(
        InMemoryTaskStore, "publish", counted(counts, "store writes", InMemoryTaskStore.publish)
    )
    # The in-memory store's chunk sink, and its `publish_chunks`, write with `publish_chunks_now`.
    publish_chunks = counted(counts, "store writes", InMemoryTaskStore.publish_chunks_now)

    def chunks_written(store: InMemoryTaskStore, task_id: str, events: Any, **kw: Any) -> Any:
        counts["chunks written"] += len(events)
        return publish_chunks(store, task_id, events, **kw)

    patch.setattr(InMemoryTaskStore, "publish_chunks_now", chunks_written)
    patch.setattr(ArtifactChunks, "render", counted(counts, "event.render", ArtifactChunks.render))


async def work_of_a_streamed_turn(chunks: int, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    async with served_app(chunks) as (client, _):
        with monkeypatch.context() as patch:
            instrument(patch, counts)
            reply = await client.post(
                "/", json=rpc("SendStreamingMessage", {"message": MESSAGE}), headers=HEADERS
            )
    events = [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]
    assert len(events) == chunks + 3, reply.text  # the task, working, the chunks, completed
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    answer = "".join(
        event["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"]
        for event in events
        if "artifactUpdate" in event["result"]
    )
    assert answer == "".join(ScriptedModel(chunks=chunks)._chunks)  # type: ignore[attr-defined]
    return counts


async def test_a_streamed_chunk_costs_at_most_one_store_write_and_one_serialization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A process's first turn also builds the chunks' template (once per process, stores.codec):
    # measured after it, so the figures do not depend on what ran before in this process.
    await work_of_a_streamed_turn(SHORT, monkeypatch)
    short = await work_of_a_streamed_turn(SHORT, monkeypatch)
    long = await work_of_a_streamed_turn(LONG, monkeypatch)
    extra = Counter({name: long[name] - short[name] for name in long | short})
    assert extra["chunks written"] == EXTRA, (short, long)
    assert 0 <= extra["store writes"] <= EXTRA, (short, long)
    assert extra["whole task"] == 0, f"the whole task is handled per chunk: {extra}"
    # A chunk's stored form is rendered once (its text serialized; see stores.codec)
    assert extra["event.render"] == EXTRA, f"an event is serialized more than once: {extra}"
    parsed_or_copied = {
        name: count for name, count in extra.items() if ("validate" in name or "copy" in name)
    }
    assert not any(parsed_or_copied.values()), f"chunks are parsed or copied: {extra}"
    other = {
        name: count
        for name, count in extra.items()
        if count and name not in ("store writes", "chunks written", "event.render")
    }
    assert not other, f"more work per chunk than one write and one serialization: {other}"


@contextlib.asynccontextmanager
async def served_app(
    chunks: int = SHORT,
) -> AsyncIterator[tuple[httpx.AsyncClient, list[tuple[bytes, bool]]]]:
    """A client of the app (the scripted model, `chunks` chunks) and every response body part it
    sent, as (body, more_body): what went to the connection, write by write. Without the turn
    gate (`A2A_TURN_SLICE_MS=0`): it lets a turn run for a slice of wall time per loop pass, so on
    a loaded machine it splits a quick turn across passes (a write each) at places that vary."""
    model = ScriptedModel(chunks=chunks)
    app = create_app(Settings(a2a_turn_slice_ms=0), llm=model)  # type: ignore[arg-type]
    bodies: list[tuple[bytes, bool]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        async def recorded_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                bodies.append((message.get("body", b""), message.get("more_body", False)))
            await send(message)

        await app(scope, receive, recorded_send)

    transport = httpx.ASGITransport(app=recording)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
    ):
        yield client, bodies


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


MESSAGE = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
HEADERS = {"A2A-Version": "1.0"}


async def test_what_one_read_brings_goes_out_in_one_write() -> None:
    """A reader behind the journal (a reconnect after Last-Event-ID, a slow client) gets the
    events one read brings in one write to the connection, not one write per event."""
    async with served_app() as (client, bodies):
        sent = await client.post(
            "/", json=rpc("SendMessage", {"message": MESSAGE}), headers=HEADERS
        )
        task = sent.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        bodies.clear()
        replay = await client.post(
            "/",
            json=rpc("SubscribeToTask", {"id": task["id"]}),
            headers={**HEADERS, "Last-Event-ID": "0"},
        )
    events = [line for line in replay.text.splitlines() if line.startswith("data:")]
    assert len(events) == SHORT + 3  # the task, working, the chunks, completed
    assert json.loads(events[-1][5:])["result"]["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    writes = [body for body, _ in bodies if body]
    assert len(writes) == 1, [write[:60] for write in writes]


async def test_a_streams_last_events_end_its_response_in_the_same_write() -> None:
    """The end of a stream's body (the chunked encoding's last chunk) goes out with its last
    events, not in a write of its own."""
    async with served_app() as (client, bodies):
        streamed = await client.post(
            "/", json=rpc("SendStreamingMessage", {"message": MESSAGE}), headers=HEADERS
        )
    events = [line for line in streamed.text.splitlines() if line.startswith("data:")]
    assert len(events) == SHORT + 3
    assert all(body for body, _ in bodies), "an empty write"
    assert [more for _, more in bodies] == [True] * (len(bodies) - 1) + [False]
    assert b"TASK_STATE_COMPLETED" in bodies[-1][0]


async def test_a_quick_turn_reaches_its_stream_in_two_writes() -> None:
    """In memory a turn writes each chunk as it comes (no write behind it to wait for): a model
    that answers at once has the working status, every chunk and the completion in the journal
    by the time the stream's reader wakes, so they go out together after the task."""
    async with served_app() as (client, bodies):
        streamed = await client.post(
            "/", json=rpc("SendStreamingMessage", {"message": MESSAGE}), headers=HEADERS
        )
    events = [line for line in streamed.text.splitlines() if line.startswith("data:")]
    assert len(events) == SHORT + 3
    writes = [body for body, _ in bodies]
    assert len(writes) == 2, [write[:60] for write in writes]
    assert writes[0].count(b"data:") == 1 and b'"task":' in writes[0]
    assert writes[1].count(b"data:") == SHORT + 2
