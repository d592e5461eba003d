"""AGENTS_FILE over gRPC: an agent's card names its gRPC interface with `tenant` = its name, the
official a2a-sdk client built from that card reaches that agent, a request naming no tenant is
the first agent's, and an unknown name is NOT_FOUND."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.e2e.harness import ServerProcess, free_port
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)

GRPC_PORT = free_port()
TARGET = f"127.0.0.1:{GRPC_PORT}"
METADATA = (("a2a-version", "1.0"),)
AGENTS_YAML = """
agents:
  - name: triage
    system_prompt: PROMPT-TRIAGE sorts.
  - name: research
    system_prompt: PROMPT-RESEARCH finds.
"""


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    path = tmp_path_factory.mktemp("agents") / "agents.yaml"
    path.write_text(AGENTS_YAML)
    env = {"AGENTS_FILE": str(path), "A2A_GRPC_PORT": str(GRPC_PORT)}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture
async def stub(server) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    async with grpc.aio.insecure_channel(TARGET) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def system_prompt(fake_llm, marker: str) -> str:
    (call,) = fake_llm.requests_for(marker)
    return " ".join(m["content"] for m in call["messages"] if m["role"] == "system")


def request(text_: str, tenant: str = "") -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        message_id=f"m-{abs(hash(text_))}", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text_)]
    )
    return a2a_pb2.SendMessageRequest(message=message, tenant=tenant)


async def test_the_sdk_client_from_an_agents_card_reaches_that_agent_over_grpc(
    server, fake_llm, marker
):
    fake_llm.script(text("research over gRPC", when_user_contains=marker))
    async with httpx.AsyncClient(trust_env=False, headers={"A2A-Version": "1.0"}) as http:
        card = await A2ACardResolver(http, f"{server.url}/research").get_agent_card()
    grpc_interfaces = [
        (interface.url, interface.tenant)
        for interface in card.supported_interfaces
        if interface.protocol_binding == "GRPC"
    ]
    assert grpc_interfaces == [(TARGET, "research"), (TARGET, "research")]
    config = ClientConfig(
        streaming=False,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(card)
    try:
        [response] = [event async for event in client.send_message(request(marker))]
    finally:
        await client.close()
    assert response.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert "PROMPT-RESEARCH" in system_prompt(fake_llm, marker)


async def test_no_tenant_is_the_first_agent_and_an_unknown_one_is_not_found(stub, fake_llm, marker):
    fake_llm.script(text("triage over gRPC", when_user_contains=marker))
    sent = await stub.SendMessage(request(marker), metadata=METADATA)
    assert "PROMPT-TRIAGE" in system_prompt(fake_llm, marker)
    got = await stub.GetTask(
        a2a_pb2.GetTaskRequest(id=sent.task.id, tenant="triage"), metadata=METADATA
    )
    assert got.id == sent.task.id
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.SendMessage(request("nobody", tenant="nobody"), metadata=METADATA)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
