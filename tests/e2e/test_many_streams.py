"""`a2a-server` as shipped (its default limits), started with a soft limit of 1024 open files (a
common default): it serves more streams than that at once, every one of them, because it raises
its own limit to what A2A_MAX_CONNECTIONS needs."""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Iterator

import pytest

from app.http.connections import raise_open_files_limit
from tests.e2e.harness import RpcClient, ServerProcess, send_params

pytestmark = pytest.mark.timeout(120)

STREAMS = 1100  # past the 1024 descriptors it started with, and past the former default of 1000


@pytest.fixture(scope="module")
def shipped_server() -> Iterator[ServerProcess]:
    # Every turn stays working (its one chunk is an hour away): streams on it stay open.
    env = {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": "1", "SCRIPTED_DELAY_MS": "3600000"}
    server = ServerProcess("http://127.0.0.1:9", env=env)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit on open files ({hard}) is too low for this test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # the server inherits it
    try:
        server.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield server
    finally:
        server.cleanup()


async def open_stream(port: int, task_id: str) -> tuple[bytes, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    ).encode()
    writer.write(
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\nAccept: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    received = b""
    while b"data:" not in received and b"\r\n\r\n{" not in received:
        chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
        if not chunk:
            break
        received += chunk
    return received, writer


async def hold_streams(port: int, task_id: str) -> list[bytes]:
    opening = asyncio.Semaphore(200)

    async def one() -> tuple[bytes, asyncio.StreamWriter]:
        async with opening:
            return await open_stream(port, task_id)

    opened = await asyncio.gather(*(one() for _ in range(STREAMS)))
    for _, writer in opened:
        writer.close()
    return [head for head, _ in opened]


def test_more_streams_than_1024_descriptors_are_all_served(shipped_server: ServerProcess) -> None:
    rpc = RpcClient(shipped_server.url)
    try:
        started = rpc.result(
            "SendMessage", send_params("stay", configuration={"returnImmediately": True})
        )
    finally:
        rpc.close()
    task_id = started["task"]["id"]
    raise_open_files_limit(STREAMS + 100)  # this test's own end of the connections
    heads = asyncio.run(hold_streams(shipped_server.port, task_id))
    refused = [head[-300:] for head in heads if b"data:" not in head]
    assert not refused, f"{len(refused)} of {STREAMS} refused, e.g. {refused[0]!r}"
    first_events = [head.split(b"data:", 1)[1] for head in heads]
    assert all(b'"TASK_STATE_WORKING"' in event for event in first_events)
