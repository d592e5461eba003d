"""gRPC health follows readiness on a real replica: its Redis behind a proxy the test cuts.

While the store is cut off, `/readyz` answers 503 and `grpc.health.v1` says NOT_SERVING for the
empty service and each A2A service; once the proxy flows again both recover (200, SERVING). A
Watch opened before the cut streams SERVING, NOT_SERVING, SERVING. A gRPC-only client or mesh
routes around the replica for as long as it cannot serve.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.harness import free_port
from tests.e2e_chaos.blackhole import Blackhole
from tests.e2e_redis.support import REDIS_URL, Cluster

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

GRPC_PORT = free_port()
SERVICES = ("", "lf.a2a.v1.A2AService", "a2a.v1.A2AService")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
PATIENCE_S = 30.0  # a slow machine's room: health is looked at every second


@pytest.fixture(scope="module")
def proxy():
    port = int(REDIS_URL.rsplit(":", 1)[1].split("/", 1)[0])
    with Blackhole(port) as hole:
        yield hole


@pytest.fixture(scope="module")
def cluster(fake_llm, proxy, prefix, tool_log):
    env = {"A2A_GRPC_PORT": str(GRPC_PORT)}
    with Cluster(
        fake_llm.base_url, redis_url=proxy.url, prefix=prefix, tool_log=tool_log, extra_env=env
    ) as c:
        yield c


@pytest.fixture(scope="module")
def server(cluster):
    (srv,) = cluster.spawn(1)
    return srv


async def statuses(health: health_pb2_grpc.HealthStub) -> dict[str, int]:
    answers = {}
    for service in SERVICES:
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        answers[service] = answer.status
    return answers


async def until(health: health_pb2_grpc.HealthStub, status: int) -> dict[str, int]:
    deadline = time.monotonic() + PATIENCE_S
    while (seen := await statuses(health)) != dict.fromkeys(SERVICES, status):
        assert time.monotonic() < deadline, f"health never became {status}: {seen}"
        await asyncio.sleep(0.2)
    return seen


def readyz(server) -> int:
    with httpx.Client(trust_env=False, timeout=15) as http:
        return http.get(f"{server.url}/readyz").status_code


async def test_health_is_not_serving_while_the_store_is_cut_off_and_serving_after(server, proxy):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        await until(health, SERVING)
        watches = {
            service: health.Watch(health_pb2.HealthCheckRequest(service=service))
            for service in SERVICES
        }
        seen: dict[str, list[int]] = {service: [] for service in SERVICES}

        async def follow(service: str) -> None:
            async for answer in watches[service]:
                if not seen[service] or seen[service][-1] != answer.status:
                    seen[service].append(answer.status)
                if seen[service][-3:] == [SERVING, NOT_SERVING, SERVING]:
                    return

        followers = [asyncio.create_task(follow(service)) for service in SERVICES]
        await asyncio.sleep(0.5)  # each Watch has its first answer
        proxy.cut()
        try:
            await until(health, NOT_SERVING)
            assert await asyncio.to_thread(readyz, server) == 503
        finally:
            proxy.heal()
        await until(health, SERVING)
        assert await asyncio.to_thread(readyz, server) == 200
        await asyncio.wait_for(asyncio.gather(*followers), PATIENCE_S)
        for call in watches.values():
            call.cancel()
    assert seen == {service: [SERVING, NOT_SERVING, SERVING] for service in SERVICES}
