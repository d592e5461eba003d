"""What an idle stream holds, counted (not measured in bytes, so it holds on any machine): the
server is made of idle streams when thousands of clients follow their tasks. Each open stream
is its request's task alone (the connection tells it when the client leaves: no task waiting on
`receive()` for that); it keeps no timer of its own (one deadline timer per slot of time is
shared by every waiting read), and its request waits through no layer of FastAPI's or
Starlette's middleware and routing. A return of a timer per stream (`asyncio.timeout` around
each wait), of a task per wait or per stream beside its own, or of the framework's layers on the
JSON-RPC path fails here.
"""

from __future__ import annotations

import asyncio
import gc
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
import uvicorn

from agent.llm.scripted import ScriptedModel
from app.cli import server_config
from app.http.request_task import RequestCoroutine
from app.main import create_app
from app.settings import Settings
from stores.models import JournalEntry, Task
from tests.e2e.harness import free_port
from tests.e2e_redis.support import REDIS_URL, connect, delete_prefix
from tests.loop_timers import live_timers

STREAMS = 40


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[uvicorn.Server]:
    port = free_port()
    stores: dict[str, Any] = {}
    if getattr(request, "param", "memory") == "redis":
        prefix = f"a2a-footprint-{uuid.uuid4().hex[:10]}"
        stores = {"redis_url": REDIS_URL, "redis_key_prefix": prefix}
    settings = Settings(a2a_port=port, **stores)
    # Every turn stays working: its one chunk is an hour away.
    app = create_app(settings, llm=ScriptedModel(chunks=1, delay_ms=3_600_000))
    server = uvicorn.Server(server_config(app, settings))
    serving = asyncio.create_task(server.serve())
    for _ in range(2000):
        if server.started or serving.done():
            break
        await asyncio.sleep(0.01)
    assert server.started, "the server did not start"
    yield server
    server.should_exit = True
    await serving
    if stores:
        client = connect()
        delete_prefix(client, stores["redis_key_prefix"])
        client.close()


@pytest.fixture
def server(served: uvicorn.Server) -> int:
    return served.config.port


def request(method: str, params: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    return (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


async def open_stream(
    port: int, method: str, params: dict[str, Any]
) -> tuple[asyncio.StreamWriter, bytes]:
    """A stream, read up to the task's working status, then left open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(method, params))
    received = b""
    while b"TASK_STATE_WORKING" not in received:
        chunk = await asyncio.wait_for(reader.read(1 << 16), 10)
        assert chunk, received
        received += chunk
    assert received.startswith(b"HTTP/1.1 200"), received
    return writer, received


async def working_task(port: int) -> tuple[str, asyncio.StreamWriter]:
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    writer, received = await open_stream(port, "SendStreamingMessage", {"message": message})
    first = json.loads(received.split(b"data: ", 1)[1].split(b"\r\n", 1)[0])
    return first["result"]["task"]["id"], writer


def awaited_frames(task: asyncio.Task[Any]) -> list[str]:
    """The modules of the coroutines and async generators the task waits through, outermost
    first."""
    return [frame.f_globals.get("__name__", "?") for frame in awaited_frame_objects(task)]


def awaited_frame_objects(task: asyncio.Task[Any]) -> list[Any]:
    frames: list[Any] = []
    step: Any = task.get_coro()
    while step is not None:
        if type(step).__name__ == "async_generator_asend":  # a step of this generator:
            generators = [ref for ref in gc.get_referents(step) if isinstance(ref, AsyncGenerator)]
            step = generators[0] if generators else None
            continue
        frame = getattr(step, "cr_frame", None) or getattr(step, "ag_frame", None)
        if frame is None:  # a future: the wait itself
            break
        frames.append(frame)
        step = getattr(step, "cr_await", None) or getattr(step, "ag_await", None)
    return frames


# On Redis the first subscriber reads for itself and the others share the multiplexed read: a
# task or two for those reads, whatever the number of streams.
SHARED_READ_TASKS = {"memory": 0, "redis": 2}


@pytest.mark.parametrize("served", ["memory", "redis"], indirect=True)
async def test_an_idle_stream_is_one_task_and_no_timer(
    served: uvicorn.Server, server: int, request: pytest.FixtureRequest
) -> None:
    shared = SHARED_READ_TASKS[request.node.callspec.params["served"]]
    loop = asyncio.get_running_loop()
    task_id, first = await working_task(server)
    await asyncio.sleep(0.2)  # the turn's own timers are armed
    tasks_before, timers_before = len(asyncio.all_tasks()), live_timers(loop)
    writers = [
        (await open_stream(server, "SubscribeToTask", {"id": task_id}))[0] for _ in range(STREAMS)
    ]
    await asyncio.sleep(0.2)
    assert STREAMS <= len(asyncio.all_tasks()) - tasks_before <= STREAMS + shared
    # A few shared deadline slots at most, whatever the number of streams.
    assert live_timers(loop) - timers_before <= 3
    # Each connection's protocol keeps the header deadline's attributes in slots, not in
    # uvicorn's attribute dict: three more keys grew that dict to its next size (~1.5 KiB more
    # on every connection).
    ours = {"_header_timer", "_awaiting_headers", "_header_bytes"}
    for connection in served.server_state.connections:
        assert not ours & set(vars(connection)), vars(connection).keys()
    for writer in [first, *writers]:
        writer.close()


async def test_an_idle_stream_waits_through_no_framework_layer(server: int) -> None:
    _, writer = await working_task(server)
    await asyncio.sleep(0.1)
    (request_task,) = [
        task
        for task in asyncio.all_tasks()
        # The task's coroutine may be wrapped (app.first_step); the wrapper shows its code.
        if getattr(getattr(task.get_coro(), "cr_code", None), "co_name", None) == "run_asgi"
    ]
    modules = awaited_frames(request_task)
    framework = [name for name in modules if name.split(".")[0] in ("starlette", "fastapi")]
    assert framework == [], modules
    # It does wait where it should: in the SSE response, reading the journal.
    assert "app.a2a.sse" in modules and modules[-1] == "stores.memory.tasks", modules
    # And holds nothing it has passed on: not the snapshot it sent first, nor a batch of entries.
    held = [
        (frame.f_code.co_name, name, type(value).__name__)
        for frame in awaited_frame_objects(request_task)
        for name, value in frame.f_locals.items()
        if isinstance(value, (JournalEntry, Task, list)) and value
    ]
    assert held == [], held
    writer.close()


async def test_a_client_leaving_ends_its_stream_at_once_told_by_the_connection(
    server: int,
) -> None:
    task_id, first = await working_task(server)
    before = asyncio.all_tasks()
    writer, _ = await open_stream(server, "SubscribeToTask", {"id": task_id})
    await asyncio.sleep(0.1)
    (stream,) = asyncio.all_tasks() - before  # the request's task alone
    # Started by the server's protocol, which tells it; the stream listens on it.
    assert isinstance(stream.get_coro(), RequestCoroutine) and stream.get_coro().listener
    writer.close()
    await asyncio.wait({stream}, timeout=2)
    assert stream.done() and not stream.cancelled() and stream.exception() is None
    assert stream.get_coro().listener is None  # told once: nothing holds the stream any more
    first.close()
