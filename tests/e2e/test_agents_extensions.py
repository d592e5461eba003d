"""A2A extensions per agent (AGENTS_FILE's `extensions`), on a real server over JSON-RPC,
HTTP+JSON and gRPC.

`strict` requires REQUIRED_URI, `lenient` declares it optional, `plain` declares nothing of its
own and so has A2A_EXTENSIONS' (which requires DEFAULT_URI): an agent's `extensions` replace the
server-wide ones, so `strict` and `lenient` do not require DEFAULT_URI. `strict` is the first
agent, so the root (`/`) is its too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from tests.e2e.harness import ERROR_INFO_TYPE, ServerProcess, free_port, new_id, send_params
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)

REQUIRED_URI = "https://ext.example/agents/required/v1"
DEFAULT_URI = "https://ext.example/agents/server-default/v1"
GRPC_PORT = free_port()
AGENTS_YAML = f"""
agents:
  - name: strict
    extensions:
      - uri: {REQUIRED_URI}
        description: Needed by this agent only.
        required: true
        params: {{level: 2}}
  - name: lenient
    extensions: [{{uri: {REQUIRED_URI}}}]
  - name: plain
"""
V1 = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def server(fake_llm, tmp_path_factory):
    path = tmp_path_factory.mktemp("agents") / "agents.yaml"
    path.write_text(AGENTS_YAML)
    env = {
        "AGENTS_FILE": str(path),
        "A2A_EXTENSIONS": json.dumps([{"uri": DEFAULT_URI, "required": True}]),
        "A2A_GRPC_PORT": str(GRPC_PORT),
    }
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30, headers=V1) as client:
        yield client


@pytest.fixture
async def stub(server) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def declared(http: httpx.Client, path: str) -> list[dict[str, Any]]:
    card = http.get(f"{path}/.well-known/agent-card.json").json()
    return card["capabilities"].get("extensions", [])


def rpc(http: httpx.Client, path: str, text_: str, extensions: str | None = None) -> Any:
    headers = {"A2A-Extensions": extensions} if extensions else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params(text_)}
    response = http.post(f"{path}/", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response


def assert_refused(error: dict[str, Any], uri: str) -> None:
    assert error["code"] == -32008, error
    [info] = [detail for detail in error["data"] if detail["@type"] == ERROR_INFO_TYPE]
    assert (info["reason"], info["metadata"]) == ("EXTENSION_SUPPORT_REQUIRED", {"extensions": uri})


def test_each_agents_card_declares_its_own(http):
    strict = {
        "uri": REQUIRED_URI,
        "description": "Needed by this agent only.",
        "required": True,
        "params": {"level": 2},
    }
    assert declared(http, "/strict") == [strict]
    assert declared(http, "") == [strict]  # the root is the first agent
    assert declared(http, "/lenient") == [{"uri": REQUIRED_URI, "required": False}]
    assert declared(http, "/plain") == [{"uri": DEFAULT_URI, "required": True}]


def test_jsonrpc_a_required_one_is_required_of_its_agent_only(http, fake_llm, marker):
    fake_llm.script(text("Answered.", when_user_contains=marker))
    lenient = rpc(http, "/lenient", f"lenient {marker}").json()
    assert lenient["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", lenient
    assert_refused(rpc(http, "/strict", f"strict {marker}").json()["error"], REQUIRED_URI)
    assert_refused(rpc(http, "", f"root {marker}").json()["error"], REQUIRED_URI)
    # The tenant named in params is the agent's too (a request at the root naming it).
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "GetTask",
        "params": {"id": "t", "tenant": "strict"},
    }
    assert_refused(http.post("/", json=body).json()["error"], REQUIRED_URI)
    served = rpc(http, "/strict", f"strict {marker}", REQUIRED_URI)
    assert served.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert served.headers["A2A-Extensions"] == REQUIRED_URI
    # The server-wide one is required where no agent's own replace it, and only there.
    assert_refused(rpc(http, "/plain", f"plain {marker}").json()["error"], DEFAULT_URI)
    plain = rpc(http, "/plain", f"plain {marker}", DEFAULT_URI).json()
    assert plain["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_rest_a_required_one_is_required_of_its_agent_only(http, fake_llm, marker):
    fake_llm.script(text("Answered.", when_user_contains=marker))
    lenient = http.post("/lenient/message:send", json=send_params(f"lenient {marker}"))
    assert lenient.status_code == 200, lenient.text
    assert lenient.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = http.post("/strict/message:send", json=send_params(f"strict {marker}"))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["status"], error["details"][0]["reason"]) == (
        "FAILED_PRECONDITION",
        "EXTENSION_SUPPORT_REQUIRED",
    )
    assert error["details"][0]["metadata"] == {"extensions": REQUIRED_URI}
    served = http.post(
        "/strict/message:send",
        json=send_params(f"strict {marker}"),
        headers={"A2A-Extensions": REQUIRED_URI},
    )
    assert served.status_code == 200, served.text
    assert served.headers["A2A-Extensions"] == REQUIRED_URI


def grpc_request(text_: str, tenant: str) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        message_id=new_id("m-"), role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text_)]
    )
    return a2a_pb2.SendMessageRequest(message=message, tenant=tenant)


async def test_grpc_a_required_one_is_required_of_its_agent_only(stub, fake_llm, marker):
    fake_llm.script(text("Answered.", when_user_contains=marker))
    metadata = (("a2a-version", "1.0"),)
    lenient = await stub.SendMessage(
        grpc_request(f"lenient {marker}", "lenient"), metadata=metadata
    )
    assert lenient.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    for tenant in ("strict", ""):  # "": the root's, the first agent's
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.SendMessage(grpc_request(f"strict {marker}", tenant), metadata=metadata)
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert REQUIRED_URI in (raised.value.details() or "")
    call = stub.SendMessage(
        grpc_request(f"strict {marker}", "strict"),
        metadata=(*metadata, ("a2a-extensions", REQUIRED_URI)),
    )
    served = await call
    assert served.task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert dict(await call.initial_metadata())["a2a-extensions"] == REQUIRED_URI
