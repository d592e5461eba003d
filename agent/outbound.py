"""The guard for requests to URLs a client chose (today: push webhooks), against SSRF.

A URL chosen by a client must not make the server reach what only the server can reach: its own
loopback, the cluster's private network, a cloud metadata endpoint (169.254.169.254). URLs the
operator configured (remote agents, MCP servers, the JWKS) do not pass through the guard: they
may be on the private network on purpose. `outbound_client` returns an httpx client whose every
connection is checked where it is made:

- the host is resolved once (an IP literal is taken as it is: no DNS), and the connection goes to
  the first address the policy permits, by address: the name cannot resolve differently between
  the check and the connect (DNS rebinding). TLS still verifies the certificate for the name;
- refused: loopback, private, shared (CGNAT), link-local, multicast, reserved, unspecified, in
  IPv4 and IPv6, and IPv4 embedded in IPv6 (mapped `::ffff:a.b.c.d`, 6to4, NAT64); unless
  `OutboundPolicy` allows the network (CIDR) or the host name (A2A_OUTBOUND_ALLOW);
- redirects are not followed unless asked for, and then each hop passes the same check;
- each phase has a timeout, and a response body larger than `max_response_bytes` fails
  (`ResponseTooLarge`) instead of filling memory; no proxy from the environment is used.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Host and port -> the addresses to try, in order (the default asks the system's resolver)."""

DEFAULT_TIMEOUT_S = 10.0
"""Of each phase of a guarded request (A2A_OUTBOUND_TIMEOUT_S's default)."""
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
"""Of a guarded response's body (A2A_OUTBOUND_MAX_RESPONSE_BYTES' default)."""

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052)


class OutboundError(httpx.RequestError):
    """An outgoing request refused by the guard."""


class DestinationForbidden(OutboundError):
    """The destination resolves only to addresses the policy refuses.

    The message does not say what a name resolved to (a client must not learn the internal
    network's layout from it); `reasons` does, for the server's log.
    """

    def __init__(self, message: str, *, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons


class ResponseTooLarge(OutboundError):
    """The response body is larger than the client accepts."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why an outgoing connection to `address` is refused by default; None if it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return "scoped (link-local)"
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = forbidden_reason(embedded)
            if reason is not None:
                return f"{reason}, embedded in IPv6"
            if address.ipv4_mapped is not None:
                return None  # `::ffff:a.b.c.d` is a.b.c.d itself
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("shared (CGNAT)", isinstance(address, ipaddress.IPv4Address) and address in _SHARED),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("not globally routable", not address.is_global),
    )
    return next((reason for reason, applies in checks if applies), None)


@dataclass(frozen=True, slots=True)
class OutboundPolicy:
    """What outgoing requests may reach besides public addresses: networks and host names."""

    networks: tuple[IPNetwork, ...] = ()
    host_names: tuple[str, ...] = ()
    """Exact names, or `*.suffix` for the names under a domain (their addresses are trusted)."""

    @classmethod
    def parse(cls, entries: Iterable[str]) -> OutboundPolicy:
        """A2A_OUTBOUND_ALLOW entries: a CIDR network or address (`10.0.0.0/8`, `::1`), or a
        host name (`agents.internal`, `*.svc.cluster.local`)."""
        networks: list[IPNetwork] = []
        names: list[str] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            label = entry.removeprefix("*.")
            parts = label.rstrip(".").split(".")
            if not label or not all(part.replace("-", "").isalnum() for part in parts):
                raise ValueError(
                    f"outbound allow-list entry {raw!r} is neither a network (CIDR) nor a host"
                    " name (`name.example`, `*.example`)"
                )
            names.append(entry.rstrip("."))
        return cls(networks=tuple(networks), host_names=tuple(names))

    def allows_name(self, host: str) -> bool:
        name = host.lower().rstrip(".")
        return any(
            name.endswith(pattern[1:]) if pattern.startswith("*.") else name == pattern
            for pattern in self.host_names
        )

    def allows_address(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(
            candidate in network
            for candidate in candidates
            for network in self.networks
            if candidate.version == network.version
        )

    def refusal(self, host: str, address: IPAddress) -> str | None:
        """Why connecting to `address` (resolved from `host`) is refused; None if permitted."""
        if self.allows_name(host) or self.allows_address(address):
            return None
        return forbidden_reason(address)


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolver (getaddrinfo), TCP addresses in its order, duplicates dropped."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        if str(sockaddr[0]) not in addresses:
            addresses.append(str(sockaddr[0]))
    return addresses


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks and connects to the checked address: the one place connections open."""

    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        resolver: Resolver = system_resolver,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.policy = policy
        self._resolver = resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def pin(self, host: str, port: int, resolve_within_s: float | None = None) -> str:
        """The address to connect to for `host`, or DestinationForbidden."""
        literal = _literal(host)
        if literal is not None:
            addresses: list[str] = [str(literal)]
        else:
            try:
                addresses = await asyncio.wait_for(self._resolver(host, port), resolve_within_s)
            except (OSError, TimeoutError) as exc:
                raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        reasons: list[str] = []
        for text in addresses:
            address = _literal(text)
            if address is None:
                continue
            reason = self.policy.refusal(host, address)
            if reason is None:
                return str(address)
            reasons.append(f"{address} is {reason}")
        raise DestinationForbidden(
            f"outgoing requests to {host!r} are not allowed: it is not a public address"
            " (A2A_OUTBOUND_ALLOW lists the exceptions)",
            reasons=tuple(reasons) or ("no address",),
        )

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = await self.pin(host, port, timeout)
        return await self._inner.connect_tcp(
            address,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's signature
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise DestinationForbidden("outgoing requests over Unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_HTTPCORE_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    """httpcore's exceptions as httpx's (what callers of an httpx client catch)."""
    try:
        yield
    except Exception as exc:
        for source, target in _HTTPCORE_ERRORS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _LimitedBody(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes], limit: int, url: str) -> None:
        self._stream = stream
        self._limit = limit
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        with _as_httpx_errors():
            async for chunk in self._stream:
                received += len(chunk)
                if received > self._limit:
                    raise ResponseTooLarge(
                        f"the response from {self._url} is larger than {self._limit} bytes"
                    )
                yield chunk

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over an httpcore pool whose connections pass the guard."""

    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        max_response_bytes: int,
        resolver: Resolver = system_resolver,
        max_connections: int = 100,
    ) -> None:
        self.max_response_bytes = max_response_bytes
        self.backend = GuardedNetworkBackend(policy, resolver=resolver)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=self.backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme not in ("http", "https"):
            raise DestinationForbidden(
                f"only http and https URLs may be requested, not {request.url.scheme!r}"
            )
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        assert isinstance(response.stream, AsyncIterable)
        declared = httpx.Headers(response.headers).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_response_bytes:
            close = getattr(response.stream, "aclose", None)
            if close is not None:
                await close()
            raise ResponseTooLarge(
                f"the response from {request.url} declares {declared} bytes; the limit is"
                f" {self.max_response_bytes}"
            )
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_LimitedBody(response.stream, self.max_response_bytes, str(request.url)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def outbound_client(
    policy: OutboundPolicy,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    follow_redirects: bool = False,
    max_redirects: int = 3,
    resolver: Resolver = system_resolver,
    headers: dict[str, str] | None = None,
) -> httpx.AsyncClient:
    """An httpx client for requests to URLs the server did not choose itself."""
    return httpx.AsyncClient(
        transport=GuardedTransport(
            policy, max_response_bytes=max_response_bytes, resolver=resolver
        ),
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=follow_redirects,
        max_redirects=max_redirects,
        trust_env=False,
        headers=headers,
    )
