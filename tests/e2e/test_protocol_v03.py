"""A2A 0.3 on the same endpoints as 1.0: JSON-RPC `message/send` & co. and HTTP+JSON `/v1/...`.

What a 0.3 client sends (no `A2A-Version`, or `0.3`), checked against the 0.3 JSON Schema
(JSON-RPC) and the 0.3 proto (HTTP+JSON); a task made by one generation read and canceled through
the other; each generation's shape refused by the other with -32602 naming the field; the version
header honoured (-32009).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.harness import new_id
from tests.e2e.wire import assert_valid
from tests.e2e.wire_v03 import assert_valid_v03, assert_valid_v03_proto
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=20) as client:
        yield client


def rpc03(http: httpx.Client, method: str, params: Any, **headers: str) -> dict[str, Any]:
    payload = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    response = http.post("/", json=payload, headers=headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == 7 and body["jsonrpc"] == "2.0", body
    return body


def message03(text_: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": new_id("m-"),
        "parts": [{"kind": "text", "text": text_}],
        **fields,
    }


def sse_data(response: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]


def ask_user(fake_llm, marker: str) -> None:
    fake_llm.script(
        tool_calls([("ask_user", {"question": "Which colour?"})], when_user_contains=marker)
    )


# --- the card ------------------------------------------------------------------------------------


def test_the_card_serves_both_generations(http):
    card = http.get("/.well-known/agent-card.json").json()
    assert_valid_v03("AgentCard", card)
    assert card["protocolVersion"] == "0.3.0"
    assert card["preferredTransport"] == "JSONRPC"
    assert card["url"].startswith("http://127.0.0.1:")
    transports = {item["transport"] for item in card["additionalInterfaces"]}
    assert transports == {"JSONRPC", "HTTP+JSON"}
    # 1.0 clients take the first interface of a binding: the 1.0 ones come first.
    versions = [item["protocolVersion"] for item in card["supportedInterfaces"]]
    assert versions == ["1.0", "1.0", "0.3", "0.3"]
    assert_valid("agent_card", card)  # less the 0.3 members, as a 1.0 parser ignores them


# --- JSON-RPC 0.3 -------------------------------------------------------------------------------


def test_message_send_answers_a_03_task(http, fake_llm, marker):
    fake_llm.script(text("Blue.", when_user_contains=marker))
    body = rpc03(http, "message/send", {"message": message03(f"colour? {marker}")})
    assert_valid_v03("SendMessageSuccessResponse", body)
    task = body["result"]
    assert task["kind"] == "task"
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "Blue."}]
    assert [message["role"] for message in task["history"]] == ["user", "agent"]
    assert all(message["kind"] == "message" for message in task["history"])


def test_message_stream_sends_03_events_and_final(http, fake_llm, marker):
    fake_llm.script(text(["Bl", "ue."], when_user_contains=marker))
    payload = {
        "jsonrpc": "2.0",
        "id": "s1",
        "method": "message/stream",
        "params": {"message": message03(f"stream {marker}")},
    }
    response = http.post("/", json=payload)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_data(response)
    for event in events:
        assert_valid_v03("SendStreamingMessageSuccessResponse", event)
    results = [event["result"] for event in events]
    assert results[0]["kind"] == "task"
    assert {result["kind"] for result in results[1:]} <= {"status-update", "artifact-update"}
    last = results[-1]
    assert last["kind"] == "status-update" and last["final"] is True
    assert last["status"]["state"] == "completed"
    assert not any(result.get("final") for result in results[:-1] if "final" in result)
    text_ = "".join(
        part["text"]
        for result in results
        if result["kind"] == "artifact-update"
        for part in result["artifact"]["parts"]
    )
    assert text_ == "Blue."


def test_a_03_task_is_continued_and_read_through_10(http, rpc, fake_llm, marker):
    ask_user(fake_llm, marker)
    body = rpc03(http, "message/send", {"message": message03(f"paint {marker}")})
    task = body["result"]
    assert task["status"]["state"] == "input-required"
    assert task["status"]["message"]["parts"][0]["text"] == "Which colour?"

    # Read through 1.0: the same task, in the 1.0 shape.
    v1 = rpc.get_task(task["id"])
    assert_valid("task", v1)
    assert v1["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    # Answered through 0.3 (taskId on the message), completed.
    fake_llm.script(text("Painted red.", when_user_contains="red please"))
    answer = message03("red please", taskId=task["id"], contextId=task["contextId"])
    done = rpc03(http, "message/send", {"message": answer})["result"]
    assert done["status"]["state"] == "completed", done["status"]
    got = rpc03(http, "tasks/get", {"id": task["id"], "historyLength": 1})
    assert_valid_v03("GetTaskSuccessResponse", got)
    assert len(got["result"]["history"]) == 1


def test_a_10_task_is_canceled_through_03(http, rpc, fake_llm, marker):
    ask_user(fake_llm, marker)
    task = rpc.send(f"wait {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    body = rpc03(http, "tasks/cancel", {"id": task["id"]})
    assert_valid_v03("CancelTaskSuccessResponse", body)
    assert body["result"]["status"]["state"] == "canceled"
    assert rpc.get_task(task["id"])["status"]["state"] == "TASK_STATE_CANCELED"


def test_resubscribe_follows_a_running_task_in_03(http, fake_llm, marker):
    fake_llm.script(text("Done.", delay=1.0, when_user_contains=marker))
    params = {"message": message03(f"go {marker}"), "configuration": {"blocking": False}}
    task = rpc03(http, "message/send", params)["result"]
    assert task["status"]["state"] in ("submitted", "working")
    payload = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tasks/resubscribe",
        "params": {"id": task["id"]},
    }
    events = sse_data(http.post("/", json=payload))
    for event in events:
        assert_valid_v03("SendStreamingMessageSuccessResponse", event)
    assert events[-1]["result"]["status"]["state"] == "completed"
    assert events[-1]["result"]["final"] is True
    # A settled task has nothing to follow (-32004); a 0.3 client of a streaming method reads
    # SSE only, so the error comes as the stream's one event.
    payload = {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "tasks/resubscribe",
        "params": {"id": task["id"]},
    }
    response = http.post("/", json=payload)
    assert response.headers["content-type"].startswith("text/event-stream")
    [error] = sse_data(response)
    assert_valid_v03("JSONRPCErrorResponse", error)
    assert error["id"] == 10 and error["error"]["code"] == -32004
    payload["params"] = {"id": "no-such-task"}
    [missing] = sse_data(http.post("/", json=payload))
    assert missing["error"]["code"] == -32001


def test_03_errors_keep_their_codes(http):
    missing = rpc03(http, "tasks/get", {"id": "no-such-task"})
    assert_valid_v03("JSONRPCErrorResponse", missing)
    assert missing["error"]["code"] == -32001
    card = rpc03(http, "agent/getAuthenticatedExtendedCard", {})
    assert card["error"]["code"] == -32007
    assert rpc03(http, "tasks/list", {})["error"]["code"] == -32601


@pytest.mark.parametrize(
    ("request_object", "code"),
    [
        ({"method": "message/ssend", "params": {}}, -32601),
        ({"method": "message/send", "params": {"": "not a message"}}, -32602),
        ({"method": "tasks/get", "params": {"id": "no-such-task"}}, -32001),
    ],
)
def test_a_03_request_without_an_id_is_answered(http, request_object, code):
    # 0.3 servers answer it (id null), as 0.3 clients and the 0.3 TCK expect; a 1.0
    # notification stays unanswered (tests/e2e/test_hostile_input.py).
    response = http.post("/", json={"jsonrpc": "2.0", **request_object})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] is None and body["error"]["code"] == code, body


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "ROLE_USER", "messageId": "a", "parts": [{"text": "hi"}]}, "message.role"),
        ({"role": "user", "messageId": "a", "parts": [{"raw": "aGk="}]}, "message.parts[0]"),
        (
            {"role": "user", "messageId": "a", "parts": [{"kind": "file", "file": {}}]},
            "message.parts[0].file",
        ),
    ],
)
def test_a_10_shape_sent_as_03_names_the_field(http, message, field):
    body = rpc03(http, "message/send", {"message": message})
    assert body["error"]["code"] == -32602, body
    assert body["error"]["data"][0]["metadata"]["field"] == field
    assert field in body["error"]["message"]


def test_a_03_shape_sent_as_10_is_refused(rpc):
    params = {
        "message": {"role": "user", "messageId": "a", "parts": [{"kind": "text", "text": "x"}]}
    }
    error = rpc.error("SendMessage", params)
    assert error["code"] == -32602
    assert "role" in error["message"]


@pytest.mark.parametrize(
    ("method", "version"),
    [("message/send", "1.0"), ("SendMessage", "0.3"), ("message/send", "2.0"), ("GetTask", "0.2")],
)
def test_the_version_header_is_honoured(http, method, version):
    params = {"message": message03("x")} if "end" in method.lower() else {"id": "x"}
    body = rpc03(http, method, params, **{"A2A-Version": version})
    assert body["error"]["code"] == -32009, body


def test_03_with_its_version_header_is_served(http, fake_llm, marker):
    fake_llm.script(text("ok", when_user_contains=marker))
    body = rpc03(
        http, "message/send", {"message": message03(f"v {marker}")}, **{"A2A-Version": "0.3"}
    )
    assert body["result"]["status"]["state"] == "completed"


# --- HTTP+JSON 0.3 (/v1) --------------------------------------------------------------------------


def proto_message(text_: str, **fields: Any) -> dict[str, Any]:
    # The 0.3 SDK sends proto field names (message_id), as MessageToDict(preserving...) does.
    return {"message_id": new_id("m-"), "role": "ROLE_USER", "content": [{"text": text_}], **fields}


def test_v1_send_get_and_cancel(http, fake_llm, marker):
    fake_llm.script(text("Green.", when_user_contains=marker))
    response = http.post(
        "/v1/message:send",
        json={"request": proto_message(f"colour {marker}"), "configuration": {"blocking": True}},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert_valid_v03_proto("SendMessageResponse", body)
    task = body["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "Green."}]
    assert task["history"][0]["content"] == [{"text": f"colour {marker}"}]

    got = http.get(f"/v1/tasks/{task['id']}", params={"history_length": 1})
    assert_valid_v03_proto("Task", got.json())
    assert len(got.json()["history"]) == 1

    refused = http.post(f"/v1/tasks/{task['id']}:cancel", json={})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["status"] == "FAILED_PRECONDITION"


def test_v1_cancel_names_the_state_as_03_spells_it(http, fake_llm, marker):
    ask_user(fake_llm, marker)
    body = http.post("/v1/message:send", json={"request": proto_message(f"ask {marker}")}).json()
    assert body["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = http.post(f"/v1/tasks/{body['task']['id']}:cancel", json={})
    assert canceled.status_code == 200, canceled.text
    assert_valid_v03_proto("Task", canceled.json())
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELLED"


def test_v1_stream_and_subscribe(http, fake_llm, marker):
    fake_llm.script(text(["Re", "d."], when_user_contains=marker))
    response = http.post("/v1/message:stream", json={"message": proto_message(f"s {marker}")})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_data(response)
    for event in events:
        assert_valid_v03_proto("StreamResponse", event)
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["final"] is True
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    fake_llm.script(text("Later.", delay=1.0, when_user_contains=f"slow {marker}"))
    body = {"request": proto_message(f"slow {marker}"), "configuration": {"blocking": False}}
    task = http.post("/v1/message:send", json=body).json()["task"]
    replay = sse_data(http.post(f"/v1/tasks/{task['id']}:subscribe"))
    for event in replay:
        assert_valid_v03_proto("StreamResponse", event)
    assert replay[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    settled = http.get(f"/v1/tasks/{task['id']}:subscribe")
    assert settled.status_code == 400
    assert settled.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


def test_v1_refuses_a_10_body_naming_the_field(http):
    body = {"message": {"messageId": "a", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    response = http.post("/v1/message:send", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["details"][0]["metadata"]["field"] == "message.content"


def test_v1_has_no_list_and_refuses_a_10_version(http):
    assert http.get("/v1/tasks").status_code in (404, 405)
    response = http.post(
        "/v1/message:send",
        json={"request": proto_message("x")},
        headers={"A2A-Version": "1.0"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


def test_v1_push_configs_in_the_03_proto_shape(http, fake_llm, marker):
    ask_user(fake_llm, marker)
    task = http.post("/v1/message:send", json={"request": proto_message(f"ask {marker}")}).json()
    task_id = task["task"]["id"]
    body = {
        "parent": f"tasks/{task_id}",
        "config_id": "hook-1",
        "config": {
            "push_notification_config": {
                "url": "https://hooks.example/a2a",
                "token": "tok",
                "authentication": {"schemes": ["Bearer"], "credentials": "secret"},
            }
        },
    }
    created = http.post(f"/v1/tasks/{task_id}/pushNotificationConfigs", json=body)
    assert created.status_code == 200, created.text
    assert_valid_v03_proto("TaskPushNotificationConfig", created.json())
    assert created.json()["name"] == f"tasks/{task_id}/pushNotificationConfigs/hook-1"
    assert created.json()["pushNotificationConfig"]["authentication"] == {
        "schemes": ["Bearer"],
        "credentials": "secret",
    }
    listed = http.get(f"/v1/tasks/{task_id}/pushNotificationConfigs").json()
    assert_valid_v03_proto("ListTaskPushNotificationConfigResponse", listed)
    assert [c["pushNotificationConfig"]["id"] for c in listed["configs"]] == ["hook-1"]
    got = http.get(f"/v1/tasks/{task_id}/pushNotificationConfigs/hook-1").json()
    assert got == created.json()
    assert http.delete(f"/v1/tasks/{task_id}/pushNotificationConfigs/hook-1").json() == {}
    assert http.get(f"/v1/tasks/{task_id}/pushNotificationConfigs").json()["configs"] == []


def test_03_jsonrpc_push_configs(http, fake_llm, marker):
    ask_user(fake_llm, marker)
    task = rpc03(http, "message/send", {"message": message03(f"ask {marker}")})["result"]
    config = {"id": "h", "url": "https://hooks.example/x", "token": "t"}
    created = rpc03(
        http,
        "tasks/pushNotificationConfig/set",
        {"taskId": task["id"], "pushNotificationConfig": config},
    )
    assert_valid_v03("SetTaskPushNotificationConfigSuccessResponse", created)
    assert created["result"] == {"taskId": task["id"], "pushNotificationConfig": config}
    # 0.3 lets `get` leave the config id out: the task's config.
    got = rpc03(http, "tasks/pushNotificationConfig/get", {"id": task["id"]})
    assert_valid_v03("GetTaskPushNotificationConfigSuccessResponse", got)
    assert got["result"] == created["result"]
    listed = rpc03(http, "tasks/pushNotificationConfig/list", {"id": task["id"]})
    assert_valid_v03("ListTaskPushNotificationConfigSuccessResponse", listed)
    deleted = rpc03(
        http,
        "tasks/pushNotificationConfig/delete",
        {"id": task["id"], "pushNotificationConfigId": "h"},
    )
    assert_valid_v03("DeleteTaskPushNotificationConfigSuccessResponse", deleted)
    refused = rpc03(
        http,
        "tasks/pushNotificationConfig/set",
        {"taskId": task["id"], "pushNotificationConfig": {"url": "http://127.0.0.1/x"}},
    )
    assert refused["error"]["code"] == -32602


def test_a_03_config_set_without_an_id_is_the_default_one(http, fake_llm, marker):
    ask_user(fake_llm, marker)
    task = rpc03(http, "message/send", {"message": message03(f"ask {marker}")})["result"]
    params = {"taskId": task["id"], "pushNotificationConfig": {"url": "https://hooks.example/1"}}
    created = rpc03(http, "tasks/pushNotificationConfig/set", params)["result"]
    assert created["pushNotificationConfig"]["id"] == "default"
    params["pushNotificationConfig"] = {"url": "https://hooks.example/2"}
    rpc03(http, "tasks/pushNotificationConfig/set", params)  # replaces it
    got = rpc03(
        http,
        "tasks/pushNotificationConfig/get",
        {"id": task["id"], "pushNotificationConfigId": "default"},
    )["result"]
    assert got["pushNotificationConfig"]["url"] == "https://hooks.example/2"
    listed = rpc03(http, "tasks/pushNotificationConfig/list", {"id": task["id"]})["result"]
    assert len(listed) == 1
