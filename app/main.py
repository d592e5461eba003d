"""The app factory: builds stores, the agent and the bindings from Settings; owns their lifespan."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp

from agent.agent import Agent
from agent.hooks import ApprovalRequired, HookChain, Hooks, load_hooks
from agent.llm.base import LLMClient
from agent.llm.demo import DemoModel
from agent.llm.litellm import LiteLLMClient
from agent.llm.scripted import SCRIPTED_MODEL_NAME, ScriptedModel
from agent.loop import AgentLoop
from agent.runtime.admission import Slots
from agent.runtime.drain import Drain
from agent.runtime.journal import JournalFollower
from agent.runtime.runner import TaskRunner
from agent.runtime.supervisor import TurnSupervisor
from agent.runtime.tasks import TaskLifecycle
from agent.tck_profile import TCK_PROFILE, TCK_TOOLS, TckHooks, TckModel
from agent.tools.base import ToolProvider, UnavailableSource
from agent.tools.builtin import BUILTIN_TOOLS
from agent.tools.control import ASK_USER, FINISH
from agent.tools.function import FunctionTool, load_tool_functions
from agent.tools.mcp import MCPToolProvider, parse_mcp_servers
from agent.tools.toolbox import Toolbox
from app.a2a.card import AgentCardEndpoint, build_extended_card, card_base_url, package_version
from app.a2a.jsonrpc import JsonRpcBinding
from app.a2a.limits import RequestLimits
from app.a2a.openapi import build_openapi
from app.a2a.operations import Operations
from app.a2a.rest import RestBinding, framework_error
from app.a2a.v0_3.rest import RestV03Binding
from app.console_routes import console_routes
from app.handler import RequestHandler
from app.http.asgi import ServerApp
from app.http.auth import build_authenticator, is_loopback_host
from app.http.edge import Edge
from app.http.guard import guard
from app.ops.logs import log_malformed_http_at_debug, one_line_per_request
from app.ops.metrics import Metrics
from app.ops.telemetry import instrument, start_metrics, start_tracing, stop_metrics, stop_tracing
from app.push import build_push_delivery, push_policy
from app.remote_agents import RemoteAgentProvider, parse_remote_agents
from app.settings import Settings
from stores.base import StoreSet, StoreUnavailable
from stores.memory import InMemoryStores
from stores.rate_limit import RateLimit, RateLimiter

logger = logging.getLogger(__name__)


def build_llm(settings: Settings) -> LLMClient:
    if settings.agent_profile == TCK_PROFILE:
        return TckModel()
    if settings.uses_demo_model:
        return DemoModel()
    if settings.llm_model == SCRIPTED_MODEL_NAME:
        return ScriptedModel(chunks=settings.scripted_chunks, delay_ms=settings.scripted_delay_ms)
    assert settings.llm_model is not None
    return LiteLLMClient(
        model=settings.llm_model,
        api_base=settings.llm_api_base,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        timeout_s=settings.llm_timeout_s,
        num_retries=settings.llm_num_retries,
    )


def build_tool_providers(settings: Settings) -> list[ToolProvider]:
    """The tool sources the settings configure (AGENT_MCP_SERVERS, AGENT_REMOTE_AGENTS)."""
    mcp = _configured_sources(
        "mcp",
        "AGENT_MCP_SERVERS",
        settings.agent_mcp_servers,
        parse_mcp_servers,
        lambda server: MCPToolProvider(server, call_timeout_s=settings.agent_tool_timeout_s),
    )
    remote = _configured_sources(
        "remote_agents",
        "AGENT_REMOTE_AGENTS",
        settings.agent_remote_agents,
        parse_remote_agents,
        lambda agent: RemoteAgentProvider(
            agent,
            max_call_depth=settings.agent_max_call_depth,
            timeout_s=settings.agent_tool_timeout_s,
        ),
    )
    return mcp + remote


def _configured_sources(
    name: str,
    variable: str,
    value: str | None,
    parse: Callable[[str], list[Any]],
    provider: Callable[[Any], ToolProvider],
) -> list[ToolProvider]:
    """One provider per configured entry. A value that does not parse is one broken source
    (logged, shown by /readyz): the server starts all the same."""
    if not value:
        return []
    try:
        entries = parse(value)
    except ValueError as exc:
        logger.error("%s | %s is not usable: %s", name, variable, exc)
        return [UnavailableSource(name, str(exc))]
    return [provider(entry) for entry in entries]


def build_stores(settings: Settings) -> StoreSet:
    if not settings.redis_url:
        return InMemoryStores.create(
            ttl_s=settings.task_ttl_s, max_tasks=settings.a2a_memory_max_tasks
        )
    # Imported here so the embedded default never loads the Redis client.
    from stores.redis.factory import create_redis_stores

    return create_redis_stores(
        settings.redis_url,
        prefix=settings.redis_key_prefix,
        ttl_s=settings.task_ttl_s,
        max_running_turns=settings.a2a_max_running_turns,
        max_streams=settings.a2a_max_streams,
        command_timeout_s=settings.redis_command_timeout_s,
        cluster=settings.redis_cluster,
    )


def describe_stores(settings: Settings) -> str:
    """The store backend for the startup log: `stores=<memory>`, or Redis with its address (the
    scheme, host, port and database only: never the credentials)."""
    if not settings.redis_url:
        return "stores=<memory>"
    url = urlsplit(settings.redis_url)
    if settings.redis_cluster or url.scheme.endswith("+cluster"):
        hosts = url.netloc.rpartition("@")[2]  # seed nodes, without the credentials
        return f"stores=<redis-cluster>, url=<{url.scheme}://{hosts}>"
    try:
        where = f"{url.hostname or 'localhost'}:{url.port or 6379}"
    except ValueError:  # an unreadable port: say so rather than echo the URL
        where = "?"
    return f"stores=<redis>, url=<{url.scheme}://{where}{url.path or '/0'}>"


def build_rate_limiter(settings: Settings, stores: StoreSet) -> RateLimiter | None:
    """A2A_RATE_LIMIT per principal, on the task stores' backend (Redis: one bucket across every
    replica); None when unset."""
    if not settings.a2a_rate_limit:
        return None
    return stores.rate_limiter(RateLimit.parse(settings.a2a_rate_limit))


def _guarded(app: ASGIApp, *, settings: Settings) -> ASGIApp:
    return guard(app, settings)


def create_app(
    settings: Settings,
    *,
    tools: list[Callable[..., Any]] | None = None,
    hooks: list[Hooks] | None = None,
    llm: LLMClient | None = None,
    tool_providers: list[ToolProvider] | None = None,
) -> FastAPI:
    """Build the server. An embedding program may add tools, tool providers and hooks, or its
    own model client.

    Refuses unsafe authentication settings (AuthConfigurationError): see app.http.auth.
    """
    authenticator = build_authenticator(settings)
    function_tools = load_tool_functions(settings.agent_tools) + [
        FunctionTool(function) for function in tools or []
    ]
    if settings.uses_demo_model:
        function_tools = [FunctionTool(function) for function in BUILTIN_TOOLS] + function_tools
    if settings.agent_profile == TCK_PROFILE:
        function_tools = [FunctionTool(function) for function in TCK_TOOLS] + function_tools
        hooks = [TckHooks(), *(hooks or [])]
    toolbox = Toolbox(
        function_tools,
        providers=[*build_tool_providers(settings), *(tool_providers or [])],
        concurrency=settings.agent_tool_concurrency,
        timeout_s=settings.agent_tool_timeout_s,
    )
    llm_client = llm or build_llm(settings)
    meter_provider = start_metrics(settings, version=package_version())
    metrics = Metrics(
        tools=[tool.name for tool in toolbox.tools] + [ASK_USER, FINISH],
        meter=meter_provider.get_meter("a2a-agent-server") if meter_provider else None,
    )
    stores = build_stores(settings)
    tasks, messages, checkpoints = stores.tasks, stores.messages, stores.checkpoints
    edge = Edge(
        authenticator,
        rate_limiter=build_rate_limiter(settings, stores),
        base_url=partial(card_base_url, settings),
    )
    registered_hooks = load_hooks(settings.agent_hooks) + list(hooks or [])
    if settings.agent_tools_requiring_approval:
        registered_hooks.append(ApprovalRequired(settings.agent_tools_requiring_approval))
    hook_chain = HookChain(registered_hooks, failure_mode=settings.agent_hook_failure_mode)
    loop = AgentLoop(
        llm_client,
        toolbox,
        system_prompt=settings.agent_system_prompt,
        max_iterations=settings.agent_max_iterations,
        hooks=hook_chain,
        tool_failure_mode=settings.agent_tool_failure_mode,
        max_consecutive_tool_errors=settings.agent_max_consecutive_tool_errors,
        ask_user_tool=settings.agent_ask_user_tool,
        finish_tool=settings.agent_finish_tool,
        max_messages=settings.agent_history_max_messages,
    )
    agent = Agent(loop, messages, history_max_messages=settings.agent_history_max_messages)
    # Per-principal shares need principals: without authentication every caller is the one
    # anonymous owner, and the replica-wide limits are the ones that apply.
    per_principal = authenticator.required
    push = build_push_delivery(settings, tasks=tasks, pushes=stores.pushes)
    # Delivery follows each turn, and each cancel.
    follower = push if settings.a2a_push_notifications else None
    runner = TaskRunner(
        agent,
        tasks=tasks,
        messages=messages,
        checkpoints=checkpoints,
        leases=stores.leases,
        holder=f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        lease_ttl_s=settings.lease_ttl_s,
        max_running_turns=settings.a2a_max_running_turns,
        max_turns_per_owner=settings.a2a_max_turns_per_principal if per_principal else None,
        turn_slice_s=settings.a2a_turn_slice_ms / 1000,
        observer=metrics,
        follower=follower,
    )
    supervisor = TurnSupervisor(runner, tasks=tasks, checkpoints=checkpoints, leases=stores.leases)
    drain = Drain()
    journal = JournalFollower(
        tasks,
        read_block_s=settings.a2a_stream_keepalive_s,  # a read that waits this long pings
        drain=drain,
        local=runner,
    )
    lifecycle = TaskLifecycle(
        tasks=tasks,
        messages=messages,
        runner=runner,
        journal=journal,
        pushes=stores.pushes if settings.a2a_push_notifications else None,
        follower=follower,
    )
    handler = RequestHandler(
        tasks=tasks,
        lifecycle=lifecycle,
        journal=journal,
        streams=Slots(
            settings.a2a_max_streams,
            what="open streams and blocking sends",
            per_key=settings.a2a_max_streams_per_principal if per_principal else None,
        ),
        drain=drain,
        reply_directly=hook_chain.reply_directly,
    )
    model_ready = asyncio.Event()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.uses_demo_model:
            logger.warning(
                "model=<demo> | serving the built-in OFFLINE DEMO model;"
                " set LLM_MODEL to use a real one"
            )
        elif settings.agent_profile == TCK_PROFILE:
            logger.warning("model=<tck> | serving the conformance (TCK) profile")
        elif settings.llm_model == SCRIPTED_MODEL_NAME:
            logger.warning(
                "model=<scripted>, chunks=<%d> | serving the fixed load-test answer",
                settings.scripted_chunks,
            )
        else:
            logger.info("model=<%s> | using LiteLLM", settings.llm_model)
        if authenticator.required:
            logger.info("%s", authenticator.describe())
        elif settings.a2a_auth == "none":
            logger.warning(
                "%s | A2A_AUTH=none: every client is served without authentication",
                authenticator.describe(),
            )
        elif is_loopback_host(settings.a2a_host):
            logger.warning(
                "%s | no authentication is configured: serving the loopback address %s only;"
                " set A2A_API_KEYS or A2A_JWT_JWKS_URL before serving a network",
                authenticator.describe(),
                settings.a2a_host,
            )
        logger.info("%s | task stores", describe_stores(settings))
        tracer_provider = start_tracing(settings, version=package_version())
        warm_up = asyncio.create_task(_warm_up(llm_client, model_ready))
        await toolbox.start()  # tool sources connect; one that cannot is logged, not fatal
        try:
            async with supervisor:  # on the way out: its jobs stop, running turns hand over
                try:
                    yield
                finally:
                    drain.start()  # already started by a signal, unless something else stops it
                    warm_up.cancel()
        finally:
            await toolbox.aclose()
            await push.aclose()
            await stores.aclose()
            await edge.aclose()
            stop_tracing(tracer_provider)
            stop_metrics(meter_provider)

    app = ServerApp(
        guard=partial(_guarded, settings=settings),
        direct=not settings.tracing_enabled,  # request spans need every request in the stack
        openapi_document=build_openapi(),
        title="a2a-agent-server",
        version=package_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    card = AgentCardEndpoint(settings, toolbox)
    app.add_api_route(
        "/.well-known/agent-card.json", card, methods=["GET"], include_in_schema=False
    )
    app.add_api_route("/.well-known/agent.json", card, methods=["GET"], include_in_schema=False)
    operations = Operations(
        handler,
        limits=RequestLimits.from_settings(settings),
        extended_card=lambda url, with_v03: build_extended_card(
            settings, toolbox.specs, url, with_v03
        ),
        pushes=stores.pushes if settings.a2a_push_notifications else None,
        push_policy=push_policy(settings),
        on_push_registered=lambda task_id, owner: push.start(task_id, owner=owner),
    )
    depth = settings.a2a_max_json_depth
    jsonrpc = JsonRpcBinding(operations, edge, max_json_depth=depth, metrics=metrics)
    # Served from the guard alone, without FastAPI's middleware and routing (see app.http.asgi):
    # every JSON-RPC call, and each of the thousands of streams a replica may hold open.
    app.add_direct_route("/", "POST", jsonrpc.__call__)
    rest = RestBinding(operations, edge, max_json_depth=depth, metrics=metrics)
    app.router.routes.extend(rest.routes())
    rest_v03 = RestV03Binding(operations, edge, max_json_depth=depth, metrics=metrics)
    app.router.routes.extend(rest_v03.routes())
    if settings.a2a_console:  # static files; every call it makes is authenticated as any
        app.router.routes.extend(console_routes())
    # Open like /healthz: Prometheus scrapes without credentials (keep it off the public edge).
    app.add_api_route("/metrics", metrics.endpoint, methods=["GET"], include_in_schema=False)
    app.add_exception_handler(HTTPException, framework_error)
    log_malformed_http_at_debug()
    one_line_per_request()

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Ready when not draining, the stores answer, and the model adapter is loaded."""
        if drain.started:
            return JSONResponse({"status": "draining"}, 503)
        try:
            await stores.ping()
        except StoreUnavailable:
            return JSONResponse({"status": "unavailable", "stores": "unreachable"}, 503)
        if not model_ready.is_set():
            return JSONResponse({"status": "starting", "model": "loading"}, 503)
        # A tool source that is down does not make the replica unready (every replica shares the
        # source: taking them all out would not help); it is named here.
        down = {name: why for name, why in toolbox.statuses().items() if why is not None}
        return JSONResponse({"status": "ready", **({"toolSourcesDown": down} if down else {})})

    instrument(app, settings)  # request spans, outermost (only when tracing is on)
    app.state.settings = settings
    app.state.handler = handler
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.drain = drain  # started by the server on SIGTERM (app.http.server.DrainingServer)
    # Set once the model adapter has loaded: `a2a-server` then freezes its heap (app.cli).
    app.state.model_ready = model_ready
    return app


async def _warm_up(llm: LLMClient, ready: asyncio.Event) -> None:
    """Load the model adapter (LiteLLM's slow import) off the request path."""
    try:
        await llm.warm_up()
    except Exception:
        logger.exception("model adapter failed to load")
        return
    ready.set()
