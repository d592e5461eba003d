"""A response's head goes out with the first part of its body, in one write to the connection:
the server's own protocol (httptools, as `a2a-server` serves) driven with a transport that records
every write, on the app as `create_app` builds it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from agent.llm.scripted import ScriptedModel
from app.cli import server_config
from app.http import connections
from app.http.connections import HeadWithBody
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.skipif(
    connections.HttpToolsProtocol is None, reason="httptools is not installed"
)


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self._written = asyncio.Event()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        self._written.set()

    async def until(self, written: Callable[[bytes], bool]) -> None:
        """Wait until what was written so far, joined, satisfies `written`."""
        async with asyncio.timeout(10):
            while not written(b"".join(self.writes)):
                self._written.clear()
                await self._written.wait()

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Connection:
    """One connection to the server's protocol: bytes in, the writes it made out."""

    def __init__(self, config: uvicorn.Config) -> None:
        self.transport = RecordingTransport()
        self.protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}
        )
        self.protocol.connection_made(self.transport)

    async def writes_until(self, request: bytes, done: bytes) -> list[bytes]:
        self.transport.writes.clear()
        self.protocol.data_received(request)
        await self.transport.until(lambda written: written.endswith(done))
        return list(self.transport.writes)


@pytest.fixture
async def connection() -> AsyncIterator[Connection]:
    settings = Settings(log_level="warning")
    app = create_app(settings, llm=ScriptedModel(chunks=3))  # type: ignore[arg-type]
    config = server_config(app, settings)
    config.load()
    async with app.router.lifespan_context(app):
        yield Connection(config)


def rpc_request(method: str, *, headers: str = "", request_id: int = 1) -> bytes:
    message = {
        "messageId": f"m-{method}-{request_id}",
        "role": "ROLE_USER",
        "parts": [{"text": "hi"}],
    }
    params = {"message": message}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    return (
        f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"A2A-Version: 1.0\r\n{headers}Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def test_a_reply_is_one_write(connection: Connection) -> None:
    writes = await connection.writes_until(rpc_request("SendMessage"), b"}}")
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\n\r\n{" in writes[0] and b"TASK_STATE_COMPLETED" in writes[0]


async def test_a_streams_head_goes_with_its_first_event(connection: Connection) -> None:
    writes = await connection.writes_until(rpc_request("SendStreamingMessage"), b"0\r\n\r\n")
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"text/event-stream" in writes[0]
    assert writes[0].count(b"data: ") == 1 and b'"task":' in writes[0]
    assert b"TASK_STATE_COMPLETED" in writes[-1]


async def test_a_client_expecting_100_continue_gets_it_then_its_reply_in_one_write(
    connection: Connection,
) -> None:
    """The interim 100 goes out alone (the client waits for it before sending the body), the
    reply after it in one write. That the 100 is not held even a pass is shown below, on the
    wrapper itself: here a held one would still come, a pass later."""
    request = rpc_request("SendMessage", headers="Expect: 100-continue\r\n")
    head, body = request.split(b"\r\n\r\n", 1)
    connection.protocol.data_received(head + b"\r\n\r\n")
    await connection.transport.until(bool)
    assert connection.transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    writes = await connection.writes_until(body, b"}}")
    assert len(writes) == 1 and b"TASK_STATE_COMPLETED" in writes[0]


async def test_an_interim_100_continue_goes_out_at_once() -> None:
    transport = RecordingTransport()
    writer = HeadWithBody(transport, asyncio.get_running_loop())
    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # not a pass later
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    writer.write(b"{}")
    assert transport.writes[1:] == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]


async def test_a_head_without_a_body_in_the_same_step_goes_out_at_the_next_pass() -> None:
    transport = RecordingTransport()
    writer = HeadWithBody(transport, asyncio.get_running_loop())
    writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert transport.writes == []
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]
    writer.write(b"5\r\nhello\r\n")
    assert transport.writes[-1] == b"5\r\nhello\r\n"
    await asyncio.sleep(0)
    assert len(transport.writes) == 2  # nothing held, nothing written twice


async def test_closing_writes_a_held_head_first() -> None:
    transport = RecordingTransport()
    writer = HeadWithBody(transport, asyncio.get_running_loop())
    writer.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
    writer.close()
    assert transport.writes == [b"HTTP/1.1 500 Internal Server Error\r\n\r\n"]
    assert transport.closed and writer.is_closing()
    await asyncio.sleep(0)
    assert len(transport.writes) == 1


def read_from_the_loop(connection: Connection, *parts: bytes) -> asyncio.Future[list[list[bytes]]]:
    """Each part read by the protocol as the loop calls it (from its own callback, no task
    running), one pass apart; the writes made during each read, before the loop went on."""
    loop = asyncio.get_running_loop()
    during: list[list[bytes]] = []
    done: asyncio.Future[list[list[bytes]]] = loop.create_future()
    connection.transport.writes.clear()

    def read(index: int) -> None:
        before = len(connection.transport.writes)
        connection.protocol.data_received(parts[index])
        during.append(connection.transport.writes[before:])
        if index + 1 < len(parts):
            loop.call_soon(read, index + 1)
        else:
            done.set_result(during)

    loop.call_soon(read, 0)
    return done


async def test_a_streams_first_event_is_written_while_its_request_is_read(
    connection: Connection,
) -> None:
    """The request's first step runs as its bytes are read, not a loop pass later behind
    whatever else is queued: the head and the first event are out before the read returns."""
    [during] = await read_from_the_loop(connection, rpc_request("SendStreamingMessage"))
    assert len(during) == 1 and during[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert during[0].count(b"data: ") == 1 and b'"task":' in during[0]
    await connection.transport.until(lambda written: written.endswith(b"0\r\n\r\n"))
    assert b"TASK_STATE_COMPLETED" in connection.transport.writes[-1]


async def test_a_request_whose_body_comes_in_later_reads_is_answered_once_it_is_in(
    connection: Connection,
) -> None:
    """Its task began (at its own first step, a pass after the head) and waits for the body."""
    head, body = rpc_request("SendStreamingMessage").split(b"\r\n\r\n", 1)
    half = len(body) // 2
    during = await read_from_the_loop(connection, head + b"\r\n\r\n", body[:half], body[half:])
    assert during[:2] == [[], []]  # nothing to answer before the whole body is in
    await connection.transport.until(lambda written: written.endswith(b"0\r\n\r\n"))
    written = b"".join(connection.transport.writes)
    assert written.startswith(b"HTTP/1.1 200 OK\r\n") and written.count(b'"task":') == 1
    assert b"TASK_STATE_COMPLETED" in written


async def test_pipelined_requests_read_at_once_are_answered_in_order(
    connection: Connection,
) -> None:
    first, second = (rpc_request("SendMessage", request_id=n) for n in (101, 202))
    await read_from_the_loop(connection, first + second)
    await connection.transport.until(lambda written: written.count(b"TASK_STATE_COMPLETED") == 2)
    written = b"".join(connection.transport.writes)
    assert written.count(b"HTTP/1.1 200 OK") == 2
    assert written.index(b'"id":101') < written.index(b'"id":202')
