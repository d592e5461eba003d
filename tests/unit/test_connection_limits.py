"""Connection limits on real sockets: slow headers are cut off, oversized headers get 400, and
beyond A2A_MAX_CONNECTIONS the server answers 503 instead of piling connections up. With both
HTTP parsers: httptools (served when installed, as it is in the image), with and without
uvicorn's private request-task hook (app.http.connections' fallback), and h11 (the fallback)."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import pytest
import uvicorn

from app.cli import server_config
from app.http import connections
from app.main import create_app
from app.settings import Settings
from tests.e2e.harness import free_port
from tests.unit.threaded_server import running

pytestmark = pytest.mark.timeout(60)

HEADER_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 3
KEEP_ALIVE_S = 1  # the default is 5: the idle-connection test waits for it


@pytest.fixture(scope="module", params=["httptools", "httptools-public", "h11"])
def port(request: pytest.FixtureRequest) -> Iterator[int]:
    settings = Settings(
        a2a_port=free_port(),
        a2a_header_timeout_s=HEADER_TIMEOUT_S,
        a2a_max_connections=MAX_CONNECTIONS,
        a2a_max_header_bytes=4096,
        a2a_keep_alive_timeout_s=KEEP_ALIVE_S,
        log_level="warning",
    )
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "h11":
            patch.setattr(connections, "HttpToolsProtocol", None)
        if request.param == "httptools-public":
            patch.setattr(connections, "_REQUEST_TASKS", False)
        config = server_config(create_app(settings), settings)
    expected = {
        "httptools": "RequestTaskProtocol",
        "httptools-public": "FastHeaderDeadlineProtocol",
        "h11": "HeaderDeadlineProtocol",
    }
    assert config.http.__name__ == expected[request.param]  # type: ignore[union-attr]
    with running(uvicorn.Server(config)):
        yield settings.a2a_port


def _connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    return connection


def _assert_closed_within(connection: socket.socket, seconds: float) -> None:
    """Fail unless the server closes the connection (recv gives b"") within `seconds`."""
    connection.settimeout(seconds)
    try:
        while connection.recv(4096):
            pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {seconds} s")
    except ConnectionResetError:
        pass


def _closed_by_server(connection: socket.socket) -> bool:
    """Whether the server has closed the connection (without blocking for long)."""
    if not select.select([connection], [], [], 0.2)[0]:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def _status(connection: socket.socket, request: bytes) -> int:
    connection.sendall(request)
    head = connection.recv(4096)
    return int(head.split(b" ", 2)[1])


def test_half_a_request_line_is_closed_within_the_header_timeout(port: int) -> None:
    with _connect(port) as connection:
        connection.sendall(b"GET /heal")
        _assert_closed_within(connection, 10 * HEADER_TIMEOUT_S)


def test_headers_sent_byte_by_byte_too_slowly_are_closed(port: int) -> None:
    """A byte every 0.2 s keeps a connection busy, never idle: the deadline is on the whole."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
    with _connect(port) as connection:
        closed = False
        for byte in request[: int(10 * HEADER_TIMEOUT_S / 0.2)]:
            try:
                connection.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            if _closed_by_server(connection):
                closed = True
                break
        assert closed, "the server kept a slow-header connection open"


def test_an_idle_connection_is_answered_then_closed(port: int) -> None:
    with _connect(port) as connection:
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        assert _status(connection, request) == 200
        _assert_closed_within(connection, KEEP_ALIVE_S + 10)


def test_oversized_headers_get_400(port: int) -> None:
    with _connect(port) as connection:
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 8000)
        time.sleep(0.3)  # incomplete headers beyond 4096 bytes: refused without waiting for more
        assert _status(connection, b"\r\n\r\n") == 400


def test_beyond_the_connection_cap_the_server_answers_503(port: int) -> None:
    # Connections busy with a request (headers in, body still to come) hold their places.
    held = [_connect(port) for _ in range(MAX_CONNECTIONS - 1)]
    try:
        for connection in held:
            connection.sendall(
                b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
        time.sleep(0.3)
        with _connect(port) as extra:
            request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            assert _status(extra, request) == 503
    finally:
        for connection in held:
            connection.close()
    deadline = time.monotonic() + 10
    while True:  # the places are free again
        with _connect(port) as again:
            status = _status(again, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == 200
