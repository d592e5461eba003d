"""Clients that go away mid-body, and malformed requests, cost one DEBUG line each: never an
ERROR or a traceback (20,000 half-open connections must not become a log flood).

The server runs at LOG_LEVEL=debug so that the DEBUG line proves each request was handled before
the log is checked for what must not be there.
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

pytestmark = pytest.mark.timeout(60)

SERVER_ENV = {"LOG_LEVEL": "debug"}
HALF_OPEN = 20
WENT_AWAY = "the client went away before its request arrived"


def half_open(url: str, path: str) -> None:
    """Announce 1000 bytes of body, send 10, and hang up."""
    address = urlparse(url)
    with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
            + b'{"jsonrpc"'
        )


def wait_for_lines(server, start: int, text: str, count: int, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while True:
        written = server.log_since(start)
        if written.count(text) >= count or time.monotonic() > deadline:
            return written
        time.sleep(0.1)


@pytest.mark.parametrize("path", ["/", "/message:send"])
def test_a_client_gone_mid_body_is_one_debug_line(server, path):
    start = server.log_mark()
    for _ in range(HALF_OPEN):
        half_open(server.url, path)
    written = wait_for_lines(server, start, WENT_AWAY, HALF_OPEN)
    lines = [line for line in written.splitlines() if WENT_AWAY in line]
    assert len(lines) == HALF_OPEN, written[-4000:]
    assert all(" DEBUG " in line for line in lines), lines
    assert "Traceback" not in written, written[-4000:]
    assert " ERROR " not in written, written[-4000:]
    assert httpx.get(server.url + "/healthz", trust_env=False, timeout=10).status_code == 200


def test_a_malformed_request_is_one_debug_line(server):
    start = server.log_mark()
    bodies = [b"[" * 60_000, b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": NaN}']
    with httpx.Client(base_url=server.url, trust_env=False, timeout=10) as http:
        for body in bodies:
            response = http.post("/", content=body, headers={"Content-Type": "application/json"})
            assert response.json()["error"]["code"] == -32700, response.text
        rest = http.post("/message:send", content=b'{"x": "\\ud800"}')
        assert rest.status_code == 400, rest.text
        http.get("/healthz")
    written = wait_for_lines(server, start, "refused", len(bodies) + 1)
    refused = [line for line in written.splitlines() if "refused" in line]
    assert len(refused) == len(bodies) + 1, written[-4000:]
    assert all(" DEBUG " in line for line in refused), refused
    assert "Traceback" not in written, written[-4000:]
    assert " ERROR " not in written, written[-4000:]


def test_a_request_that_is_not_http_is_one_debug_line(server):
    start = server.log_mark()
    address = urlparse(server.url)
    for _ in range(HALF_OPEN):
        with socket.create_connection((address.hostname, address.port), timeout=5) as sock:
            sock.sendall(b"GARBAGE \x00\x01 NOT HTTP\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 400 "), "uvicorn still answers 400"
    written = wait_for_lines(server, start, "Invalid HTTP request received.", HALF_OPEN)
    lines = [line for line in written.splitlines() if "Invalid HTTP request received." in line]
    assert len(lines) == HALF_OPEN, written[-4000:]
    assert all("DEBUG" in line and "WARNING" not in line for line in lines), lines
