"""The app factory: builds stores, the agent and the bindings from Settings; owns their lifespan."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.responses import JSONResponse

from agent.agent import Agent
from agent.builtin_tools import BUILTIN_TOOLS
from agent.demo_model import DemoModel
from agent.hooks import ApprovalRequired, HookChain, Hooks, load_hooks
from agent.litellm_client import LiteLLMClient
from agent.llm import LLMClient
from agent.loop import AgentLoop
from agent.runner import TaskRunner
from agent.supervisor import TurnSupervisor
from agent.tools import FunctionTool, Toolbox, load_tool_functions
from app.card import AgentCardEndpoint, build_card, package_version
from app.handler import RequestHandler
from app.jsonrpc import JsonRpcBinding
from app.openapi import build_openapi
from app.operations import Operations
from app.rest import RestBinding, not_found
from app.settings import Settings
from stores.base import StoreSet, StoreUnavailable
from stores.memory import InMemoryStores

logger = logging.getLogger(__name__)


def build_llm(settings: Settings) -> LLMClient:
    if settings.uses_demo_model:
        return DemoModel()
    assert settings.llm_model is not None
    return LiteLLMClient(
        model=settings.llm_model,
        api_base=settings.llm_api_base,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        timeout_s=settings.llm_timeout_s,
        num_retries=settings.llm_num_retries,
    )


def build_stores(settings: Settings) -> StoreSet:
    if not settings.redis_url:
        return InMemoryStores.create(ttl_s=settings.task_ttl_s)
    # Imported here so the embedded default never loads the Redis client.
    from stores.redis_stores import create_redis_stores

    return create_redis_stores(
        settings.redis_url, prefix=settings.redis_key_prefix, ttl_s=settings.task_ttl_s
    )


def create_app(
    settings: Settings,
    *,
    tools: list[Callable[..., Any]] | None = None,
    hooks: list[Hooks] | None = None,
    llm: LLMClient | None = None,
) -> FastAPI:
    """Build the server. An embedding program may add tools and hooks, or its own model client."""
    function_tools = load_tool_functions(settings.agent_tools) + [
        FunctionTool(function) for function in tools or []
    ]
    if settings.uses_demo_model:
        function_tools = [FunctionTool(function) for function in BUILTIN_TOOLS] + function_tools
    toolbox = Toolbox(
        function_tools,
        concurrency=settings.agent_tool_concurrency,
        timeout_s=settings.agent_tool_timeout_s,
    )
    llm_client = llm or build_llm(settings)
    stores = build_stores(settings)
    tasks, messages, checkpoints = stores.tasks, stores.messages, stores.checkpoints
    registered_hooks = load_hooks(settings.agent_hooks) + list(hooks or [])
    if settings.agent_tools_requiring_approval:
        registered_hooks.append(ApprovalRequired(settings.agent_tools_requiring_approval))
    loop = AgentLoop(
        llm_client,
        toolbox,
        system_prompt=settings.agent_system_prompt,
        max_iterations=settings.agent_max_iterations,
        hooks=HookChain(registered_hooks, failure_mode=settings.agent_hook_failure_mode),
        tool_failure_mode=settings.agent_tool_failure_mode,
        max_consecutive_tool_errors=settings.agent_max_consecutive_tool_errors,
        ask_user_tool=settings.agent_ask_user_tool,
        finish_tool=settings.agent_finish_tool,
        max_messages=settings.agent_history_max_messages,
    )
    agent = Agent(loop, messages, history_max_messages=settings.agent_history_max_messages)
    runner = TaskRunner(
        agent,
        tasks=tasks,
        messages=messages,
        checkpoints=checkpoints,
        leases=stores.leases,
        holder=f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        lease_ttl_s=settings.lease_ttl_s,
    )
    supervisor = TurnSupervisor(runner, tasks=tasks, checkpoints=checkpoints)
    handler = RequestHandler(tasks=tasks, messages=messages, runner=runner)
    model_ready = asyncio.Event()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.uses_demo_model:
            logger.warning(
                "model=<demo> | serving the built-in OFFLINE DEMO model;"
                " set LLM_MODEL to use a real one"
            )
        else:
            logger.info("model=<%s> | using LiteLLM", settings.llm_model)
        warm_up = asyncio.create_task(_warm_up(llm_client, model_ready))
        supervisor.start()
        try:
            yield
        finally:
            warm_up.cancel()
            await supervisor.stop()
            await runner.shutdown()
            await stores.aclose()

    app = FastAPI(
        title="a2a-agent-server",
        version=package_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    card = AgentCardEndpoint(build_card(settings, toolbox.tools))
    app.add_api_route(
        "/.well-known/agent-card.json", card, methods=["GET"], include_in_schema=False
    )
    app.add_api_route("/.well-known/agent.json", card, methods=["GET"], include_in_schema=False)
    operations = Operations(handler)
    app.add_api_route("/", JsonRpcBinding(operations), methods=["POST"], include_in_schema=False)
    app.router.routes.extend(RestBinding(operations).routes())
    app.add_exception_handler(404, not_found)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        """Ready when the stores answer and the model adapter is loaded."""
        try:
            await stores.ping()
        except StoreUnavailable:
            return JSONResponse({"status": "unavailable", "stores": "unreachable"}, 503)
        if not model_ready.is_set():
            return JSONResponse({"status": "starting", "model": "loading"}, 503)
        return JSONResponse({"status": "ready"})

    document = build_openapi()
    app.openapi = lambda: document  # type: ignore[method-assign]
    app.state.settings = settings
    app.state.handler = handler
    return app


async def _warm_up(llm: LLMClient, ready: asyncio.Event) -> None:
    """Load the model adapter (LiteLLM's slow import) off the request path."""
    warm_up = getattr(llm, "warm_up", None)
    if warm_up is not None:
        try:
            await warm_up()
        except Exception:
            logger.exception("model adapter failed to load")
            return
    ready.set()
