"""gRPC across replicas on one Redis: a stream opened over gRPC on replica A is resumed over
gRPC on replica B from the last position seen (`a2a-last-event-id`), nothing missed and nothing
twice; a task made over gRPC on A is read over JSON-RPC on B, and canceled over gRPC from B."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.e2e.harness import ServerProcess, free_port
from tests.e2e_redis.support import Cluster, wait_ready, wait_until
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

METADATA = (("a2a-version", "1.0"),)


@pytest.fixture(scope="module")
def grpc_replicas(cluster: Cluster) -> Iterator[list[tuple[ServerProcess, str]]]:
    """Replicas A and B, each serving gRPC on a port of its own."""
    replicas = []
    for _ in range(2):
        port = free_port()
        server = ServerProcess(
            cluster.llm_base_url, env={**cluster.env, "A2A_GRPC_PORT": str(port)}
        )
        cluster.servers.append(server)  # stopped with the cluster
        server.start()
        wait_ready(server)
        replicas.append((server, f"127.0.0.1:{port}"))
    yield replicas


def send_request(text_: str) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=f"m-{text_}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text_)]
        ),
        configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True),
    )


def chunks(events: list[a2a_pb2.StreamResponse]) -> str:
    return "".join(
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    )


async def test_a_stream_cut_on_one_replica_resumes_on_the_other(grpc_replicas, fake_llm, marker):
    (_, target_a), (server_b, target_b) = grpc_replicas
    words = [f"r{n} " for n in range(15)]
    fake_llm.script(text(words, chunk_delay=0.1, when_user_contains=marker))
    async with (
        grpc.aio.insecure_channel(target_a) as channel_a,
        grpc.aio.insecure_channel(target_b) as channel_b,
    ):
        stub_a, stub_b = (
            a2a_pb2_grpc.A2AServiceStub(channel_a),
            a2a_pb2_grpc.A2AServiceStub(channel_b),
        )
        task = (await stub_a.SendMessage(send_request(marker), metadata=METADATA)).task
        first = stub_a.SubscribeToTask(
            a2a_pb2.SubscribeToTaskRequest(id=task.id), metadata=METADATA
        )
        position = int(dict(await first.initial_metadata())["a2a-first-event-id"])
        seen: list[a2a_pb2.StreamResponse] = []
        async for event in first:
            seen.append(event)
            if len(chunks(seen)) >= len("r0 r1 r2 "):
                break
        first.cancel()
        last_seen = position + len(seen) - 1
        resumed = stub_b.SubscribeToTask(
            a2a_pb2.SubscribeToTaskRequest(id=task.id),
            metadata=(*METADATA, ("a2a-last-event-id", str(last_seen))),
        )
        rest = [event async for event in resumed]
    assert rest[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert chunks(seen + rest) == "".join(words)
    # The same task, read over JSON-RPC on B.
    async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
        reply = await http.post(
            server_b.url + "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task.id}},
            headers={"A2A-Version": "1.0"},
        )
    got = reply.json()["result"]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["artifacts"][0]["parts"][0]["text"] == "".join(words)


async def test_a_task_running_on_one_replica_is_canceled_over_grpc_from_the_other(
    grpc_replicas, cluster, fake_llm, marker
):
    (_, target_a), (_, target_b) = grpc_replicas
    fake_llm.script(
        tool_calls([("slow_tool", {"tag": marker, "seconds": 30})], when_user_contains=marker)
    )
    async with (
        grpc.aio.insecure_channel(target_a) as channel_a,
        grpc.aio.insecure_channel(target_b) as channel_b,
    ):
        stub_a, stub_b = (
            a2a_pb2_grpc.A2AServiceStub(channel_a),
            a2a_pb2_grpc.A2AServiceStub(channel_b),
        )
        task = (await stub_a.SendMessage(send_request(marker), metadata=METADATA)).task
        await asyncio.to_thread(
            wait_until, lambda: bool(cluster.tool_runs(marker)[0]), 20, "the turn's tool running"
        )
        canceled = await stub_b.CancelTask(a2a_pb2.CancelTaskRequest(id=task.id), metadata=METADATA)
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
        got = await stub_a.GetTask(a2a_pb2.GetTaskRequest(id=task.id), metadata=METADATA)
        assert got.status.state == a2a_pb2.TASK_STATE_CANCELED
