"""The app factory: the server's parts (app.services) mounted as one ASGI app.

guard (Host, Origin, CORS, body size)            app.http.guard
  -> POST /              JSON-RPC, 1.0 and 0.3    app.a2a.jsonrpc   (served directly)
  -> /message:send, ...  HTTP+JSON 1.0             app.a2a.rest
  -> /v1/...             HTTP+JSON 0.3             app.a2a.v0_3.rest
  -> the cards, /agents, /healthz, /readyz, /metrics, the console
  -> AGENTS_FILE: POST /{name}/ (JSON-RPC) and /{name}/.well-known/agent-card.json per agent
  -> /{tenant}/message:send, ...  HTTP+JSON 1.0 within a tenant (last: it shadows nothing)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from agent.hooks import Hooks
from agent.llm.base import LLMClient
from agent.tools.base import ToolProvider
from app.a2a.card import AgentCardEndpoint, card_base_url, package_version
from app.a2a.card_signing import JWKS_PATH
from app.a2a.jsonrpc import JsonRpcBinding
from app.a2a.openapi import build_openapi
from app.a2a.rest import TENANT_PREFIX, RestBinding, framework_error
from app.a2a.v0_3.rest import RestV03Binding
from app.console_routes import console_routes
from app.http.asgi import ServerApp
from app.http.guard import guard
from app.ops.logs import log_malformed_http_at_debug, one_line_per_request
from app.ops.telemetry import instrument
from app.services import Services, build_services
from app.settings import Settings


def create_app(
    settings: Settings,
    *,
    tools: list[Callable[..., Any]] | None = None,
    hooks: list[Hooks] | None = None,
    llm: LLMClient | None = None,
    tool_providers: list[ToolProvider] | None = None,
) -> FastAPI:
    """Build the server. An embedding program may add tools, tool providers and hooks, or its
    own model client. It leaves the host process as it found it (no signal handler, no garbage
    collector tuning: the `a2a-server` command does those).

    Refuses unsafe authentication settings (AuthConfigurationError): see app.http.auth; and
    card signing settings it cannot use (CardSigningError): see app.a2a.card_signing.
    """
    services = build_services(
        settings, tools=tools, hooks=hooks, llm=llm, tool_providers=tool_providers
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with services.serving():
            yield

    app = ServerApp(
        guard=partial(guard, settings=settings),
        direct=not settings.tracing_enabled,  # request spans need every request in the stack
        openapi_document=build_openapi(),
        title="a2a-agent-server",
        version=package_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    _mount(app, services)
    instrument(app, settings)  # request spans, outermost (only when tracing is on)
    app.state.settings = settings
    app.state.handler = services.handler
    app.state.runner = services.runner
    app.state.metrics = services.metrics
    app.state.drain = services.drain  # started on SIGTERM (app.http.server.DrainingServer)
    app.state.model_ready = services.model_ready  # `a2a-server` then freezes its heap (app.cli)
    return app


def _mount(app: ServerApp, services: Services) -> None:
    """The bindings, the cards, the console and the operational endpoints."""
    settings, operations, edge, metrics = (
        services.settings,
        services.operations,
        services.edge,
        services.metrics,
    )
    signer = services.card_signer
    agents = services.agents
    # The root's card is the first agent's, at the root; each agent's also under its path.
    for hosted, path in [
        (agents.first, ""),
        *((agent, agent.path) for agent in agents.all if agent.name),
    ]:
        card = AgentCardEndpoint(
            hosted.settings,
            hosted.toolbox,
            signer=signer,
            extensions=hosted.extensions,
            path=path,
            skills=hosted.skills,
            agent=hosted.name if path else None,
        )
        for card_path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            app.add_api_route(path + card_path, card, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/agents", partial(_agents, services), methods=["GET"], include_in_schema=False
    )
    if signer is not None:  # the keys that verify the cards' signatures (their `jku`)
        app.add_api_route(JWKS_PATH, signer.jwks_endpoint, methods=["GET"], include_in_schema=False)
    depth = settings.a2a_max_json_depth
    jsonrpc = JsonRpcBinding(operations, edge, max_json_depth=depth, metrics=metrics)
    # Served from the guard alone, without FastAPI's middleware and routing (see app.http.asgi):
    # every JSON-RPC call, and each of the thousands of streams a replica may hold open.
    app.add_direct_route("/", "POST", jsonrpc.__call__)
    for name in agents.names:  # within the agent's tenant, whatever the request's params say
        for path in (f"/{name}/", f"/{name}"):
            app.add_direct_route(path, "POST", partial(jsonrpc.__call__, tenant=name))
    rest = RestBinding(operations, edge, max_json_depth=depth, metrics=metrics)
    app.router.routes.extend(rest.routes())
    rest_v03 = RestV03Binding(operations, edge, max_json_depth=depth, metrics=metrics)
    app.router.routes.extend(rest_v03.routes())
    for name in agents.names:  # each agent's card sends 0.3 clients to <base>/{name}/v1/...
        app.router.routes.extend(rest_v03.routes(name))
    if settings.a2a_console:  # static files; every call it makes is authenticated as any
        app.router.routes.extend(console_routes())
    # Open like /healthz: Prometheus scrapes without credentials (keep it off the public edge).
    app.add_api_route("/metrics", metrics.endpoint, methods=["GET"], include_in_schema=False)
    # The tenant's copies last: `/{tenant}/...` matches `/v1/message:send` and would shadow it.
    app.router.routes.extend(rest.routes(TENANT_PREFIX))
    app.add_exception_handler(HTTPException, framework_error)
    log_malformed_http_at_debug()
    one_line_per_request()

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Ready when not draining, the stores answer, and the model adapter is loaded."""
        answer = await services.readiness.check()
        return JSONResponse(answer.body, 200 if answer.ready else 503)


async def _agents(services: Services, request: Request) -> JSONResponse:
    """`GET /agents`: the agents served, each with its card's absolute URL (for people, the
    console and the CLI); without AGENTS_FILE the one agent, at the root."""
    base = card_base_url(services.settings, request)
    return JSONResponse(
        {
            "agents": [
                {
                    "name": agent.name or agent.settings.agent_name,
                    "description": agent.settings.agent_description,
                    "url": f"{base}{agent.path}/.well-known/agent-card.json",
                }
                for agent in services.agents.all
            ]
        }
    )
