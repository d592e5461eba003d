"""The HTTP edge, before any route: `Host` allow-list, browser `Origin` check, CORS, body size.

A pure ASGI middleware (no BaseHTTPMiddleware: streams pass through untouched), outermost:

    HttpGuard  ->  CORSMiddleware (only when A2A_CORS_ORIGINS is set)  ->  the app

- `Host` must be a name this server serves (A2A_ALLOWED_HOSTS; by default the loopback names when
  bound to loopback and the public URL's host), else 421. This stops DNS rebinding: a web page
  whose own name was made to resolve to this server still sends its own name as `Host`. A `Host`
  that is an IP address always passes: rebinding needs a name, and probes (Kubernetes sends the
  pod IP) and clients that dial an address must keep working.
- A browser's `Origin`, when sent, must be this server's own (`Origin` host = `Host`) or listed
  in A2A_CORS_ORIGINS, else 403: a page elsewhere cannot even make "simple" requests here.
- A request body larger than A2A_MAX_BODY_BYTES gets 413 as soon as `Content-Length` says so,
  or, for a body sent without one, as soon as the bytes received pass the limit: the app never
  gets more than the limit, and the connection is closed after the 413.

Errors are JSON in the shape of the binding at the path (app.http.responses.error_response).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Awaitable, Iterable
from typing import NoReturn
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import A2AError, InvalidRequestError
from app.http.auth import LOOPBACK_NAMES, is_loopback_host
from app.http.body_deadlines import BodyDeadlines
from app.http.errors import (
    HostNotAllowedError,
    OriginNotAllowedError,
    PayloadTooLargeError,
    RequestTimeoutError,
)
from app.http.responses import error_response
from app.settings import Settings

CORS_METHODS = ("GET", "POST", "DELETE")
CORS_REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "X-API-Key",
    "A2A-Version",
    "A2A-Extensions",
    "X-A2A-Extensions",
    "Last-Event-ID",
    "traceparent",
    "tracestate",
)
CORS_EXPOSED_HEADERS = (
    "WWW-Authenticate",
    "Retry-After",
    "A2A-Extensions",
    "X-A2A-Extensions",
    "A2A-Version",
)


def host_name(host_header: str) -> str:
    """`Example.COM:8000` -> `example.com`; `[::1]:8000` -> `::1`; a trailing dot dropped."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@functools.lru_cache(maxsize=64)  # clients reach a server by the same few names
def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostPolicy:
    """Which `Host` names are served: exact names, `*.suffix` (subdomains), or `*` (all)."""

    def __init__(self, allowed: Iterable[str]) -> None:
        names = {host_name(entry) for entry in allowed if entry.strip()}
        self.any = "*" in names
        self._exact = frozenset(name for name in names if not name.startswith("*."))
        self._suffixes = tuple(name[1:] for name in names if name.startswith("*."))

    def allows(self, host_header: str | None) -> bool:
        if host_header is None:
            return False
        name = host_name(host_header)
        if not name:
            return False
        if self.any or name in self._exact or _is_ip_address(name):
            return True
        return any(name.endswith(suffix) for suffix in self._suffixes)


def default_allowed_hosts(settings: Settings) -> list[str]:
    """A2A_ALLOWED_HOSTS, else the loopback names when bound to loopback, plus the public
    URL's host (IP-address hosts pass regardless).

    Bound to a network address with neither set, any name is served: the server cannot know
    the names clients reach it by (a Service, an Ingress, a DNS name), and the card names the
    `Host` of each request. DNS rebinding, which the list stops, is an attack on servers that
    trust whoever reaches them (a development server on loopback); a server on the network
    requires credentials (it refuses to start without, unless A2A_AUTH=none).
    """
    if settings.a2a_allowed_hosts:
        return list(settings.a2a_allowed_hosts)
    public_host = urlsplit(settings.public_url).hostname if settings.public_url else None
    if not is_loopback_host(settings.a2a_host) and not public_host:
        return ["*"]
    hosts = list(LOOPBACK_NAMES) if is_loopback_host(settings.a2a_host) else []
    if public_host and not _is_ip_address(public_host) and public_host not in hosts:
        hosts.append(public_host)
    return hosts


def _origin_netloc(origin: str) -> str | None:
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc


class HttpGuard:
    """Pure ASGI middleware enforcing the rules above on every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        allowed_hosts: Iterable[str],
        allowed_origins: Iterable[str] = (),
        body_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.body_deadlines = BodyDeadlines()
        self.hosts = HostPolicy(allowed_hosts)
        self.origins = frozenset(origin.strip().lower().rstrip("/") for origin in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self._refusal(Headers(scope=scope))  # not kept: an open stream holds this frame
        if error is not None:
            await error_response(scope, error, before_routing=True)(scope, receive, send)
            return
        # Awaited here rather than in a method of the body's: an open stream holds this frame
        # for as long as it is open, and one frame fewer is memory per stream.
        body = _LimitedBody(self, scope, receive, send)
        try:
            await self.app(scope, body.receive, body.send)
        except (PayloadTooLargeError, RequestTimeoutError):
            if not body.refused:
                raise

    def _refusal(self, headers: Headers) -> A2AError | None:
        host = headers.get("host")
        if not self.hosts.allows(host):
            return HostNotAllowedError(f"This server does not serve the host {host!r}")
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host or ""):
            return OriginNotAllowedError(
                f"Requests from the origin {origin!r} are not allowed; list it in A2A_CORS_ORIGINS"
            )
        length = headers.get("content-length")
        if length is not None:
            if not (length.strip().isascii() and length.strip().isdigit()):
                return InvalidRequestError("Content-Length is not a number")
            if int(length) > self.max_body_bytes:
                return self.too_large()
        return None

    def _origin_allowed(self, origin: str, host: str) -> bool:
        normalized = origin.strip().lower().rstrip("/")
        if "*" in self.origins or normalized in self.origins:
            return True
        return _origin_netloc(origin) == host.strip().lower()

    def too_large(self) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"The request body is larger than {self.max_body_bytes} bytes (A2A_MAX_BODY_BYTES)"
        )


class _LimitedBody:
    """One request, its body counted as the app receives it. Past the limit, the 413 is sent at
    once (the app is still reading, so it has not responded), and the app gets the error from
    `receive`; whatever it then tries to send is dropped. A body that stops arriving for
    `body_timeout_s` is refused the same way (408): a client cannot hold a connection and a
    concurrency place by sending its headers and then nothing."""

    __slots__ = (
        "_expired",
        "_reading",
        "_receive",
        "_send",
        "body_done",
        "guard",
        "received",
        "refused",
        "response_started",
        "scope",
    )

    def __init__(self, guard: HttpGuard, scope: Scope, receive: Receive, send: Send) -> None:
        self.guard = guard
        self.scope = scope
        self._receive = receive
        self._send = send
        self.received = 0
        self.body_done = False
        self.response_started = False
        self.refused = False
        self._reading: asyncio.Task[object] | None = None  # while a read waits for the body
        self._expired = False

    def receive(self) -> Awaitable[Message]:
        # After the body, `receive` only waits for a disconnect: no deadline, and the server's
        # own wait (no frame of ours kept by a stream's watcher, where a stream has one: not
        # served by the server's own protocol, app.http.request_task).
        if self.body_done:
            return self._receive()
        return self._receive_body()

    async def _receive_body(self) -> Message:
        reading = asyncio.current_task()
        assert reading is not None
        # As asyncio.timeout tells its own cancel from others': by the task's count of them.
        cancelling, self._reading, self._expired = reading.cancelling(), reading, False
        deadlines = self.guard.body_deadlines
        slot = deadlines.add(self, self.guard.body_timeout_s)
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if not self._expired or reading.uncancel() > cancelling:
                raise  # cancelled from elsewhere (too)
            await self._refuse(RequestTimeoutError())
        finally:
            self._reading = None
            deadlines.discard(self, slot)
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.body_done = not message.get("more_body", False)
            if self.received > self.guard.max_body_bytes:
                await self._refuse(self.guard.too_large())
        return message

    def expire(self) -> None:
        """The read's deadline passed (BodyDeadlines): cancel it, if it is still waiting."""
        if self._reading is not None and not self._expired:
            self._expired = True
            self._reading.cancel()

    async def _refuse(self, error: A2AError) -> NoReturn:
        """Answer with `error` now (unless the app already answered), and stop the app's read."""
        if not self.response_started and not self.refused:
            self.refused = True
            response = error_response(self.scope, error, before_routing=True)
            await response(self.scope, self._receive, self._send)
        raise error

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.response_started = True
        await self._send(message)


def guard(app: ASGIApp, settings: Settings) -> ASGIApp:
    """`app` behind the guard configured by `settings` (CORS only when origins are listed)."""
    inner = app
    origins = [origin.strip().rstrip("/") for origin in settings.a2a_cors_origins]
    if origins:
        inner = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=CORS_METHODS,
            allow_headers=CORS_REQUEST_HEADERS,
            expose_headers=CORS_EXPOSED_HEADERS,
            allow_credentials=False,
        )
    return HttpGuard(
        inner,
        max_body_bytes=settings.a2a_max_body_bytes,
        body_timeout_s=settings.a2a_body_timeout_s,
        allowed_hosts=default_allowed_hosts(settings),
        allowed_origins=origins,
    )
