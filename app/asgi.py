"""The ASGI application: FastAPI, with the HTTP guard outermost and the busiest endpoint served
straight from it.

FastAPI puts seven layers between the server and an endpoint (exception telemetry, a body limit,
the exception middleware, an exit stack, the router, the route, the request/response wrappers).
An open stream keeps a coroutine frame alive in each of them for as long as it is open: at
10,000 idle streams they were ~8 KiB of the ~26 KiB a stream cost, and on every request they
are time spent before the endpoint runs. A *direct* route skips them: the JSON-RPC endpoint
(`POST /`: every JSON-RPC call, blocking sends and open streams included) answers every outcome
itself, as a JSON-RPC error, so none of those layers has anything to do there.

    ServerErrorMiddleware (FastAPI's: a 500 without a stack trace, whatever escapes)
      -> HttpGuard (Host, Origin, body size; CORS inside it when configured)
        -> a direct route, when the method and path are one
        -> otherwise the rest of FastAPI's stack, the router, the route

A direct route stays in the router too, so that the rest of the stack knows it: another method
on its path gets 405, and request spans (when tracing is on) are named after it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class ServerApp(FastAPI):
    def __init__(self, *, guard: Callable[[ASGIApp], ASGIApp], **options: Any) -> None:
        super().__init__(**options)
        self._guard = guard
        self._direct: dict[tuple[str, str], Endpoint] = {}

    def add_direct_route(self, path: str, method: str, endpoint: Endpoint) -> None:
        """`endpoint` answers `method path` below the guard only: it must turn every failure
        into a response of its own (what escapes it is a bare 500)."""
        self._direct[(method, path)] = endpoint
        self.add_route(path, endpoint, methods=[method], include_in_schema=False)

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # Tracing's instrumentation wraps this method and expects the error middleware on top.
        assert isinstance(stack, ServerErrorMiddleware)
        stack.app = self._guard(_DirectRoutes(self._direct, fallback=stack.app))
        return stack


class _DirectRoutes:
    def __init__(self, routes: dict[tuple[str, str], Endpoint], *, fallback: ASGIApp) -> None:
        self.routes = routes
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = None
        if scope["type"] == "http":
            endpoint = self.routes.get((scope["method"], _route_path(scope)))
        if endpoint is None:
            await self.fallback(scope, receive, send)
            return
        response = await endpoint(Request(scope, receive, send))
        await response(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the routes are matched against: without the `root_path` a proxy mounted the
    server under (ASGI servers include it in `path`), as Starlette's router matches."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path
