"""The ASGI application: FastAPI, with the HTTP guard outermost, and the busiest endpoint served
from the guard alone.

FastAPI puts nine layers between the server and an endpoint (its own and Starlette's entry
points, the error middleware, exception telemetry, a body limit, the exception middleware, an exit
stack, the router and route, the request/response wrappers). An open stream keeps a coroutine
frame alive in each for as long as it is open (a large share of an idle stream's memory), and on
every request they are work done before the endpoint runs. A *direct* route skips them all:

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
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


class ServerApp(FastAPI):
    def __init__(
        self,
        *,
        guard: Callable[[ASGIApp], ASGIApp],
        direct: bool = True,
        openapi_document: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._openapi_document = openapi_document
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
            endpoint = self._direct.get((scope["method"], route_path(scope)))
            if endpoint is not None:
                scope["app"], scope["endpoint"] = self, endpoint
                await self._guarded_endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """The document given, served as it is (FastAPI's own is built from the routes, which
        describe none of the A2A bindings); FastAPI's when none was given."""
        if self._openapi_document is not None:
            return self._openapi_document
        return super().openapi()

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # Tracing's instrumentation wraps this method and expects the error middleware on top.
        assert isinstance(stack, ServerErrorMiddleware)
        stack.app = self._guard(stack.app)
        return stack


def route_path(scope: Scope) -> str:
    """The path the router matches: the request's path without the app's `root_path` prefix.
    Starlette's own (`get_route_path`, 1.10) is private: this is its public equivalent, which
    tests/unit/test_fenced_internals.py holds equal to it while it exists."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if not root_path or not path.startswith(root_path):
        return path
    if path == root_path:
        return ""
    return path[len(root_path) :] if path[len(root_path)] == "/" else path


async def _serve_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    response = await scope["endpoint"](Request(scope, receive, send))
    await response(scope, receive, send)
