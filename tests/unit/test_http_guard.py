"""The HTTP edge guard: Host allow-list, Origin check, CORS, body size limit.

Most rules are driven through httpx's ASGITransport; the body limit is also checked on a real
uvicorn with raw sockets, where "413 before the body is read whole" can be observed: the answer
arrives while the client has not finished sending.
"""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message

from app.http.guard import HostPolicy, HttpGuard, default_allowed_hosts, guard, host_name
from app.settings import Settings

LIMIT = 1024


class Recorder:
    """The app behind the guard: records each request it got and the body bytes it read."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.bytes_read: list[int] = []

    def app(self) -> Starlette:
        async def echo(request: Request) -> JSONResponse:
            self.calls.append(request.url.path)
            size = 0
            async for chunk in request.stream():
                size += len(chunk)
                self.bytes_read.append(size)
            return JSONResponse({"received": size})

        async def ok(request: Request) -> JSONResponse:
            self.calls.append(request.url.path)
            return JSONResponse({"ok": True})

        return Starlette(
            routes=[
                Route("/echo", echo, methods=["POST"]),
                Route("/ok", ok, methods=["GET", "POST"]),
            ]
        )


def client_for(
    settings: Settings, recorder: Recorder, host: str = "127.0.0.1:8000"
) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=guard(recorder.app(), settings))
    return httpx.AsyncClient(transport=transport, base_url=f"http://{host}")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def assert_error(response: httpx.Response, status: int, reason: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == status
    assert error["details"][0]["reason"] == reason
    return error


# --- Host --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("Example.COM:8000", "example.com"),
        ("[::1]:8000", "::1"),
        ("::1", "::1"),
        ("a.example.", "a.example"),
        ("127.0.0.1:80", "127.0.0.1"),
    ],
)
def test_host_names(header: str, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize(
    "host", ["localhost:8000", "LOCALHOST", "127.0.0.1:8000", "[::1]:8000", "10.1.2.3"]
)
async def test_loopback_defaults_serve_loopback_names_and_addresses(
    recorder: Recorder, host: str
) -> None:
    async with client_for(Settings(), recorder) as client:
        response = await client.get("/ok", headers={"Host": host})
    assert response.status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "",
        "x@localhost",
    ],
)
async def test_a_rebinding_host_gets_421_before_the_app(recorder: Recorder, host: str) -> None:
    async with client_for(Settings(), recorder) as client:
        response = await client.post("/echo", content=b"{}", headers={"Host": host})
    error = assert_error(response, 421, "HOST_NOT_ALLOWED")
    assert error["status"] == "INVALID_ARGUMENT"
    assert recorder.calls == []


async def test_a_request_without_host_is_refused(recorder: Recorder) -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/ok", "headers": [], "query_string": b""}
    await guard(recorder.app(), Settings())(scope, receive, send)
    assert sent[0]["status"] == 421
    assert recorder.calls == []


def test_default_hosts_follow_the_bind_address_and_public_url() -> None:
    assert default_allowed_hosts(Settings()) == ["localhost", "ip6-localhost", "ip6-loopback"]
    public = Settings(a2a_host="0.0.0.0", a2a_public_url="https://agent.example.com/a2a")
    assert default_allowed_hosts(public) == ["agent.example.com"]
    local_with_public = Settings(a2a_public_url="https://tunnel.example.net")
    assert "tunnel.example.net" in default_allowed_hosts(local_with_public)
    # On the network with no name configured: any name (the card names each request's Host).
    assert default_allowed_hosts(Settings(a2a_host="0.0.0.0")) == ["*"]
    explicit = Settings(a2a_host="0.0.0.0", a2a_allowed_hosts="a.example, *.svc.cluster.local")
    assert default_allowed_hosts(explicit) == ["a.example", "*.svc.cluster.local"]


async def test_a_public_server_serves_its_public_name_only(recorder: Recorder) -> None:
    settings = Settings(a2a_host="0.0.0.0", a2a_public_url="https://agent.example.com")
    async with client_for(settings, recorder) as client:
        assert (await client.get("/ok", headers={"Host": "agent.example.com"})).status_code == 200
        assert (
            await client.get("/ok", headers={"Host": "10.0.3.7:8000"})
        ).status_code == 200  # probes
        assert (await client.get("/ok", headers={"Host": "localhost:8000"})).status_code == 421
        assert (await client.get("/ok", headers={"Host": "other.example.com"})).status_code == 421


def test_host_patterns() -> None:
    policy = HostPolicy(["api.example.com", "*.svc.cluster.local", "Mixed.Example:443"])
    assert policy.allows("api.example.com:443")
    assert policy.allows("agent.ns.svc.cluster.local")
    assert policy.allows("mixed.example")
    assert not policy.allows("svc.cluster.local")  # the wildcard is for subdomains only
    assert not policy.allows("evilsvc.cluster.local")
    assert not policy.allows("api.example.com.evil.test")
    assert not policy.allows(None)
    assert HostPolicy(["*"]).allows("anything.example")


# --- Origin and CORS ---------------------------------------------------------------------------


async def test_requests_without_origin_or_from_the_same_origin_pass(recorder: Recorder) -> None:
    async with client_for(Settings(), recorder, host="localhost:8000") as client:
        assert (await client.post("/ok")).status_code == 200
        same = await client.post("/ok", headers={"Origin": "http://localhost:8000"})
        assert same.status_code == 200
        assert "access-control-allow-origin" not in same.headers


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://localhost:3000", "null", "file://"]
)
async def test_a_foreign_origin_is_refused_without_cors(recorder: Recorder, origin: str) -> None:
    async with client_for(Settings(), recorder, host="localhost:8000") as client:
        response = await client.post(
            "/echo", content=b"x", headers={"Origin": origin, "Content-Type": "text/plain"}
        )
    assert_error(response, 403, "ORIGIN_NOT_ALLOWED")
    assert "access-control-allow-origin" not in response.headers
    assert recorder.calls == []


async def test_a_listed_origin_gets_cors_headers(recorder: Recorder) -> None:
    settings = Settings(a2a_cors_origins="https://console.example.com/, https://other.example.com")
    async with client_for(settings, recorder) as client:
        response = await client.post("/ok", headers={"Origin": "https://console.example.com"})
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://console.example.com"
        assert "WWW-Authenticate" in response.headers["access-control-expose-headers"]
        preflight = await client.options(
            "/ok",
            headers={
                "Origin": "https://console.example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, a2a-version",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://console.example.com"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in preflight.headers
        unlisted = await client.options(
            "/ok",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert_error(unlisted, 403, "ORIGIN_NOT_ALLOWED")


async def test_without_cors_origins_a_preflight_gets_no_cors_headers(recorder: Recorder) -> None:
    async with client_for(Settings(), recorder, host="localhost:8000") as client:
        preflight = await client.options(
            "/ok",
            headers={
                "Origin": "https://console.example.com",
                "Access-Control-Request-Method": "POST",
            },
        )
    assert preflight.status_code == 403
    assert not any(name.startswith("access-control-") for name in preflight.headers)


# --- body size ---------------------------------------------------------------------------------


async def test_a_body_up_to_the_limit_passes(recorder: Recorder) -> None:
    async with client_for(Settings(a2a_max_body_bytes=LIMIT), recorder) as client:
        response = await client.post("/echo", content=b"x" * LIMIT)
    assert response.json() == {"received": LIMIT}


async def test_a_declared_length_over_the_limit_gets_413_before_the_app(recorder: Recorder) -> None:
    async with client_for(Settings(a2a_max_body_bytes=LIMIT), recorder) as client:
        response = await client.post("/echo", content=b"x" * (LIMIT + 1))
    error = assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert "1024" in error["message"]
    assert response.headers["connection"] == "close"
    assert recorder.calls == []


async def test_a_streamed_body_is_cut_off_at_the_limit(recorder: Recorder) -> None:
    produced: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for index in range(100):
            produced.append(index)
            yield b"y" * 400

    async with client_for(Settings(a2a_max_body_bytes=LIMIT), recorder) as client:
        response = await client.post("/echo", content=chunks())
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")
    assert len(produced) <= 4  # stopped at the third chunk (1200 bytes), not after 40 000 bytes
    assert max(recorder.bytes_read, default=0) <= LIMIT  # the app never saw more than the limit


@pytest.mark.parametrize(
    "length", [b"abc", b"-5", b"1e9", b"", b"\xb2"]
)  # \xb2: latin-1 superscript two
async def test_a_malformed_content_length_is_a_400(recorder: Recorder, length: bytes) -> None:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/echo",
        "headers": [(b"host", b"localhost"), (b"content-length", length)],
        "query_string": b"",
    }
    await HttpGuard(recorder.app(), max_body_bytes=LIMIT, allowed_hosts=["localhost"])(
        scope, receive, send
    )
    assert sent[0]["status"] == 400
    assert recorder.calls == []


async def test_an_app_that_catches_the_error_cannot_answer_twice() -> None:
    """A binding that catches every error and renders its own answer (as ours do) is muted."""
    sent: list[Message] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            while (await receive()).get("more_body"):
                pass
        except Exception:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"caught"})

    chunks = iter([b"z" * 800, b"z" * 800, b"z" * 800])

    async def receive() -> Message:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"host", b"localhost")],
        "query_string": b"",
    }
    await HttpGuard(app, max_body_bytes=LIMIT, allowed_hosts=["localhost"])(scope, receive, send)
    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 413


# --- on a real server, with raw sockets ----------------------------------------------------------


BODY_TIMEOUT_S = 1.0


class GuardedServer:
    def __init__(self, recorder: Recorder) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        app = guard(
            recorder.app(), Settings(a2a_max_body_bytes=LIMIT, a2a_body_timeout_s=BODY_TIMEOUT_S)
        )
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", http="h11"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> GuardedServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()

    def connect(self) -> socket.socket:
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        return conn


@pytest.fixture(scope="module")
def server_recorder() -> Recorder:
    return Recorder()


@pytest.fixture(scope="module")
def server(server_recorder: Recorder) -> Iterator[GuardedServer]:
    with GuardedServer(server_recorder) as running:
        yield running


def read_response(conn: socket.socket) -> tuple[int, bytes]:
    """Read until the server closes the connection (it must, after a 413)."""
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_a_huge_declared_length_is_answered_without_sending_the_body(server: GuardedServer) -> None:
    with server.connect() as conn:
        conn.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 50000000000\r\n\r\n"
        )
        status, body = read_response(conn)  # not a byte of the 50 GB was sent
    assert status == 413
    assert b"PAYLOAD_TOO_LARGE" in body


def test_a_chunked_body_gets_413_while_the_client_is_still_sending(
    server: GuardedServer, server_recorder: Recorder
) -> None:
    server_recorder.bytes_read.clear()
    with server.connect() as conn:
        conn.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(3):
            # Stop sending once the answer is there: bytes sent after the server closed would
            # make its kernel reset the connection, and the reset can overtake the answer.
            if select.select([conn], [], [], 0.2)[0]:
                break
            conn.sendall(b"3e8\r\n" + b"a" * 1000 + b"\r\n")
        # The body is not finished (no last chunk): the answer must come anyway.
        status, body = read_response(conn)
    assert status == 413
    assert b"PAYLOAD_TOO_LARGE" in body
    assert max(server_recorder.bytes_read, default=0) <= LIMIT


def test_a_chunked_body_under_the_limit_is_served(server: GuardedServer) -> None:
    with server.connect() as conn:
        conn.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            b"1f4\r\n" + b"b" * 500 + b"\r\n0\r\n\r\n"
        )
        status, body = read_response(conn)
    assert status == 200
    assert body == b'{"received":500}'


def test_a_body_that_stops_arriving_gets_408_and_the_connection_closed(
    server: GuardedServer,
) -> None:
    """Headers, a tenth of the body, then nothing: the slow-body attack that holds a connection
    (and a concurrency place) for as long as the client likes."""
    with server.connect() as conn:
        conn.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b"{" * 10
        )
        status, body = read_response(conn)  # the server answers and closes: recv ends
    assert status == 408
    assert b"REQUEST_TIMEOUT" in body


def test_a_slow_but_steady_body_is_served(server: GuardedServer) -> None:
    with server.connect() as conn:
        conn.sendall(
            b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: 8\r\n\r\n"
        )
        for part in (b'{"a"', b":1}", b" "):
            time.sleep(BODY_TIMEOUT_S / 3)
            conn.sendall(part)
        status, _ = read_response(conn)
    assert status == 200


async def test_after_the_body_a_wait_for_the_disconnect_has_no_deadline() -> None:
    """A stream reads its body, then waits on `receive` for the client to go away for as long
    as the stream lasts: the body deadline must not cut that wait (or every stream)."""
    timeout_s = 0.05
    sent: list[Message] = []
    got: list[Message] = []
    gone = asyncio.Event()
    messages = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

    async def receive() -> Message:
        for message in messages:
            return message
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        got.append(await receive())  # the body
        got.append(await receive())  # then, the client's going away

    async def leave_later() -> None:
        await asyncio.sleep(4 * timeout_s)
        gone.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"host", b"localhost")],
        "query_string": b"",
    }
    guard_app = HttpGuard(
        app, max_body_bytes=LIMIT, allowed_hosts=["localhost"], body_timeout_s=timeout_s
    )
    await asyncio.gather(guard_app(scope, receive, send), leave_later())
    assert [message["type"] for message in got] == ["http.request", "http.disconnect"]
    assert sent == [], "the guard answered a request whose body had arrived whole"
