"""Connections that arrive together are accepted together (app.http.listener), on uvloop as served.

uvloop's own server accepts one connection per pass of the loop: 32 connections made while the
loop was busy took 32 passes to be accepted, and under load each pass is milliseconds long. The
counts here are loop passes (a callback that re-schedules itself once per pass), not times.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
import uvloop

from app.cli import server_config
from app.http import listener
from app.http.listener import BurstListener
from app.http.server import DrainingServer
from app.main import create_app
from app.settings import Settings
from tests.e2e.harness import free_port
from tests.unit.threaded_server import running

pytestmark = pytest.mark.timeout(60)

BURST = 32


def on_uvloop(test: Callable[[], Awaitable[None]]) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(test())


class Passes:
    """Counts the loop's passes: a callback that runs once per pass and schedules itself again."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._loop = loop
        loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._loop.call_soon(self._tick)


class Recording(asyncio.Protocol):
    """Records the pass each connection was made in, and echoes what it receives."""

    made: list[int]
    transports: list[asyncio.Transport]
    passes: Passes
    all_made: asyncio.Event
    one_made: asyncio.Event

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.transports.append(self.transport)
        self.made.append(self.passes.count)
        self.one_made.set()
        if len(self.made) == BURST:
            self.all_made.set()

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def recording(passes: Passes) -> type[Recording]:
    return type(
        "Recording",
        (Recording,),
        {
            "made": [],
            "transports": [],
            "passes": passes,
            "all_made": asyncio.Event(),
            "one_made": asyncio.Event(),
        },
    )


async def served_by_listener(protocol: type[Recording]) -> tuple[BurstListener, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol, "127.0.0.1", 0, backlog=128)
    port = server.sockets[0].getsockname()[1]
    [taken] = BurstListener.take_over(server, protocol, loop, backlog=128)
    await server.wait_closed()  # uvloop's server is gone: only the listener accepts
    return taken, port


def connect_burst(port: int) -> list[socket.socket]:
    """BURST connections, made while the loop is busy (this blocks it): the kernel completes
    them and they wait in the listening socket's backlog, as under load."""
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(BURST)]


def test_a_burst_of_connections_is_accepted_within_a_few_passes() -> None:
    async def test() -> None:
        passes = Passes(asyncio.get_running_loop())
        protocol = recording(passes)
        taken, port = await served_by_listener(protocol)
        clients = connect_burst(port)
        before = passes.count
        await asyncio.wait_for(protocol.all_made.wait(), 10)
        # Accepted in the pass that polled the socket, connected in the next ones (uvloop's
        # connect_accepted_socket is a coroutine): not one pass per connection.
        assert max(protocol.made) - before <= 3, protocol.made
        assert len(set(protocol.made)) <= 2
        for client in clients:
            client.sendall(b"ping")
        # Each is served by its own protocol (read off the loop's thread, which echoes).
        replies = await asyncio.to_thread(lambda: [client.recv(4) for client in clients])
        assert replies == [b"ping"] * BURST
        for client in clients:
            client.close()
        taken.close()

    on_uvloop(test)


def test_accepted_connections_have_no_nagle_delay() -> None:
    async def test() -> None:
        passes = Passes(asyncio.get_running_loop())
        protocol = recording(passes)
        taken, port = await served_by_listener(protocol)
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        await asyncio.wait_for(protocol.one_made.wait(), 10)
        sock = protocol.transports[0].get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        client.close()
        taken.close()

    on_uvloop(test)


def test_a_closed_listener_refuses_connections() -> None:
    async def test() -> None:
        protocol = recording(Passes(asyncio.get_running_loop()))
        taken, port = await served_by_listener(protocol)
        taken.close()
        taken.close()  # twice is harmless (uvicorn's shutdown may close it again)
        await taken.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)

    on_uvloop(test)


class OutOfDescriptorsOnce(socket.socket):
    """A listening socket whose first accept() fails as a process out of descriptors does."""

    calls = 0

    def accept(self) -> tuple[socket.socket, object]:
        OutOfDescriptorsOnce.calls += 1
        if OutOfDescriptorsOnce.calls == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


def test_out_of_descriptors_pauses_accepting_then_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(listener, "RETRY_AFTER_EMFILE_S", 0.2)

    async def test() -> None:
        loop = asyncio.get_running_loop()
        passes = Passes(loop)
        protocol = recording(passes)
        sock = OutOfDescriptorsOnce(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        taken = BurstListener(sock, protocol, loop, backlog=16)
        client = socket.create_connection(sock.getsockname(), timeout=5)
        await asyncio.sleep(0.05)
        # The failed accept stopped the polling: no accept() again and again on a socket still
        # readable, for the whole pause ...
        assert OutOfDescriptorsOnce.calls == 1 and not protocol.made
        # ... and accepting goes on after the pause, with the connection that waited.
        for _ in range(100):
            if protocol.made:
                break
            await asyncio.sleep(0.02)
        assert len(protocol.made) == 1
        assert "cannot accept a connection" in caplog.text
        client.close()
        taken.close()

    with caplog.at_level(logging.ERROR, logger="app.http.listener"):
        on_uvloop(test)


@pytest.fixture
def served() -> Iterator[tuple[DrainingServer, int]]:
    """The server as `a2a-server` runs it: DrainingServer on uvicorn's default loop (uvloop)."""
    settings = Settings(a2a_port=free_port(), log_level="warning")
    app = create_app(settings)
    with running(DrainingServer(server_config(app, settings), drain=app.state.drain)) as server:
        assert isinstance(server, DrainingServer)
        yield server, settings.a2a_port


def test_the_server_accepts_a_burst_of_connections_within_a_few_passes(
    served: tuple[DrainingServer, int],
) -> None:
    """On the wire, against the server as shipped: its loop is held busy while BURST clients
    connect and send a request each; once free, it has every connection within a few passes
    (uvicorn's own server on uvloop: one more connection per pass) and answers every request."""
    server, port = served
    loop = server._loop
    assert loop is not None
    connections: list[int] = []  # the server's open connections, counted once per pass
    busy = threading.Event()
    release = threading.Event()

    def hold_the_loop() -> None:
        busy.set()
        release.wait(10)

    def count() -> None:
        connections.append(len(server.server_state.connections))
        if len(connections) < 40:
            loop.call_soon(count)

    loop.call_soon_threadsafe(hold_the_loop)
    loop.call_soon_threadsafe(count)  # first counted in the pass that held the loop
    assert busy.wait(10)
    clients = connect_burst(port)
    for client in clients:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    release.set()
    for client in clients:
        reply = client.recv(4096)
        assert reply.startswith(b"HTTP/1.1 200 ") and b'{"status":"ok"}' in reply
        client.close()
    deadline = time.monotonic() + 10
    while len(connections) < 40:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert connections[0] == 0
    all_in = next((n for n, open_now in enumerate(connections) if open_now == BURST), None)
    assert all_in is not None and all_in <= 4, connections


def test_the_server_accepts_with_burst_listeners_and_stops_on_exit(
    served: tuple[DrainingServer, int],
) -> None:
    server, port = served
    assert server.servers and all(isinstance(s, BurstListener) for s in server.servers)
    clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(8)]
    for client in clients:
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    for client in clients:
        reply = client.recv(4096)
        assert reply.startswith(b"HTTP/1.1 200 ") and b'{"status":"ok"}' in reply
        client.close()
    server.should_exit = True
    deadline = time.monotonic() + 15
    while True:  # once the server is down, its port refuses
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            break
        assert time.monotonic() < deadline, "the port still accepts after shutdown"
        time.sleep(0.1)
