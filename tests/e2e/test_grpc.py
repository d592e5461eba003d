"""The gRPC binding (A2A_GRPC_PORT) of a real `a2a-server`, driven by the official a2a-sdk client.

The 1.0 client is built from our agent card with gRPC as its only transport (the card's `GRPC`
interface is a `host:port` target the SDK hands to its channel); the 0.3 service is driven by the
SDK's 0.3 compatibility transport. Errors are read as a gRPC client reads them: the status code,
and the `google.rpc.Status` in the trailers with its ErrorInfo. A task is one task on every
binding: made over gRPC, read over JSON-RPC and HTTP+JSON, and the reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.compat.v0_3.grpc_transport import CompatGrpcTransport
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import TaskNotFoundError
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.e2e.harness import free_port
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

KEY = "grpc-test-key-0123456789"
GRPC_PORT = free_port()
BOB_KEY = "grpc-test-key-of-bob-9876"
SERVER_ENV = {
    "A2A_GRPC_PORT": str(GRPC_PORT),
    "A2A_API_KEYS": f"alice:{KEY},bob:{BOB_KEY}",
    "A2A_MAX_BODY_BYTES": str(64 * 1024),
    # Far above what a test asks of it, but for the one that floods it (as bob).
    "A2A_RATE_LIMIT": "40/second",
    "A2A_EXTENSIONS": '[{"uri": "urn:test:grpc-ext", "description": "An extension to activate."}]',
}
AUTH = {"authorization": f"Bearer {KEY}"}
METADATA = (("a2a-version", "1.0"), ("x-api-key", KEY))
TARGET = f"127.0.0.1:{GRPC_PORT}"


def call_context() -> ClientCallContext:
    return ClientCallContext(service_parameters=dict(AUTH))


def message(text_: str, *, task_id: str = "", context_id: str = "") -> a2a_pb2.Message:
    return a2a_pb2.Message(
        message_id=f"m-{abs(hash((text_, task_id)))}",
        role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text=text_)],
        task_id=task_id,
        context_id=context_id,
    )


def send_request(text_: str, *, blocking: bool = True) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=message(text_),
        configuration=a2a_pb2.SendMessageConfiguration(return_immediately=not blocking),
    )


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of the google.rpc.Status in the call's trailers."""
    details = dict(error.trailing_metadata() or ())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(details)
    assert status.code == error.code().value[0] and status.message == error.details()
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == "a2a-protocol.org"
    return info


@pytest.fixture
async def card(server) -> a2a_pb2.AgentCard:
    async with httpx.AsyncClient(trust_env=False, headers={"A2A-Version": "1.0"}) as http:
        return await A2ACardResolver(http, server.url).get_agent_card()


@pytest.fixture
async def client(card) -> AsyncIterator[Any]:
    """The SDK's client from our card, gRPC only (blocking sends: streaming off)."""
    config = ClientConfig(
        streaming=False,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(card)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def stub(server) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    async with grpc.aio.insecure_channel(TARGET) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


async def test_the_card_lists_grpc_at_a_target_the_sdk_connects_to(card):
    grpc_interfaces = [
        (interface.url, interface.protocol_version)
        for interface in card.supported_interfaces
        if interface.protocol_binding == "GRPC"
    ]
    assert grpc_interfaces == [(TARGET, "1.0"), (TARGET, "0.3")]


async def test_send_get_list_over_the_sdk_client(client, fake_llm, marker):
    fake_llm.script(text("Hello over gRPC.", when_user_contains=marker))
    [response] = [
        event async for event in client.send_message(send_request(marker), context=call_context())
    ]
    task = response.task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task
    assert task.artifacts[0].parts[0].text == "Hello over gRPC."
    got = await client.get_task(
        a2a_pb2.GetTaskRequest(id=task.id, history_length=1), context=call_context()
    )
    assert got.id == task.id and len(got.history) == 1
    listed = await client.list_tasks(
        a2a_pb2.ListTasksRequest(context_id=task.context_id), context=call_context()
    )
    assert [item.id for item in listed.tasks] == [task.id] and listed.total_size == 1


async def test_stream_over_the_sdk_client(card, fake_llm, marker):
    fake_llm.script(text(["Str", "eam", "ed."], when_user_contains=marker))
    config = ClientConfig(
        supported_protocol_bindings=["GRPC"], grpc_channel_factory=grpc.aio.insecure_channel
    )
    client = ClientFactory(config).create(card)
    try:
        events = [
            event
            async for event in client.send_message(send_request(marker), context=call_context())
        ]
    finally:
        await client.close()
    assert events[0].HasField("task")
    assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED
    chunks = [
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    ]
    assert "".join(chunks) == "Streamed."


async def test_cancel_a_running_task(client, fake_llm, marker):
    fake_llm.script(
        tool_calls([("slow_echo", {"text": "x", "seconds": 20})], when_user_contains=marker)
    )
    [response] = [
        event
        async for event in client.send_message(
            send_request(marker, blocking=False), context=call_context()
        )
    ]
    task_id = response.task.id
    for _ in range(100):  # until the turn runs (its tool call started)
        got = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=call_context())
        if got.status.state == a2a_pb2.TASK_STATE_WORKING:
            break
        await asyncio.sleep(0.05)
    canceled = await client.cancel_task(
        a2a_pb2.CancelTaskRequest(id=task_id), context=call_context()
    )
    assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
    got = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=call_context())
    assert got.status.state == a2a_pb2.TASK_STATE_CANCELED


async def test_subscribe_then_resume_from_the_last_position_seen(stub, fake_llm, marker):
    words = [f"w{n} " for n in range(12)]
    fake_llm.script(text(words, chunk_delay=0.1, when_user_contains=marker))
    sent = await stub.SendMessage(send_request(marker, blocking=False), metadata=METADATA)
    task_id = sent.task.id
    first = stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=task_id), metadata=METADATA)
    position = int(dict(await first.initial_metadata())["a2a-first-event-id"])
    seen: list[a2a_pb2.StreamResponse] = []
    async for event in first:
        seen.append(event)
        if sum(event.HasField("artifact_update") for event in seen) == 3:
            break
    first.cancel()  # the connection "drops" after three chunks
    last_seen = position + len(seen) - 1
    resumed = stub.SubscribeToTask(
        a2a_pb2.SubscribeToTaskRequest(id=task_id),
        metadata=(*METADATA, ("a2a-last-event-id", str(last_seen))),
    )
    assert int(dict(await resumed.initial_metadata())["a2a-first-event-id"]) == last_seen + 1
    rest = [event async for event in resumed]
    trailing = dict(await resumed.trailing_metadata())
    assert int(trailing["a2a-last-event-id"]) == last_seen + len(rest)
    assert seen[0].HasField("task") and not rest[0].HasField("task")
    assert rest[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED
    chunks = [
        part.text
        for event in seen + rest
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    ]
    assert "".join(chunks) == "".join(words)  # nothing missed, nothing twice


async def test_an_unknown_task_is_not_found_with_its_error_info(client, stub):
    with pytest.raises(TaskNotFoundError):
        await client.get_task(a2a_pb2.GetTaskRequest(id="no-such-task"), context=call_context())
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.GetTask(a2a_pb2.GetTaskRequest(id="no-such-task"), metadata=METADATA)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    info = error_info(raised.value)
    assert info.reason == "TASK_NOT_FOUND" and info.metadata["taskId"] == "no-such-task"


@pytest.mark.parametrize(
    "metadata",
    [(("a2a-version", "1.0"),), (("a2a-version", "1.0"), ("authorization", "Bearer wrong"))],
    ids=["missing", "wrong"],
)
async def test_without_valid_credentials_the_call_is_unauthenticated(stub, metadata):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=metadata)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(raised.value).reason == "UNAUTHENTICATED"


async def test_an_unsupported_version_is_refused(stub):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ListTasks(
            a2a_pb2.ListTasksRequest(), metadata=(("a2a-version", "9.0"), ("x-api-key", KEY))
        )
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(raised.value).reason == "VERSION_NOT_SUPPORTED"


async def test_a_malformed_message_is_invalid_argument(server):
    async with grpc.aio.insecure_channel(TARGET) as channel:
        send = channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await send(b"\x0a\xff\xff\xff\xff\x0f", metadata=METADATA)  # a length past the end
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(raised.value).reason == "INVALID_REQUEST"


async def test_a_message_over_the_body_limit_is_resource_exhausted(stub, rpc):
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.SendMessage(send_request("x" * 70_000), metadata=METADATA)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=METADATA)
    assert all(len(task.history[0].parts[0].text) < 70_000 for task in listed.tasks)


async def test_a_task_made_over_grpc_is_the_task_over_json_rpc_and_http_json(
    stub, server, fake_llm, marker
):
    fake_llm.script(text("One task, three bindings.", when_user_contains=marker))
    task = (await stub.SendMessage(send_request(marker), metadata=METADATA)).task
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(trust_env=False, base_url=server.url, headers=headers) as http:
        jsonrpc = await http.post(
            "/", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task.id}}
        )
        rest = await http.get(f"/tasks/{task.id}")
    for seen in (jsonrpc.json()["result"], rest.json()):
        assert seen["id"] == task.id and seen["contextId"] == task.context_id
        assert seen["status"]["state"] == "TASK_STATE_COMPLETED"
        assert seen["artifacts"][0]["parts"][0]["text"] == "One task, three bindings."


async def test_a_task_made_over_json_rpc_is_the_task_over_grpc(stub, server, fake_llm, marker):
    fake_llm.script(text("Made over JSON-RPC.", when_user_contains=marker))
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {KEY}"}
    params = {"message": {"messageId": marker, "role": "ROLE_USER", "parts": [{"text": marker}]}}
    async with httpx.AsyncClient(trust_env=False, base_url=server.url, headers=headers) as http:
        sent = await http.post(
            "/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        )
    task_id = sent.json()["result"]["task"]["id"]
    task = await stub.GetTask(a2a_pb2.GetTaskRequest(id=task_id), metadata=METADATA)
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "Made over JSON-RPC."
    assert [item.role for item in task.history] == [a2a_pb2.ROLE_USER, a2a_pb2.ROLE_AGENT]


async def test_the_03_service_with_the_sdk_compat_client(card, fake_llm, marker):
    transport = CompatGrpcTransport.create(
        card, TARGET, ClientConfig(grpc_channel_factory=grpc.aio.insecure_channel)
    )
    context = call_context()
    try:
        fake_llm.script(text("Hello, 0.3.", when_user_contains=f"{marker}-a"))
        sent = await transport.send_message(send_request(f"{marker}-a"), context=context)
        assert sent.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
        assert sent.task.artifacts[0].parts[0].text == "Hello, 0.3."
        got = await transport.get_task(a2a_pb2.GetTaskRequest(id=sent.task.id), context=context)
        assert got.id == sent.task.id
        fake_llm.script(text(["0.", "3 ", "stream"], when_user_contains=f"{marker}-b"))
        events = [
            event
            async for event in transport.send_message_streaming(
                send_request(f"{marker}-b"), context=context
            )
        ]
        assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED
        fake_llm.script(
            tool_calls([("ask_user", {"question": "?"})], when_user_contains=f"{marker}-c")
        )
        waiting = await transport.send_message(send_request(f"{marker}-c"), context=context)
        canceled = await transport.cancel_task(
            a2a_pb2.CancelTaskRequest(id=waiting.task.id), context=context
        )
        assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
        with pytest.raises(A2AClientError):
            await transport.get_task(a2a_pb2.GetTaskRequest(id="no-such-task"), context=context)
    finally:
        await transport.close()


async def test_the_03_service_on_the_wire(server):
    """0.3's own names (`tasks/{id}`, TaskSubscription, GetAgentCard), under `a2a-version: 0.3`."""
    metadata = (("a2a-version", "0.3"), ("x-api-key", KEY))
    async with grpc.aio.insecure_channel(TARGET) as channel:
        stub = a2a_v0_3_pb2_grpc.A2AServiceStub(channel)
        card = await stub.GetAgentCard(a2a_v0_3_pb2.GetAgentCardRequest(), metadata=metadata)
        assert card.name and TARGET in [i.url for i in card.additional_interfaces]
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.GetTask(a2a_v0_3_pb2.GetTaskRequest(name="tasks/nope"), metadata=metadata)
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        assert error_info(raised.value).reason == "TASK_NOT_FOUND"


async def test_health_and_reflection(server):
    async with grpc.aio.insecure_channel(TARGET) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "lf.a2a.v1.A2AService", "a2a.v1.A2AService"):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [answer] = [each async for each in reflection.ServerReflectionInfo(iter([request]))]
        names = {service.name for service in answer.list_services_response.service}
        assert {"lf.a2a.v1.A2AService", "a2a.v1.A2AService", "grpc.health.v1.Health"} <= names


async def test_over_the_rate_limit_is_resource_exhausted_with_a_retry_hint(stub):
    metadata = (("a2a-version", "1.0"), ("x-api-key", BOB_KEY))
    calls = [stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=metadata) for _ in range(120)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    refused = [each for each in outcomes if isinstance(each, grpc.aio.AioRpcError)]
    assert refused and len(refused) < len(outcomes)
    assert {each.code() for each in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    status = status_pb2.Status.FromString(
        dict(refused[0].trailing_metadata())["grpc-status-details-bin"]
    )
    info, retry = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and info.reason == "RATE_LIMITED"
    assert status.details[1].Unpack(retry) and retry.retry_delay.seconds >= 1


async def test_grpc_calls_are_counted_in_the_metrics(stub, server):
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.GetTask(a2a_pb2.GetTaskRequest(id="counted-missing"), metadata=METADATA)
    await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=METADATA)
    async with httpx.AsyncClient(trust_env=False) as http:
        metrics = (await http.get(f"{server.url}/metrics")).text
    assert 'a2a_requests_total{binding="grpc",method="GetTask",outcome="TASK_NOT_FOUND"}' in metrics
    assert 'a2a_requests_total{binding="grpc",method="ListTasks",outcome="ok"}' in metrics


async def test_random_bytes_to_every_method_get_the_bindings_errors_never_a_crash(stub):
    """Bytes that are not the method's message (or are one, by chance, with nonsense in it):
    an A2A error status, never INTERNAL or UNKNOWN; the server answers normally afterwards."""
    rng = random.Random(42)
    allowed = {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OK,
    }
    services = [
        (a2a_pb2.DESCRIPTOR.services_by_name["A2AService"], "1.0"),
        (a2a_v0_3_pb2.DESCRIPTOR.services_by_name["A2AService"], "0.3"),
    ]
    async with grpc.aio.insecure_channel(TARGET) as channel:
        for service, version in services:
            metadata = (("a2a-version", version), ("x-api-key", KEY))
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                for _ in range(6):
                    await asyncio.sleep(0.03)  # within the module's A2A_RATE_LIMIT
                    body = rng.randbytes(rng.randrange(1, 64))
                    if method.server_streaming:
                        call = channel.unary_stream(path)(body, metadata=metadata, timeout=10)
                        with contextlib.suppress(grpc.aio.AioRpcError):
                            async for _ in call:
                                pass
                    else:
                        call = channel.unary_unary(path)(body, metadata=metadata, timeout=10)
                        with contextlib.suppress(grpc.aio.AioRpcError):
                            await call
                    code = await call.code()
                    assert code in allowed, (path, body, code, await call.details())
    listed = await stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=METADATA)
    assert listed.page_size == 50


async def test_a_tenants_task_is_the_tenants_on_every_binding(stub, server, fake_llm, marker):
    fake_llm.script(text("In a tenant.", when_user_contains=marker))
    request = send_request(marker)
    request.tenant = "acme"
    task = (await stub.SendMessage(request, metadata=METADATA)).task
    got = await stub.GetTask(a2a_pb2.GetTaskRequest(id=task.id, tenant="acme"), metadata=METADATA)
    assert got.status.state == a2a_pb2.TASK_STATE_COMPLETED
    for elsewhere in ("", "other"):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.GetTask(
                a2a_pb2.GetTaskRequest(id=task.id, tenant=elsewhere), metadata=METADATA
            )
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(trust_env=False, base_url=server.url, headers=headers) as http:
        reply = await http.get(f"/acme/tasks/{task.id}")
    assert reply.status_code == 200 and reply.json()["id"] == task.id


async def test_a_requested_extension_is_activated_and_echoed(stub):
    call = stub.ListTasks(
        a2a_pb2.ListTasksRequest(),
        metadata=(*METADATA, ("a2a-extensions", "urn:test:grpc-ext, urn:test:unknown")),
    )
    await call
    assert dict(await call.initial_metadata())["a2a-extensions"] == "urn:test:grpc-ext"
    plain = stub.ListTasks(a2a_pb2.ListTasksRequest(), metadata=METADATA)
    await plain
    assert "a2a-extensions" not in dict(await plain.initial_metadata())
