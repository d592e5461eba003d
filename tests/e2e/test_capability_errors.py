"""Operations for capabilities the card does not declare fail with the spec's errors: push
turned off (A2A_PUSH_NOTIFICATIONS=false), no extended card."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.harness import assert_error

SERVER_ENV = {"A2A_PUSH_NOTIFICATIONS": "false"}

PUSH_METHODS = [
    ("CreateTaskPushNotificationConfig", {"taskId": "t-1", "url": "https://example.com/hook"}),
    ("GetTaskPushNotificationConfig", {"taskId": "t-1", "id": "c-1"}),
    ("ListTaskPushNotificationConfigs", {"taskId": "t-1"}),
    ("DeleteTaskPushNotificationConfig", {"taskId": "t-1", "id": "c-1"}),
]


@pytest.mark.parametrize(("method", "params"), PUSH_METHODS)
def test_push_config_methods_say_push_is_not_supported(rpc, method, params):
    # -32003 even though the task does not exist: the capability is checked first.
    assert_error(rpc.error(method, params), -32003)


def test_the_card_says_push_is_off(rpc):
    card = rpc.get("/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is False


def test_an_inline_push_config_is_refused_too(rpc):
    message = {"messageId": "m-inline", "role": "ROLE_USER", "parts": [{"text": "x"}]}
    configuration = {"taskPushNotificationConfig": {"url": "https://example.com/hook"}}
    error = rpc.error("SendMessage", {"message": message, "configuration": configuration})
    assert_error(error, -32003)


def test_extended_card_is_an_unsupported_operation(rpc):
    assert_error(rpc.error("GetExtendedAgentCard", {}), -32004)


@pytest.mark.parametrize(
    ("verb", "path"),
    [
        ("POST", "/tasks/t-1/pushNotificationConfigs"),
        ("GET", "/tasks/t-1/pushNotificationConfigs"),
        ("GET", "/tasks/t-1/pushNotificationConfigs/c-1"),
        ("DELETE", "/tasks/t-1/pushNotificationConfigs/c-1"),
    ],
)
def test_rest_push_config_routes_answer_400(server, verb, path):
    body = {"url": "https://example.com/hook"} if verb == "POST" else None
    response = httpx.request(verb, server.url + path, json=body, timeout=10)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["status"] == "FAILED_PRECONDITION"
    assert error["details"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"


def test_rest_extended_card_answers_400(server):
    response = httpx.get(server.url + "/extendedAgentCard", timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


def test_rest_unknown_route_has_an_aip193_body(server):
    response = httpx.get(server.url + "/no/such/route", timeout=10)
    assert response.status_code == 404
    assert response.json()["error"]["status"] == "NOT_FOUND"


def test_card_interface_urls_take_appended_paths(rpc):
    """Clients append REST paths to the interface URL: it must not end with a slash."""
    card = rpc.get("/.well-known/agent-card.json").json()
    for interface in card["supportedInterfaces"]:
        assert not interface["url"].endswith("/"), interface
        send = httpx.post(
            interface["url"] + "/message:send",
            json={"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
            timeout=30,
        )
        assert send.status_code == 200, send.text


def test_rest_list_rejects_a_boolean_that_is_not_one(server):
    response = httpx.get(server.url + "/tasks?includeArtifacts=maybe", timeout=10)
    assert response.status_code == 400, response.text
    assert httpx.get(server.url + "/tasks?includeArtifacts=true", timeout=10).status_code == 200
