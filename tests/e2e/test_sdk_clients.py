"""The official a2a-sdk client against our server: both bindings, both generations.

The SDK's 1.0 transports (`JsonRpcTransport`, `RestTransport`) and its 0.3 compatibility
transports (`CompatJsonRpcTransport`, `CompatRestTransport`, which speak 0.3 on the wire: `message/send`,
`/v1/message:send`, `kind`s and lowercase states) each run every operation their generation has:
send, stream, get, list (1.0 only), cancel, subscribe, the extended card. The SDK parses every
answer into its own types, so a shape it does not accept fails here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.client.transports.rest import RestTransport
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

EXTENDED_SKILL = {"id": "billing", "name": "Billing", "description": "Invoices.", "tags": ["x"]}
SERVER_ENV = {"A2A_EXTENDED_CARD": json.dumps({"skills": [EXTENDED_SKILL]})}

TRANSPORTS: dict[str, Callable[..., Any]] = {
    "jsonrpc-1.0": JsonRpcTransport,
    "rest-1.0": RestTransport,
    "jsonrpc-0.3": CompatJsonRpcTransport,
    "rest-0.3": CompatRestTransport,
}


@pytest.fixture(params=sorted(TRANSPORTS))
async def transport(request, server) -> AsyncIterator[Any]:
    # A 0.3 client sends A2A-Version: 0.3 itself; a 1.0 one gets it from the client's headers.
    version = "0.3" if request.param.endswith("0.3") else "1.0"
    async with httpx.AsyncClient(
        trust_env=False, timeout=30, headers={"A2A-Version": version}
    ) as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        client = TRANSPORTS[request.param](http, card, server.url)
        client.generation = version
        yield client


def request_for(text_: str, *, blocking: bool = True, task_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=f"m-{text_[-12:]}-{id(text_)}",
        role=Role.ROLE_USER,
        parts=[Part(text=text_)],
        task_id=task_id,
    )
    configuration = SendMessageConfiguration(return_immediately=not blocking)
    return SendMessageRequest(message=message, configuration=configuration)


async def test_send_get_and_list(transport, fake_llm, marker):
    fake_llm.script(text("Hello from the agent.", when_user_contains=marker))
    response = await transport.send_message(request_for(f"hi {marker}"))
    task = response.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert task.artifacts[0].parts[0].text == "Hello from the agent."
    assert [message.role for message in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]

    got = await transport.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert got.id == task.id and len(got.history) == 1
    if transport.generation == "1.0":
        listed = await transport.list_tasks(ListTasksRequest(context_id=task.context_id))
        assert [item.id for item in listed.tasks] == [task.id]


async def test_stream(transport, fake_llm, marker):
    fake_llm.script(text(["Str", "eam", "ed."], when_user_contains=marker))
    events = [event async for event in transport.send_message_streaming(request_for(marker))]
    assert events[0].HasField("task")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    ]
    assert "".join(chunks) == "Streamed."


async def test_cancel_an_input_required_task(transport, fake_llm, marker):
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    task = (await transport.send_message(request_for(f"ask {marker}"))).task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    canceled = await transport.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED


async def test_continue_an_input_required_task(transport, fake_llm, marker):
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    task = (await transport.send_message(request_for(f"ask {marker}"))).task
    answer = f"blue {marker}-answer"
    fake_llm.script(text("Blue it is.", when_user_contains=f"{marker}-answer"))
    request = request_for(answer, task_id=task.id)
    request.message.context_id = task.context_id
    done = (await transport.send_message(request)).task
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED


async def test_subscribe_to_a_running_task(transport, fake_llm, marker):
    fake_llm.script(text("Eventually.", delay=1.0, when_user_contains=marker))
    task = (await transport.send_message(request_for(f"slow {marker}", blocking=False))).task
    events = [event async for event in transport.subscribe(SubscribeToTaskRequest(id=task.id))]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_push_configs(transport, fake_llm, marker):
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    task = (await transport.send_message(request_for(f"ask {marker}"))).task
    config = TaskPushNotificationConfig(
        task_id=task.id, id="cfg-1", url="https://hooks.example/a2a", token="tok"
    )
    config.authentication.scheme = "Bearer"
    config.authentication.credentials = "secret"
    created = await transport.create_task_push_notification_config(config)
    assert (created.task_id, created.id, created.url) == (task.id, "cfg-1", config.url)
    assert created.authentication.credentials == "secret"
    got = await transport.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
    )
    assert got.token == "tok"
    # The SDK's 0.3 REST transport has no list or delete (0.3's HTTP+JSON binding lacks them
    # in its client); they are checked on the other three.
    if isinstance(transport, CompatRestTransport):
        return
    listed = await transport.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [item.id for item in listed.configs] == ["cfg-1"]
    await transport.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="cfg-1")
    )
    listed = await transport.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert list(listed.configs) == []


async def test_extended_card(transport):
    card = await transport.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert "Billing" in [skill.name for skill in card.skills]
    assert card.capabilities.extended_agent_card
