"""Security at the edge, end to end on a real server: authentication on both bindings (API keys
and bearer JWTs from a JWKS on loopback), per-principal scoping of tasks and conversations,
media types, body size, Host, rate limits, fail-closed start, and no secret in logs or bodies."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import (
    A2A_HEADERS,
    ServerProcess,
    assert_error,
    new_id,
    send_params,
    server_command,
    user_message,
)
from tests.fakes.fake_llm import message_text, text
from tests.fakes.identity_provider import IdentityProvider

pytestmark = pytest.mark.timeout(120)

KEY_A = "key-alice-5b1f0c2e9d7a4c1b"
KEY_B = "key-bob-8e2d4a6f1c3b5d7e"
LLM_KEY = "sk-test"  # the harness's LLM_API_KEY


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def server(fake_llm, idp) -> Iterator[ServerProcess]:
    env = {
        "A2A_API_KEYS": f"alice:{KEY_A},bob:{KEY_B}",
        "A2A_JWT_JWKS_URL": idp.jwks_url,
        "A2A_JWT_ISSUER": idp.issuer,
        "A2A_JWT_AUDIENCE": idp.audience,
        "A2A_MAX_BODY_BYTES": "65536",
        "LOG_LEVEL": "debug",
    }
    proc = ServerProcess(fake_llm.base_url, env=env).start()
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
        yield client


def auth(key: str | None) -> dict[str, str]:
    return {**A2A_HEADERS, **({"Authorization": f"Bearer {key}"} if key else {})}


def rpc(http: httpx.Client, method: str, params: Any, key: str | None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    return http.post("/", json=body, headers=auth(key))


def rpc_result(http: httpx.Client, method: str, params: Any, key: str) -> Any:
    response = rpc(http, method, params, key)
    assert response.status_code == 200, response.text
    assert "result" in response.json(), response.text
    return response.json()["result"]


def rpc_error(http: httpx.Client, method: str, params: Any, key: str | None) -> dict[str, Any]:
    response = rpc(http, method, params, key)
    assert response.status_code == 200, response.text
    error = response.json()["error"]
    return error


def send(http: httpx.Client, message: str, key: str, **fields: Any) -> dict[str, Any]:
    return rpc_result(http, "SendMessage", send_params(message, **fields), key)["task"]


# ---- authentication -------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "not-a-key"], ids=["no key", "wrong key"])
def test_jsonrpc_refuses_a_request_without_valid_credentials(http, key):
    response = rpc(http, "ListTasks", {}, key)
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith("Bearer realm="), response.headers
    body = response.json()
    assert body["id"] == 7, body
    assert body["error"]["data"][0]["reason"] == "UNAUTHENTICATED", body


@pytest.mark.parametrize("key", [None, "not-a-key"], ids=["no key", "wrong key"])
def test_rest_refuses_a_request_without_valid_credentials(http, key):
    for method, path in (("GET", "/tasks"), ("GET", "/tasks/x"), ("GET", "/extendedAgentCard")):
        response = http.request(method, path, headers=auth(key))
        assert response.status_code == 401, (path, response.text)
        assert "www-authenticate" in response.headers, response.headers
        error = response.json()["error"]
        assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED"), error
    response = http.post("/message:send", json=send_params("hi"), headers=auth(key))
    assert response.status_code == 401, response.text


def test_an_api_key_in_x_api_key_is_accepted(http):
    response = http.get("/tasks", headers={**A2A_HEADERS, "X-API-Key": KEY_A})
    assert response.status_code == 200, response.text


def test_the_public_card_and_probes_stay_open_and_the_card_declares_the_schemes(http):
    card = http.get("/.well-known/agent-card.json")
    assert card.status_code == 200, card.text
    schemes = card.json()["securitySchemes"]
    assert {"apiKey", "bearer", "oidc"} <= set(schemes), schemes
    assert card.json()["securityRequirements"], card.json()
    for probe in ("/healthz", "/readyz"):
        assert http.get(probe).status_code == 200, probe


def test_extended_card_requires_authentication_then_answers_as_before(http):
    assert rpc(http, "GetExtendedAgentCard", {}, None).status_code == 401
    assert_error(rpc_error(http, "GetExtendedAgentCard", {}, KEY_A), -32004)


def test_a_jwt_from_the_provider_is_accepted_and_others_are_refused(http, idp):
    good = idp.token(sub="carol")
    assert rpc(http, "ListTasks", {}, good).status_code == 200
    for bad in (
        idp.token(sub="carol", aud="someone-else"),
        idp.token(sub="carol", iss="https://evil.example"),
        idp.token(sub="carol", exp=1),
    ):
        response = rpc(http, "ListTasks", {}, bad)
        assert response.status_code == 401, response.text
        assert 'error="invalid_token"' in response.headers["www-authenticate"]


# ---- scoping: one principal never reaches another's tasks -------------------------------------


def test_a_principal_cannot_reach_another_principals_task(http, fake_llm, marker):
    fake_llm.script(text("Done.", when_user_contains=marker))
    task = send(http, f"bob's {marker}", KEY_B)
    task_id = task["id"]
    mine = send(http, f"alice's {marker}", KEY_A)

    missing = new_id("missing-")
    for key, expected in ((KEY_A, task_id), (KEY_A, missing)):
        for method, params in (
            ("GetTask", {"id": expected}),
            ("CancelTask", {"id": expected}),
        ):
            assert_error(rpc_error(http, method, params, key), -32001)
        message = send_params(f"answer {marker}", task_id=expected)
        assert_error(rpc_error(http, "SendMessage", message, key), -32001)
        subscribe = rpc(http, "SubscribeToTask", {"id": expected}, key)
        assert subscribe.headers["content-type"].startswith("application/json"), subscribe.text
        assert_error(subscribe.json()["error"], -32001)
        push = {"taskId": expected, "url": "https://x.example/hook"}
        error = rpc_error(http, "CreateTaskPushNotificationConfig", push, key)
        assert error["code"] == -32001, error
        listed = rpc_error(http, "ListTaskPushNotificationConfigs", {"taskId": expected}, key)
        assert listed["code"] == -32001, listed
        for method, path in (("GET", f"/tasks/{expected}"), ("POST", f"/tasks/{expected}:cancel")):
            response = http.request(method, path, headers=auth(key))
            assert response.status_code == 404, response.text
            assert response.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"

    listed = rpc_result(http, "ListTasks", {}, KEY_A)["tasks"]
    assert mine["id"] in {each["id"] for each in listed}
    assert task_id not in {each["id"] for each in listed}
    listed = http.get("/tasks", headers=auth(KEY_B)).json()["tasks"]
    assert {each["id"] for each in listed} == {task_id}
    # Bob's task is still Bob's, untouched.
    assert rpc_result(http, "GetTask", {"id": task_id}, KEY_B)["id"] == task_id


def test_reusing_another_principals_context_id_starts_a_separate_conversation(
    http, fake_llm, marker
):
    context_id = new_id("ctx-")
    fake_llm.script(
        text("Bob's answer.", when_user_contains=f"{marker}-b"),
        text("Alice's answer.", when_user_contains=f"{marker}-a"),
    )
    send(http, f"bob's secret {marker}-b", KEY_B, context_id=context_id)
    task = send(http, f"alice asks {marker}-a", KEY_A, context_id=context_id)
    assert task["contextId"] == context_id
    (request,) = fake_llm.requests_for(f"{marker}-a")
    seen = " ".join(message_text(each) for each in request["messages"])
    assert f"{marker}-b" not in seen and "Bob's answer" not in seen, seen


# ---- the HTTP edge --------------------------------------------------------------------------


def test_jsonrpc_takes_only_json_media_types(http):
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}'
    for media_type in ("text/plain", "application/x-www-form-urlencoded"):
        headers = {**auth(KEY_A), "Content-Type": media_type}
        response = http.post("/", content=body, headers=headers)
        assert response.status_code == 415, response.text
        assert response.json()["error"]["code"] == -32005, response.text
    headers = {**auth(KEY_A), "Content-Type": "application/a2a+json"}
    assert http.post("/", content=body, headers=headers).status_code == 200


def test_an_oversized_body_is_413_on_both_bindings(http):
    big = send_params("x" * 70_000)
    response = rpc(http, "SendMessage", big, KEY_A)
    assert response.status_code == 413, response.text
    assert "error" in response.json() and response.json()["jsonrpc"] == "2.0", response.text
    response = http.post("/message:send", json=big, headers=auth(KEY_A))
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == 413, response.text


def test_a_foreign_host_is_421(http):
    response = http.get("/tasks", headers={**auth(KEY_A), "Host": "attacker.example"})
    assert response.status_code == 421, response.text
    response = http.get("/healthz", headers={"Host": "localhost:1234"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("message.messageId", user_message("hi", message_id="m\x01id")),
        ("message.contextId", user_message("hi", context_id="   ")),
        ("message.taskId", user_message("hi", task_id="t" * 129)),
    ],
)
def test_client_chosen_ids_are_checked_before_any_store(http, field, message):
    error = rpc_error(http, "SendMessage", {"message": message}, KEY_A)
    assert error["code"] == -32602 and field in error["message"], error
    response = http.post("/message:send", json={"message": message}, headers=auth(KEY_A))
    assert response.status_code == 400 and field in response.text, response.text


def test_a_task_id_in_the_path_is_checked(http):
    response = http.get("/tasks/" + "t" * 200, headers=auth(KEY_A))
    assert response.status_code == 400, response.text
    assert "id" in response.json()["error"]["message"], response.text


# ---- secrets ----------------------------------------------------------------------------------


def test_no_secret_in_logs_error_bodies_or_the_card(http, server, idp, fake_llm, marker):
    fake_llm.script(text("ok", when_user_contains=marker))
    bodies = [
        rpc(http, "ListTasks", {}, KEY_A[:-1]).text,  # almost the key
        rpc(http, "ListTasks", {}, KEY_A + "x").text,
        http.get("/tasks", headers={**A2A_HEADERS, "X-API-Key": KEY_B + "0"}).text,
        rpc(http, "SendMessage", send_params(f"hi {marker}"), KEY_A).text,
        rpc(http, "GetTask", {"id": "nope"}, KEY_B).text,
        http.get("/.well-known/agent-card.json").text,
    ]
    token = idp.token(sub="dave", aud="other")
    bodies.append(rpc(http, "ListTasks", {}, token).text)
    server.settle_log()
    logs = server.logs(limit=10_000_000)
    for secret in (KEY_A, KEY_B, KEY_A[:-1], LLM_KEY, token):
        assert secret not in logs, f"a secret is in the server log: {secret[:6]}..."
        for body in bodies:
            assert secret not in body, body


# ---- fail closed ----------------------------------------------------------------------------


def test_serving_a_network_address_without_authentication_is_refused(fake_llm, tmp_path):
    process = ServerProcess(fake_llm.base_url)
    command = server_command(process.port)
    command[command.index("127.0.0.1")] = "0.0.0.0"
    result = subprocess.run(
        command, env=process.environment(), capture_output=True, timeout=60, text=True
    )
    assert result.returncode == 2, result.stderr
    assert "A2A_API_KEYS" in result.stderr and "A2A_AUTH=none" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    process.cleanup()
