"""Hostile request bodies and framework errors against a real server, over both bindings.

Every JSON failure is a parse error (JSON-RPC -32700, REST 400), whatever its cause; nesting deeper
than A2A_MAX_JSON_DEPTH is -32602 / 400 naming the field, and nothing is stored; what passes the
limit is stored, read back and listed. A notification gets HTTP 204 and no body, and its method
still runs. 405 and 404 answers come in the binding's error shape. None of it logs an ERROR or a
traceback (checked after every test).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.e2e.harness import (
    A2A_HEADERS,
    ERROR_INFO_TYPE,
    assert_error,
    check_error_object,
    new_id,
)

pytestmark = pytest.mark.timeout(90)

DEPTH = 32
SERVER_ENV = {"A2A_MAX_JSON_DEPTH": str(DEPTH)}

# Containers above `data` in a request: JSON-RPC root, params, message, parts, parts[0] (REST: no
# envelope, so one fewer). `data` nested this many more levels ends exactly at the limit.
RPC_DATA_LEVELS = DEPTH - 5
REST_DATA_LEVELS = DEPTH - 4


def nested(levels: int) -> Any:
    """`levels` arrays one inside the other around a string: nested(2) == [["x"]]."""
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def message(*parts: dict[str, Any], context_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "messageId": new_id("msg-"),
        "role": "ROLE_USER",
        "contextId": context_id,
        "parts": list(parts),
        **fields,
    }


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
        yield client


@pytest.fixture(autouse=True)
def no_error_logged(server):
    """Whatever a test sends, the server logs no ERROR and no traceback for it."""
    mark = server.log_mark()
    yield
    server.settle_log()
    written = server.log_since(mark)
    assert "Traceback" not in written, written[-4000:]
    assert " ERROR " not in written, written[-4000:]


def rpc_error(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"jsonrpc", "id", "error"}, body
    check_error_object(body["error"])
    return body


def rest_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "status", "message", "details"}, error
    assert error["code"] == status, error
    assert error["details"][0]["@type"] == ERROR_INFO_TYPE, error
    return error


def post_rpc(http: httpx.Client, body: bytes, content_type: str = "application/json"):
    return http.post("/", content=body, headers={**A2A_HEADERS, "Content-Type": content_type})


def list_context(http: httpx.Client, context_id: str) -> list[dict[str, Any]]:
    response = http.get("/tasks", params={"contextId": context_id}, headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    return response.json().get("tasks", [])


# ---- every JSON failure is a parse error ----------------------------------------------------

_LIST = b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"contextId": %s}}'
_SEND = b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": %s}]}}'

NOT_JSON = {
    "60000 unclosed arrays": lambda _: b"[" * 60_000,
    "2000 nested arrays": lambda _: b"[" * 2000 + b"]" * 2000,
    "NaN": lambda shell: shell % b"NaN",
    "Infinity": lambda shell: shell % b"Infinity",
    "-Infinity": lambda shell: shell % b"-Infinity",
    "number too big for a double": lambda shell: shell % b"1e400",
    "lone high surrogate": lambda shell: shell % b'"\\ud800"',
    "lone low surrogate": lambda shell: shell % b'"a\\udc00b"',
    "UTF-8-encoded surrogate": lambda shell: shell % b'"\xed\xa0\x80"',
    "invalid UTF-8": lambda shell: shell % b'"\xff\xfe"',
}


def test_jsonrpc_every_json_failure_is_a_parse_error(http):
    wrong = {}
    for name, make in NOT_JSON.items():
        body = rpc_error(post_rpc(http, make(_LIST)))
        if body["id"] is not None or body["error"]["code"] != -32700:
            wrong[name] = body
    assert not wrong, wrong
    # The content-type rule stands: a body under a foreign type is HTTP 415 with -32005.
    body = rpc_error(post_rpc(http, b"[" * 60_000, content_type="text/plain"), 415)
    assert_error(body["error"], -32005)


def test_rest_every_json_failure_is_a_400_parse_error(http):
    wrong = {}
    for name, make in NOT_JSON.items():
        response = http.post(
            "/message:send",
            content=make(_SEND),
            headers={**A2A_HEADERS, "Content-Type": "application/json"},
        )
        if response.status_code != 400:
            wrong[name] = (response.status_code, response.text[:300])
            continue
        error = rest_error(response, 400)
        if (error["status"], error["details"][0]["reason"]) != ("INVALID_ARGUMENT", "PARSE_ERROR"):
            wrong[name] = error
    assert not wrong, wrong
    response = http.post("/message:send", content=b"[", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415, response.text


# ---- the nesting limit ----------------------------------------------------------------------


def test_jsonrpc_depth_limit_refuses_deeper_naming_the_field_and_keeps_what_fits(http):
    context_id = new_id("ctx-")
    too_deep = message({"data": nested(RPC_DATA_LEVELS + 1)}, context_id=context_id)
    request = {"jsonrpc": "2.0", "id": "deep", "method": "SendMessage"}
    body = rpc_error(http.post("/", json={**request, "params": {"message": too_deep}}))
    assert body["id"] == "deep"
    assert_error(body["error"], -32602)
    assert "params.message.parts[0].data" in body["error"]["message"], body
    assert body["error"]["data"][0]["metadata"]["field"].startswith("params.message.parts[0].data")
    assert list_context(http, context_id) == [], "a refused request must store nothing"

    metadata = message({"text": "hi"}, context_id=context_id, metadata={"a": nested(DEPTH)})
    body = rpc_error(http.post("/", json={**request, "params": {"message": metadata}}))
    assert_error(body["error"], -32602)
    assert "params.message.metadata.a" in body["error"]["message"], body
    assert list_context(http, context_id) == []

    fits = nested(RPC_DATA_LEVELS)
    params = {
        "message": message({"data": fits}, context_id=context_id),
        "configuration": {"returnImmediately": True},
    }
    response = http.post("/", json={**request, "params": params})
    assert response.status_code == 200, response.text
    task = response.json()["result"]["task"]
    got = http.post(
        "/", json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
    ).json()["result"]
    assert got["history"][0]["parts"][0]["data"] == fits
    assert [t["id"] for t in list_context(http, context_id)] == [task["id"]]


def test_rest_depth_limit_refuses_deeper_naming_the_field_and_keeps_what_fits(http):
    context_id = new_id("ctx-")
    too_deep = {"message": message({"data": nested(REST_DATA_LEVELS + 1)}, context_id=context_id)}
    error = rest_error(http.post("/message:send", json=too_deep, headers=A2A_HEADERS), 400)
    assert error["status"] == "INVALID_ARGUMENT", error
    assert "message.parts[0].data" in error["message"], error
    assert "params." not in error["message"], "REST bodies have no params envelope"
    assert list_context(http, context_id) == []

    fits = nested(REST_DATA_LEVELS)
    body = {
        "message": message({"data": fits}, context_id=context_id),
        "configuration": {"returnImmediately": True},
    }
    response = http.post("/message:send", json=body, headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    task_id = response.json()["task"]["id"]
    got = http.get(f"/tasks/{task_id}", headers=A2A_HEADERS)
    assert got.status_code == 200, got.text
    assert got.json()["history"][0]["parts"][0]["data"] == fits
    assert [t["id"] for t in list_context(http, context_id)] == [task_id]


# ---- notifications --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("ListTasks", {}),
        ("GetTask", {"id": "no-such-task"}),  # fails: still no answer
        ("NoSuchMethod", {}),
        ("ListTasks", {"pageSize": 0}),
    ],
)
def test_a_notification_gets_204_and_no_body(http, method, params):
    notification = {"jsonrpc": "2.0", "method": method, "params": params}
    response = http.post("/", json=notification, headers=A2A_HEADERS)
    assert response.status_code == 204, response.text
    assert response.content == b""
    # `"id": null` is a request, not a notification: it is answered.
    response = http.post("/", json={**notification, "id": None}, headers=A2A_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json()["id"] is None
    # An invalid request object without an id is answered with an error (JSON-RPC 2.0, 5.1).
    response = http.post("/", json={**notification, "jsonrpc": "1.0"}, headers=A2A_HEADERS)
    assert_error(rpc_error(response)["error"], -32600)


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_a_notification_still_runs_its_method(http, marker, method):
    context_id = new_id("ctx-")
    params = {"message": message({"text": f"{marker} notified"}, context_id=context_id)}
    response = http.post(
        "/", json={"jsonrpc": "2.0", "method": method, "params": params}, headers=A2A_HEADERS
    )
    assert response.status_code == 204, response.text
    assert response.content == b""
    assert not response.headers.get("content-type", "").startswith("text/event-stream")
    (task,) = list_context(http, context_id)
    deadline = time.monotonic() + 15
    while task["status"]["state"] != "TASK_STATE_COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.1)
        (task,) = list_context(http, context_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task


# ---- framework errors in the binding's shape ------------------------------------------------


def test_405_under_the_jsonrpc_endpoint_is_a_jsonrpc_error(http):
    response = http.get("/", headers=A2A_HEADERS)
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == "POST"
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body
    check_error_object(body["error"])
    assert_error(body["error"], -32600)


@pytest.mark.parametrize(
    ("verb", "path", "allowed"),
    [
        ("DELETE", "/tasks", "GET"),
        ("PUT", "/message:send", "POST"),
        ("PATCH", "/tasks/t-1", "GET"),
        ("POST", "/healthz", "GET"),
    ],
)
def test_405_on_rest_routes_is_an_aip193_error(http, verb, path, allowed):
    response = http.request(verb, path, headers=A2A_HEADERS)
    error = rest_error(response, 405)
    assert allowed in response.headers["allow"], response.headers
    assert error["details"][0]["reason"] == "METHOD_NOT_ALLOWED", error
    assert verb in error["message"], error
