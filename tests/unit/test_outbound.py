"""The SSRF guard for outgoing requests.

Only loopback is ever contacted: the forbidden ranges are checked with literal IP addresses (no
DNS) and must be refused before any connection is attempted; the suite-wide network guard would
turn an attempted connection off this machine into a different error (NetworkBlockedError), so
`DestinationForbidden` proves that none was made. Names go through a fake resolver.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpcore
import httpx
import pytest
from pydantic import ValidationError

from agent.outbound import (
    DestinationForbidden,
    GuardedNetworkBackend,
    OutboundPolicy,
    ResponseTooLarge,
    forbidden_reason,
    outbound_client,
)
from app.settings import Settings

LOOPBACK_ONLY = OutboundPolicy.parse(["127.0.0.1/32"])
LIMIT = 64 * 1024


class LoopbackServer:
    """A small HTTP server on 127.0.0.1 recording the Host header of each request."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.hosts.append(self.headers.get("Host", ""))
                url = urlsplit(self.path)
                if url.path == "/hello":
                    self._reply(200, b"hello")
                elif url.path == "/big":
                    self._reply(200, b"x" * (LIMIT + 1))
                elif url.path == "/big-unannounced":
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for _ in range(10):
                        self.wfile.write(b"y" * (LIMIT // 4))
                    self.close_connection = True
                elif url.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", parse_qs(url.query)["to"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif url.path == "/slow":
                    time.sleep(3)
                    self._reply(200, b"late")
                else:
                    self._reply(404, b"")

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A client that stops reading a large body breaks the pipe: expected, not worth a trace.
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh_log(server: LoopbackServer) -> None:
    server.hosts.clear()


class FakeResolver:
    """Answers from a script, one answer per call (the last one repeats); records the calls."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


# --- which addresses are refused -----------------------------------------------------------------

FORBIDDEN = {
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "0.0.0.0": "unspecified",
    "0.1.2.3": "private",
    "10.0.0.1": "private",
    "172.16.5.4": "private",
    "172.31.255.255": "private",
    "192.168.1.1": "private",
    "169.254.169.254": "link-local",  # cloud metadata
    "100.64.0.1": "shared (CGNAT)",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "private",  # reserved 240/4 (Python counts it private)
    "255.255.255.255": "private",
    "192.0.2.10": "private",  # TEST-NET
    "198.18.0.1": "private",  # benchmarking
    "::1": "loopback",
    "::": "unspecified",
    "fe80::1": "link-local",
    "fe80::1%2": "scoped (link-local)",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "ff02::1": "multicast",
    "fec0::1": "site-local",
    "2001:db8::1": "private",
    "::ffff:127.0.0.1": "loopback, embedded in IPv6",
    "::ffff:10.0.0.1": "private, embedded in IPv6",
    "::ffff:169.254.169.254": "link-local, embedded in IPv6",
    "64:ff9b::a9fe:a9fe": "link-local, embedded in IPv6",  # NAT64 of 169.254.169.254
    "2002:a00:1::": "private, embedded in IPv6",  # 6to4 of 10.0.0.1
    "2002:7f00:1::": "loopback, embedded in IPv6",  # 6to4 of 127.0.0.1
    "::a00:1": "reserved",  # IPv4-compatible (deprecated)
}
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "2002:808:808::",
]


@pytest.mark.parametrize(("address", "reason"), FORBIDDEN.items())
def test_forbidden_ranges(address: str, reason: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_permitted(address: str) -> None:
    """Checked, never contacted."""
    assert forbidden_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", [a for a in FORBIDDEN if "%" not in a])
async def test_requests_to_forbidden_literals_are_refused_before_connecting(address: str) -> None:
    host = f"[{address}]" if ":" in address else address
    async with outbound_client(OutboundPolicy()) as client:
        with pytest.raises(DestinationForbidden, match="not allowed") as caught:
            await client.get(f"http://{host}:8080/")
    assert caught.value.request.url.host == address


async def test_loopback_is_refused_without_the_allow_list(server: LoopbackServer) -> None:
    async with outbound_client(OutboundPolicy()) as client:
        with pytest.raises(DestinationForbidden) as caught:
            await client.get(server.url("/hello"))
    assert caught.value.reasons == ("127.0.0.1 is loopback",)
    assert server.hosts == []


async def test_the_allow_list_permits_what_it_lists_only(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY) as client:
        response = await client.get(server.url("/hello"))
        assert (response.status_code, response.text) == (200, "hello")
        with pytest.raises(DestinationForbidden):
            await client.get(server.url("/hello", host="127.0.0.2"))
        with pytest.raises(DestinationForbidden):
            await client.get("http://10.0.0.1:8080/")
    assert server.hosts == [f"127.0.0.1:{server.port}"]


def test_allow_list_entries() -> None:
    policy = OutboundPolicy.parse(
        ["10.0.0.0/8", " ::1 ", "agents.internal", "*.svc.cluster.local", ""]
    )
    assert policy.refusal("x", ipaddress.ip_address("10.2.3.4")) is None
    assert policy.refusal("x", ipaddress.ip_address("::ffff:10.2.3.4")) is None  # mapped form too
    assert policy.refusal("x", ipaddress.ip_address("::1")) is None
    assert policy.refusal("x", ipaddress.ip_address("192.168.0.1")) == "private"
    assert policy.refusal("agents.internal", ipaddress.ip_address("192.168.0.1")) is None
    assert policy.refusal("a2a.ns.svc.cluster.local", ipaddress.ip_address("172.20.0.9")) is None
    assert (
        policy.refusal("svc.cluster.local.evil.test", ipaddress.ip_address("172.20.0.9"))
        == "private"
    )
    assert policy.refusal("evil.test", ipaddress.ip_address("127.0.0.1")) == "loopback"


@pytest.mark.parametrize(
    "entry", ["http://10.0.0.1", "10.0.0.0/33", "a b", "*.", "under_score.example"]
)
def test_bad_allow_list_entries_are_refused_by_settings(entry: str) -> None:
    with pytest.raises(ValidationError, match="outbound allow-list entry"):
        Settings(a2a_outbound_allow=entry)


def test_settings_split_the_allow_list() -> None:
    settings = Settings(a2a_outbound_allow="127.0.0.1/32, agents.internal")
    assert settings.a2a_outbound_allow == ["127.0.0.1/32", "agents.internal"]


# --- names: resolved once, connected by address ----------------------------------------------------


class RecordingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.hosts: list[str] = []

    async def connect_tcp(self, host: str, port: int, **kwargs: Any) -> httpcore.AsyncNetworkStream:
        self.hosts.append(host)
        return await self.inner.connect_tcp(host, port, **kwargs)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def test_the_connection_goes_to_the_checked_address(server: LoopbackServer) -> None:
    """A name that answers 127.0.0.1 to the check and 10.0.0.1 afterwards (DNS rebinding) is
    resolved once and connected by the address that was checked."""
    resolver = FakeResolver(["127.0.0.1"], ["10.0.0.1"])
    recording = RecordingBackend()
    backend = GuardedNetworkBackend(LOOPBACK_ONLY, resolver=resolver, inner=recording)
    async with httpcore.AsyncConnectionPool(network_backend=backend) as pool:
        for _ in range(2):
            response = await pool.request("GET", server.url("/hello", host="rebind.test"))
            assert response.status == 200
    assert resolver.calls == ["rebind.test"]  # the kept-alive connection was reused
    assert recording.hosts == ["127.0.0.1"]
    assert server.hosts == [f"rebind.test:{server.port}"] * 2


async def test_a_name_resolving_to_forbidden_addresses_is_refused(server: LoopbackServer) -> None:
    resolver = FakeResolver(["10.0.0.7", "169.254.169.254", "::1"])
    async with outbound_client(LOOPBACK_ONLY, resolver=resolver) as client:
        with pytest.raises(DestinationForbidden) as caught:
            await client.get(f"http://internal.example:{server.port}/hello")
    assert caught.value.reasons == (
        "10.0.0.7 is private",
        "169.254.169.254 is link-local",
        "::1 is loopback",
    )
    assert "10.0.0.7" not in str(caught.value)  # a client is not told the internal addresses


async def test_a_name_with_mixed_answers_connects_to_a_permitted_one(
    server: LoopbackServer,
) -> None:
    resolver = FakeResolver(["10.0.0.7", "127.0.0.1"])
    async with outbound_client(LOOPBACK_ONLY, resolver=resolver) as client:
        response = await client.get(f"http://mixed.example:{server.port}/hello")
    assert response.text == "hello"


async def test_an_allowed_name_may_resolve_to_a_private_address(server: LoopbackServer) -> None:
    policy = OutboundPolicy.parse(["*.cluster.test"])
    resolver = FakeResolver(["127.0.0.1"])
    async with outbound_client(policy, resolver=resolver) as client:
        assert (await client.get(f"http://agent.cluster.test:{server.port}/hello")).text == "hello"
        with pytest.raises(DestinationForbidden):
            await client.get(f"http://other.test:{server.port}/hello")


async def test_unix_sockets_and_other_schemes_are_refused() -> None:
    backend = GuardedNetworkBackend(LOOPBACK_ONLY)
    with pytest.raises(DestinationForbidden):
        await backend.connect_unix_socket("/var/run/docker.sock")
    async with outbound_client(LOOPBACK_ONLY) as client:
        with pytest.raises((DestinationForbidden, httpx.UnsupportedProtocol)):
            await client.get("file:///etc/passwd")


# --- redirects, sizes, time ---------------------------------------------------------------------


async def test_redirects_are_not_followed_by_default(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY) as client:
        response = await client.get(server.url("/redirect"), params={"to": "http://10.0.0.1/"})
    assert response.status_code == 302


@pytest.mark.parametrize(
    "target",
    [
        "http://10.0.0.1:8080/",
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.2:9/",
        "http://[::ffff:127.0.0.2]:9/",
    ],
)
async def test_a_followed_redirect_to_a_refused_host_is_refused(
    server: LoopbackServer, target: str
) -> None:
    async with outbound_client(LOOPBACK_ONLY, follow_redirects=True) as client:
        with pytest.raises(DestinationForbidden):
            await client.get(server.url("/redirect"), params={"to": target})


async def test_a_followed_redirect_to_a_permitted_host_works(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY, follow_redirects=True) as client:
        response = await client.get(server.url("/redirect"), params={"to": server.url("/hello")})
    assert response.text == "hello"


async def test_a_response_declared_too_large_is_refused_before_its_body(
    server: LoopbackServer,
) -> None:
    async with outbound_client(LOOPBACK_ONLY, max_response_bytes=LIMIT) as client:
        with pytest.raises(ResponseTooLarge, match="declares"):
            await client.get(server.url("/big"))
        # The client still works afterwards.
        assert (await client.get(server.url("/hello"))).text == "hello"


async def test_an_unannounced_large_response_stops_at_the_limit(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY, max_response_bytes=LIMIT) as client:
        with pytest.raises(ResponseTooLarge, match="larger than"):
            await client.get(server.url("/big-unannounced"))
        async with client.stream("GET", server.url("/big-unannounced")) as response:
            received = 0
            with pytest.raises(ResponseTooLarge):
                async for chunk in response.aiter_raw():
                    received += len(chunk)
            assert received <= LIMIT


async def test_a_response_within_the_limit_is_read_whole(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY, max_response_bytes=LIMIT + 1) as client:
        assert len((await client.get(server.url("/big"))).content) == LIMIT + 1


async def test_a_slow_server_times_out(server: LoopbackServer) -> None:
    async with outbound_client(LOOPBACK_ONLY, timeout_s=0.3) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(server.url("/slow"))
