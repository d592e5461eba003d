"""Push notifications: configs on both bindings and generations, delivery to a real webhook on
127.0.0.1 (bodies, headers, retries), a webhook that hangs or fails never slowing a turn, and the
SSRF guard on the URL."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.e2e.harness import new_id
from tests.e2e.webhook import WebhookReceiver
from tests.e2e.wire import assert_valid
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

# The receiver is on loopback: allowed explicitly, as an operator would for an internal host.
SERVER_ENV = {"A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1", "A2A_PUSH_BACKOFF_S": "0.1"}
HEADERS = {"A2A-Version": "1.0"}
TERMINAL = "TASK_STATE_COMPLETED"


@pytest.fixture(scope="module")
def webhook():
    receiver = WebhookReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=20, headers=HEADERS) as c:
        yield c


def user(text_: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": new_id("m-"), "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def push_config(webhook: WebhookReceiver, path: str, **fields: Any) -> dict[str, Any]:
    return {
        "url": webhook.url(path),
        "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "secret-1"},
        **fields,
    }


def states(bodies: list[dict[str, Any]]) -> list[str]:
    return [body["statusUpdate"]["status"]["state"] for body in bodies if "statusUpdate" in body]


def test_an_inline_config_gets_every_event_as_a_stream_response(http, webhook, fake_llm, marker):
    fake_llm.script(text(["Hel", "lo."], when_user_contains=marker))
    path = f"/hook/{marker}"
    configuration = {"taskPushNotificationConfig": push_config(webhook, path)}
    response = http.post(
        "/message:send", json={"message": user(marker), "configuration": configuration}
    )
    task = response.json()["task"]
    assert task["status"]["state"] == TERMINAL
    got = webhook.wait_for(path, lambda items: TERMINAL in states([i.body for i in items]))
    bodies = [item.body for item in got]
    for body in bodies:
        assert_valid("stream_response", body)
        payload = next(iter(body.values()))
        assert payload.get("taskId", payload.get("id")) == task["id"]
    assert "task" in bodies[0]  # the journal from its first event
    assert states(bodies)[-1] == TERMINAL
    chunks = [
        b["artifactUpdate"]["artifact"]["parts"][0]["text"] for b in bodies if "artifactUpdate" in b
    ]
    assert "".join(chunks) == "Hello."
    headers = got[0].headers
    assert headers["authorization"] == "Bearer secret-1"
    assert headers["x-a2a-notification-token"] == "tok-1"
    assert headers["content-type"] == "application/a2a+json"


def test_crud_on_both_bindings(http, webhook, fake_llm, marker):
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    task = http.post("/message:send", json={"message": user(marker)}).json()["task"]
    task_id = task["id"]
    config = push_config(webhook, f"/crud/{marker}", id="cfg-1")
    created = http.post(f"/tasks/{task_id}/pushNotificationConfigs", json=config).json()
    assert created == {**config, "taskId": task_id}
    rpc = http.post(
        "/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": task_id, "id": "cfg-2", "url": webhook.url("/other")},
        },
    ).json()
    assert rpc["result"] == {"taskId": task_id, "id": "cfg-2", "url": webhook.url("/other")}

    got = http.get(f"/tasks/{task_id}/pushNotificationConfigs/cfg-1").json()
    assert got["url"] == config["url"]
    listed = http.get(f"/tasks/{task_id}/pushNotificationConfigs").json()
    assert sorted(item["id"] for item in listed["configs"]) == ["cfg-1", "cfg-2"]

    assert http.delete(f"/tasks/{task_id}/pushNotificationConfigs/cfg-1").json() == {}
    again = http.delete(f"/tasks/{task_id}/pushNotificationConfigs/cfg-1")
    assert again.status_code == 200, "delete is idempotent"
    missing = http.get(f"/tasks/{task_id}/pushNotificationConfigs/cfg-1")
    assert missing.status_code == 404

    # A config registered on a waiting task gets what happens next: here, the cancel.
    http.post(f"/tasks/{task_id}:cancel", json={})
    got = webhook.wait_for(
        "/other", lambda items: "TASK_STATE_CANCELED" in states([i.body for i in items])
    )
    assert states([item.body for item in got])[-1] == "TASK_STATE_CANCELED"


def test_a_failing_webhook_is_retried(http, webhook, fake_llm, marker):
    fake_llm.script(text("ok", when_user_contains=marker))
    path = f"/flaky/{marker}"
    webhook.failures_left[path] = 2
    configuration = {"taskPushNotificationConfig": push_config(webhook, path)}
    http.post("/message:send", json={"message": user(marker), "configuration": configuration})
    got = webhook.wait_for(path, lambda items: TERMINAL in states([i.body for i in items]))
    first = got[0].body
    assert [item.body for item in got[:3]] == [first, first, first]  # 500, 500, then taken


def test_a_hanging_webhook_never_slows_the_turn(http, webhook, fake_llm, marker):
    fake_llm.script(text("fast", when_user_contains=marker))
    path = f"/hang/{marker}"
    webhook.hanging.add(path)
    configuration = {"taskPushNotificationConfig": push_config(webhook, path)}
    started = time.monotonic()
    task = http.post(
        "/message:send", json={"message": user(marker), "configuration": configuration}
    ).json()["task"]
    assert task["status"]["state"] == TERMINAL
    # The receiver holds the first POST (30 s) while the turn has completed.
    assert len(webhook.bodies(path)) <= 1
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "not a url",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.5/hook",
        "http://localhost:9/hook",
        "http://[::1]/hook",
    ],
)
def test_refused_urls_get_invalid_params_naming_url(http, fake_llm, marker, url):
    fake_llm.script(tool_calls([("ask_user", {"question": "?"})], when_user_contains=marker))
    task = http.post("/message:send", json={"message": user(marker)}).json()["task"]
    response = http.post(f"/tasks/{task['id']}/pushNotificationConfigs", json={"url": url})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["details"][0]["metadata"]["field"] == "url"
    inline = http.post(
        "/message:send",
        json={
            "message": user(f"x {marker}"),
            "configuration": {"taskPushNotificationConfig": {"url": url}},
        },
    )
    assert inline.status_code == 400


def test_another_owners_task_is_not_found(http):
    response = http.post(
        "/tasks/no-such-task/pushNotificationConfigs", json={"url": "https://example.com/hook"}
    )
    assert response.status_code == 404


def test_03_clients_register_and_get_the_task(http, webhook, fake_llm, marker):
    fake_llm.script(text("ok 0.3", when_user_contains=marker))
    path = f"/v03/{marker}"
    params = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": new_id("m-"),
            "parts": [{"kind": "text", "text": marker}],
        },
        "configuration": {
            "pushNotificationConfig": {
                "url": webhook.url(path),
                "authentication": {"schemes": ["Bearer"], "credentials": "c3"},
            }
        },
    }
    body = httpx.post(
        f"{http.base_url}/",
        json={"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": params},
    ).json()
    task = body["result"]
    assert task["status"]["state"] == "completed"
    got = webhook.wait_for(
        path, lambda items: any(i.body["status"]["state"] == "completed" for i in items)
    )
    assert all(item.body["kind"] == "task" and item.body["id"] == task["id"] for item in got)
    assert got[0].headers["authorization"] == "Bearer c3"

    listed = httpx.post(
        f"{http.base_url}/",
        json={
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tasks/pushNotificationConfig/list",
            "params": {"id": task["id"]},
        },
    ).json()
    [config] = listed["result"]
    assert config["taskId"] == task["id"]
    assert config["pushNotificationConfig"]["authentication"] == {
        "schemes": ["Bearer"],
        "credentials": "c3",
    }
