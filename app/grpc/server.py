"""The gRPC server of one process: on A2A_GRPC_PORT, in the app's event loop, started and stopped
by the app's lifespan (app.services.Services.serving).

It serves the A2A services, `grpc.health.v1.Health` and server reflection. Health follows
readiness (app.ops.readiness, what /readyz answers): the empty service and each A2A service are
SERVING while the replica is ready, NOT_SERVING while it is not (the model adapter still loading,
the stores unreachable), SERVING again once it recovers, and NOT_SERVING for good once the drain
begins, so that a load balancer stops sending before the process goes; Watch streams each change.
TLS when A2A_GRPC_TLS_CERT / A2A_GRPC_TLS_KEY name PEM files, plaintext HTTP/2 otherwise. The
limits are the HTTP server's: a request message larger than A2A_MAX_BODY_BYTES is
RESOURCE_EXHAUSTED, calls beyond A2A_MAX_CONNECTIONS at once too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from app.a2a.operations import Operations
from app.grpc import GrpcConfigurationError
from app.grpc.calls import GrpcCalls
from app.grpc.service_v0_3 import SERVICE_V03, PublicCard, service_v0_3
from app.grpc.service_v1 import SERVICE, service_v1
from app.http.auth import is_loopback_host
from app.http.edge import Edge
from app.ops.metrics import Metrics
from app.ops.readiness import Readiness
from app.settings import Settings

logger = logging.getLogger(__name__)

STOP_GRACE_SHARE = 0.1
"""The share of A2A_SHUTDOWN_GRACE_S the calls still open when the lifespan ends get (uvicorn's
connections had three quarters; the hand-over of turns needs the rest): by then the drain has
ended every stream and blocking send, each answered or ended at an event boundary."""

HEALTH_LOOK_S = 1.0
"""How often health asks the stores whether they answer (one PING on the lease connection): a
store outage shows as NOT_SERVING, and its end as SERVING, within this and the ping's timeout.
The drain and the model adapter's loading are seen at once."""


def _tls_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    cert, key = settings.a2a_grpc_tls_cert, settings.a2a_grpc_tls_key
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise GrpcConfigurationError(
            "A2A_GRPC_TLS_CERT and A2A_GRPC_TLS_KEY go together: set both, or neither"
        )
    try:
        pair = (Path(key).read_bytes(), Path(cert).read_bytes())
    except OSError as exc:
        raise GrpcConfigurationError(f"cannot read the gRPC TLS files: {exc}") from exc
    return grpc.ssl_server_credentials([pair])


def _address(host: str, port: int) -> str:
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GrpcServer:
    """The A2A services (their handlers and full names) on the settings' port."""

    def __init__(
        self,
        settings: Settings,
        *,
        handlers: Sequence[grpc.GenericRpcHandler],
        service_names: Sequence[str],
        readiness: Readiness,
    ) -> None:
        assert settings.a2a_grpc_port is not None
        self._settings = settings
        self._handlers = list(handlers)
        self._names = list(service_names)
        self._readiness = readiness
        # Read now, so that a missing file stops the server from starting (exit 2), not later.
        self._credentials = _tls_credentials(settings)
        self.port: int | None = None
        """The port bound, once started."""

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Serve while inside; on the way out, health says NOT_SERVING and the server stops."""
        settings = self._settings
        keepalive_ms = int(settings.a2a_stream_keepalive_s * 1000)
        server = grpc.aio.server(
            maximum_concurrent_rpcs=settings.a2a_max_connections,
            options=[
                ("grpc.max_receive_message_length", settings.a2a_max_body_bytes),
                # Another process already on the port must be an error, not a silent share.
                ("grpc.so_reuseport", 0),
                # An open stream with nothing to say is kept open by HTTP/2 pings, so that
                # proxies and load balancers do not close it (SSE's keep-alive comment).
                ("grpc.keepalive_time_ms", keepalive_ms),
                ("grpc.http2.max_pings_without_data", 0),
            ],
        )
        server.add_generic_rpc_handlers(self._handlers)
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        reflection.enable_server_reflection(
            [
                *self._names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            server,
        )
        address = _address(settings.a2a_host, settings.a2a_grpc_port or 0)
        try:
            if self._credentials is not None:
                self.port = server.add_secure_port(address, self._credentials)
            else:
                self.port = server.add_insecure_port(address)
        except RuntimeError:
            raise GrpcConfigurationError(
                f"cannot serve gRPC on {address} (A2A_GRPC_PORT): the port is in use, or not"
                " this process's to bind"
            ) from None
        await server.start()
        await self._set_health(health, ready=False)  # until the first look says otherwise
        logger.info(
            "grpc=<%s>, tls=<%s>, services=<%s> | serving gRPC",
            _address(settings.a2a_host, self.port),
            "on" if self._credentials is not None else "off",
            ", ".join(self._names),
        )
        watch = asyncio.create_task(self._follow_readiness(health))
        try:
            yield
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            await health.enter_graceful_shutdown()
            await server.stop(settings.a2a_shutdown_grace_s * STOP_GRACE_SHARE)

    async def _follow_readiness(self, health: health_aio.HealthServicer) -> None:
        """Health as readiness says, each change set (and streamed to Watch) as it is seen."""
        readiness, serving = self._readiness, False
        while not readiness.drain.started:
            answer = await readiness.check()
            if answer.ready != serving and not readiness.drain.started:
                serving = answer.ready
                await self._set_health(health, ready=serving)
                logger.log(
                    logging.INFO if serving else logging.WARNING,
                    "grpc health=<%s> | readiness: %s",
                    "SERVING" if serving else "NOT_SERVING",
                    answer.body.get("status"),
                )
            await readiness.next_look(HEALTH_LOOK_S)
        await health.enter_graceful_shutdown()  # every service NOT_SERVING, for good

    async def _set_health(self, health: health_aio.HealthServicer, *, ready: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self._names):
            await health.set(name, status)


def http_base_url(settings: Settings) -> str:
    """The HTTP base URL a gRPC call's card names (a gRPC call does not say which host the
    client used): A2A_PUBLIC_URL, else the HTTP server's address."""
    if settings.public_url:
        return settings.public_url
    host = settings.a2a_host.strip("[]")
    if not is_loopback_host(host) and host in ("", "0.0.0.0", "::"):
        host = "localhost"
    return f"http://{_address(host, settings.a2a_port)}"


def build_grpc_server(
    settings: Settings,
    operations: Operations,
    edge: Edge,
    metrics: Metrics,
    readiness: Readiness,
    *,
    card: PublicCard,
) -> GrpcServer | None:
    """The gRPC server the settings ask for (A2A_GRPC_PORT), or None. `card`: the public card
    at a base URL, as 0.3's `GetAgentCard` answers it."""
    if settings.a2a_grpc_port is None:
        return None
    calls = GrpcCalls(
        edge,
        metrics=metrics,
        max_json_depth=settings.a2a_max_json_depth,
        traced=settings.tracing_enabled,
        base_url=partial(http_base_url, settings),
    )
    return GrpcServer(
        settings,
        handlers=[service_v1(calls, operations), service_v0_3(calls, operations, card=card)],
        service_names=[SERVICE.full_name, SERVICE_V03.full_name],
        readiness=readiness,
    )
