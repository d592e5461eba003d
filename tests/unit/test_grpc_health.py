"""gRPC health as readiness says, read by a real gRPC client from the server in this process:
NOT_SERVING while the model adapter loads, SERVING once it has, NOT_SERVING while the stores do
not answer and SERVING when they do again, NOT_SERVING for good once the drain begins; a Watch
streams every change, for the empty service and each A2A service alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agent.runtime.drain import Drain
from app.grpc.server import GrpcServer
from app.ops.readiness import Readiness
from app.settings import Settings
from stores.base import StoreUnavailable
from tests.e2e.harness import free_port

pytestmark = pytest.mark.timeout(60)

SERVICES = ("", "lf.a2a.v1.A2AService", "a2a.v1.A2AService")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class FlakyStores:
    """Stores whose ping fails while `down` (what readiness asks of them)."""

    down = False

    async def ping(self) -> None:
        if self.down:
            raise StoreUnavailable("the test cut the store off")


class Replica:
    def __init__(self) -> None:
        self.drain = Drain()
        self.model_ready = asyncio.Event()
        self.stores = FlakyStores()
        self.readiness = Readiness(
            drain=self.drain,
            stores=self.stores,  # type: ignore[arg-type]
            model_ready=self.model_ready,
            sources_down=dict,
        )


@pytest.fixture
async def replica() -> AsyncIterator[tuple[Replica, health_pb2_grpc.HealthStub]]:
    port = free_port()
    replica = Replica()
    server = GrpcServer(
        Settings(a2a_grpc_port=port),
        handlers=[],
        service_names=SERVICES[1:],
        readiness=replica.readiness,
    )
    async with server.serving(), grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield replica, health_pb2_grpc.HealthStub(channel)


async def check(health: health_pb2_grpc.HealthStub) -> dict[str, int]:
    return {
        service: (await health.Check(health_pb2.HealthCheckRequest(service=service))).status
        for service in SERVICES
    }


async def until(health: health_pb2_grpc.HealthStub, status: int) -> None:
    """Until every service says `status` (health is set by the server's own task: polled)."""
    for _ in range(600):
        if await check(health) == dict.fromkeys(SERVICES, status):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"health never became {status}: {await check(health)}")


async def test_health_follows_readiness_through_loading_an_outage_and_the_drain(replica) -> None:
    replica, health = replica
    watches = {
        service: health.Watch(health_pb2.HealthCheckRequest(service=service))
        for service in SERVICES
    }
    seen: dict[str, list[int]] = {service: [] for service in SERVICES}
    expected = [NOT_SERVING, SERVING, NOT_SERVING, SERVING, NOT_SERVING]

    async def follow(service: str) -> None:
        async for answer in watches[service]:
            if not seen[service] or seen[service][-1] != answer.status:
                seen[service].append(answer.status)
            if seen[service] == expected:
                return

    followers = [asyncio.create_task(follow(service)) for service in SERVICES]
    assert await check(health) == dict.fromkeys(SERVICES, NOT_SERVING)  # the model loads
    assert not (await replica.readiness.check()).ready

    replica.model_ready.set()  # seen at once, not at the next look
    await until(health, SERVING)
    assert (await replica.readiness.check()).body == {"status": "ready"}

    replica.stores.down = True
    await until(health, NOT_SERVING)
    assert (await replica.readiness.check()).body == {
        "status": "unavailable",
        "stores": "unreachable",
    }
    replica.stores.down = False
    await until(health, SERVING)

    replica.drain.start()
    await until(health, NOT_SERVING)
    await asyncio.wait_for(asyncio.gather(*followers), 30)
    assert all(seen[service] == expected for service in SERVICES), seen
    assert (await replica.readiness.check()).body == {"status": "draining"}
    await asyncio.sleep(1.5)  # past the next look: a drained replica never serves again
    assert await check(health) == dict.fromkeys(SERVICES, NOT_SERVING)
