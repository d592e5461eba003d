"""The ASGI application: FastAPI, with the HTTP guard outermost, and the busiest endpoint served
from the guard alone.

FastAPI puts nine layers between the server and an endpoint (its own and Starlette's entry
points, the error middleware, exception telemetry, a body limit, the exception middleware, an exit
stack, the router and route, the request/response wrappers). An open stream keeps a coroutine
frame alive in each for as long as it is open: at 10,000 idle streams they were ~8 KiB of the
~29 KiB a stream cost, and on every request they are work done before the endpoint runs. A
*direct* route skips them all:

    a direct route (method and path)  ->  HttpGuard  ->  the endpoint
    anything else                     ->  FastAPI's stack, with HttpGuard as its outermost
                                          middleware (CORS inside it when configured)

The JSON-RPC endpoint (`POST /`: every JSON-RPC call, blocking sends and open streams included)
is one: it answers every outcome itself, as a JSON-RPC error, so none of those layers had
anything to do there. What would escape it gets the server's own bare 500 (uvicorn logs it), as
FastAPI's error middleware would give. A direct route stays in the router, so that another method
on its path gets 405.

When tracing is on, every request goes through the stack, which the instrumentation wraps (its
request spans): `direct=False`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette._utils import get_route_path  # the router's own matching path
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class ServerApp(FastAPI):
    def __init__(
        self, *, guard: Callable[[ASGIApp], ASGIApp], direct: bool = True, **options: Any
    ) -> None:
        super().__init__(**options)
        self._guard = guard
        self._direct: dict[tuple[str, str], Endpoint] = {}
        self._guarded_endpoint = guard(_serve_endpoint) if direct else None

    def add_direct_route(self, path: str, method: str, endpoint: Endpoint) -> None:
        """`endpoint` answers `method path` behind the guard only: it must turn every failure
        into a response of its own."""
        self._direct[(method, path)] = endpoint
        self.add_route(path, endpoint, methods=[method], include_in_schema=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._guarded_endpoint is not None and scope["type"] == "http":
            endpoint = self._direct.get((scope["method"], get_route_path(scope)))
            if endpoint is not None:
                scope["app"], scope["endpoint"] = self, endpoint
                await self._guarded_endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # Tracing's instrumentation wraps this method and expects the error middleware on top.
        assert isinstance(stack, ServerErrorMiddleware)
        stack.app = self._guard(stack.app)
        return stack


async def _serve_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    response = await scope["endpoint"](Request(scope, receive, send))
    await response(scope, receive, send)
