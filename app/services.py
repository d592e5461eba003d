"""The object graph of one server, built from Settings in one place, and its lifespan.

    Settings --build_services--> Services
        stores (app.storage: memory | Redis | PostgreSQL | SQLite)
        agents (app.agents): each its toolbox (functions, MCP, remote agents), model client,
            hooks, AgentLoop and Agent: one from the environment, or AGENTS_FILE's
        runtime: TaskRunner, TurnSupervisor, JournalFollower, TaskLifecycle, push delivery, Drain
        wire: RequestHandler, Operations (what the bindings call), Edge (who may call)

Every collaborator is passed to the constructor of what uses it; `create_app` (app.main) only
mounts the bindings on an app and enters `Services.serving()` as the app's lifespan.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from agent.hooks import Hooks
from agent.llm.base import LLMClient
from agent.llm.scripted import SCRIPTED_MODEL_NAME
from agent.runtime.admission import Slots
from agent.runtime.drain import Drain
from agent.runtime.journal import JournalFollower
from agent.runtime.push import PushDelivery
from agent.runtime.runner import TaskRunner
from agent.runtime.supervisor import TurnSupervisor
from agent.runtime.tasks import TaskLifecycle
from agent.tck_profile import TCK_PROFILE
from agent.tools.base import ToolProvider
from agent.tools.control import ASK_USER, FINISH
from app.a2a.card import (
    card_base_url,
    package_version,
    signed_public_card,
)
from app.a2a.card_signing import CardSigner, build_card_signer
from app.a2a.limits import RequestLimits
from app.a2a.operations import Operations
from app.agents import Agents, build_agents
from app.handler import RequestHandler
from app.http.auth import Authenticator, build_authenticator, is_loopback_host
from app.http.edge import Edge
from app.http.tenants import Tenants
from app.ops.metrics import Metrics
from app.ops.readiness import Readiness
from app.ops.telemetry import start_metrics, start_tracing, stop_metrics, stop_tracing
from app.push import build_push_delivery, push_policy
from app.settings import Settings
from app.storage import build_stores, describe_stores
from stores.base import StoreSet
from stores.rate_limit import RateLimit, RateLimiter

if TYPE_CHECKING:  # the SDKs load only when metrics are exported, or gRPC served
    from opentelemetry.sdk.metrics import MeterProvider

    from app.grpc.server import GrpcServer
    from app.grpc.service_v0_3 import PublicCard

logger = logging.getLogger(__name__)


def build_rate_limiter(settings: Settings, stores: StoreSet) -> RateLimiter | None:
    """A2A_RATE_LIMIT per principal, on the task stores' backend (Redis: one bucket across every
    replica); None when unset."""
    if not settings.a2a_rate_limit:
        return None
    return stores.rate_limiter(RateLimit.parse(settings.a2a_rate_limit))


@dataclass(kw_only=True)
class Services:
    """One server's parts, wired: what `create_app` mounts and what its lifespan runs."""

    settings: Settings
    authenticator: Authenticator
    card_signer: CardSigner | None
    agents: Agents
    stores: StoreSet
    edge: Edge
    metrics: Metrics
    meter_provider: MeterProvider | None
    runner: TaskRunner
    supervisor: TurnSupervisor
    push: PushDelivery
    drain: Drain
    handler: RequestHandler
    operations: Operations
    model_ready: asyncio.Event
    """Set once the model adapter has loaded (readiness; `a2a-server` then freezes its heap)."""
    readiness: Readiness
    """What /readyz answers and gRPC health follows."""
    grpc: GrpcServer | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The app's lifespan: tool sources, tracing and the scheduler run inside it; on the way
        out new work is refused, running turns are handed over and every client is closed."""
        log_startup(self.settings, self.authenticator)
        tracer_provider = start_tracing(self.settings, version=package_version())
        llms = list({id(agent.llm): agent.llm for agent in self.agents.all}.values())
        warm_up = asyncio.create_task(_warm_up(llms, self.model_ready))
        # Tool sources connect (each agent's own); one that cannot is logged, not fatal.
        await asyncio.gather(*(toolbox.start() for toolbox in self.agents.toolboxes()))
        try:
            # On the way out the gRPC server stops, then the supervisor's jobs; turns hand over.
            async with self.supervisor, self.grpc.serving() if self.grpc else nullcontext():
                try:
                    yield
                finally:
                    self.drain.start()  # already started by a signal, unless something else
                    warm_up.cancel()
        finally:
            for toolbox in self.agents.toolboxes():
                await toolbox.aclose()
            await self.push.aclose()
            await self.stores.aclose()
            await self.edge.aclose()
            stop_tracing(tracer_provider)
            stop_metrics(self.meter_provider)


def build_services(
    settings: Settings,
    *,
    tools: list[Callable[..., Any]] | None = None,
    hooks: list[Hooks] | None = None,
    llm: LLMClient | None = None,
    tool_providers: list[ToolProvider] | None = None,
) -> Services:
    """Every part of the server from `settings`, plus what an embedding program adds (see
    `create_app`). Refuses unsafe authentication settings (AuthConfigurationError)."""
    authenticator = build_authenticator(settings)
    card_signer = build_card_signer(settings)  # refuses a key it cannot use (CardSigningError)
    stores = build_stores(settings)
    tasks, messages = stores.tasks, stores.messages
    agents = build_agents(
        settings,
        messages=messages,
        tools=tools or [],
        hooks=hooks or [],
        llm=llm,
        tool_providers=tool_providers or [],
    )
    meter_provider = start_metrics(settings, version=package_version())
    metrics = Metrics(
        tools=[*agents.tool_names(), ASK_USER, FINISH],
        meter=meter_provider.get_meter("a2a-agent-server") if meter_provider else None,
        agent_of=agents.label_of,
    )
    # With AGENTS_FILE the agents are the tenants, and a request naming none is the first's.
    tenants = (
        Tenants(agents.names, root=agents.first.name)
        if agents.names
        else Tenants(settings.a2a_tenants, card_tenant=settings.a2a_tenant)
    )
    edge = Edge(
        authenticator,
        rate_limiter=build_rate_limiter(settings, stores),
        base_url=partial(card_base_url, settings),
        tenants=tenants,
        extensions=agents.first.extensions,
        extensions_of=agents.extensions_of,
    )
    # Per-principal shares need principals: without authentication every caller is the one
    # anonymous owner, and the replica-wide limits are the ones that apply.
    per_principal = authenticator.required
    pushes = stores.pushes if settings.a2a_push_notifications else None
    push = build_push_delivery(settings, tasks=tasks, pushes=stores.pushes)
    follower = push if pushes is not None else None  # delivery follows each turn and cancel
    runner = TaskRunner(
        agents.agent_of,
        tasks=tasks,
        messages=messages,
        checkpoints=stores.checkpoints,
        leases=stores.leases,
        holder=f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        lease_ttl_s=settings.lease_ttl_s,
        max_running_turns=settings.a2a_max_running_turns,
        max_turns_per_owner=settings.a2a_max_turns_per_principal if per_principal else None,
        turn_slice_s=settings.a2a_turn_slice_ms / 1000,
        observer=metrics,
        follower=follower,
    )
    drain = Drain()
    model_ready = asyncio.Event()
    readiness = Readiness(
        drain=drain, stores=stores, model_ready=model_ready, sources_down=agents.sources_down
    )
    journal = JournalFollower(
        tasks,
        read_block_s=settings.a2a_stream_keepalive_s,  # a read that waits this long pings
        drain=drain,
        local=runner,
    )
    lifecycle = TaskLifecycle(
        tasks=tasks,
        messages=messages,
        checkpoints=stores.checkpoints,
        runner=runner,
        journal=journal,
        pushes=pushes,
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
        reply_directly=agents.reply_directly,
    )
    operations = Operations(
        handler,
        limits=RequestLimits.from_settings(settings),
        extended_card=partial(agents.extended_card, card_signer),
        pushes=pushes,
        push_policy=push_policy(settings),
        on_push_registered=lambda task_id, owner: push.start(task_id, owner=owner),
        long_poll_max_s=settings.a2a_long_poll_max_s,
    )
    return Services(
        settings=settings,
        authenticator=authenticator,
        card_signer=card_signer,
        agents=agents,
        stores=stores,
        edge=edge,
        metrics=metrics,
        meter_provider=meter_provider,
        runner=runner,
        supervisor=TurnSupervisor(
            runner, tasks=tasks, checkpoints=stores.checkpoints, leases=stores.leases
        ),
        push=push,
        drain=drain,
        handler=handler,
        operations=operations,
        model_ready=model_ready,
        readiness=readiness,
        grpc=grpc_server(
            settings,
            operations,
            edge,
            metrics,
            readiness,
            # 0.3 has no tenant: its GetAgentCard is the root's, the first agent's
            card=partial(
                signed_public_card,
                agents.first.settings,
                agents.first.toolbox,
                card_signer,
                agents.first.extensions,
                skills=agents.first.skills,
            ),
        ),
    )


def grpc_server(settings: Settings, *args: Any, card: PublicCard) -> GrpcServer | None:
    """The gRPC server A2A_GRPC_PORT asks for (app.grpc.server.build_grpc_server), or None:
    grpc and the SDK's messages are imported only by a server that serves them."""
    if settings.a2a_grpc_port is None:
        return None
    from app.grpc.server import build_grpc_server

    return build_grpc_server(settings, *args, card=card)


def log_startup(settings: Settings, authenticator: Authenticator) -> None:
    """What this server serves, said once at startup: the model, who may call, the stores."""
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


async def _warm_up(llms: list[LLMClient], ready: asyncio.Event) -> None:
    """Load the model adapters (LiteLLM's slow import) off the request path."""
    try:
        for llm in llms:
            await llm.warm_up()
    except Exception:
        logger.exception("model adapter failed to load")
        return
    ready.set()
