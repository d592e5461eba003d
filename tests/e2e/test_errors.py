"""JSON-RPC and A2A error responses (always HTTP 200, code/message/data only, ErrorInfo)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.harness import assert_error, check_error_object, send_params, user_message

pytestmark = pytest.mark.timeout(60)


def _raw_error(rpc, body, expect_id):
    r = rpc.post_raw(body)
    assert r.status_code == 200, f"JSON-RPC errors use HTTP 200, got {r.status_code}: {r.text}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    data = r.json()
    assert isinstance(data, dict), f"expected one error object, got {data!r}"
    assert data.get("jsonrpc") == "2.0", data
    assert "id" in data and data["id"] == expect_id, f"id should be {expect_id!r}: {data}"
    assert "result" not in data, data
    check_error_object(data["error"])
    return data["error"]


# ---- transport-level errors --------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{not json", b"", b'{"jsonrpc": "2.0", "method": '])
def test_parse_error(rpc, body):
    assert_error(_raw_error(rpc, body, None), -32700)


def test_wrong_jsonrpc_version(rpc):
    err = _raw_error(
        rpc, {"jsonrpc": "1.0", "id": 7, "method": "GetTask", "params": {"id": "x"}}, 7
    )
    assert_error(err, -32600)


def test_missing_jsonrpc_member(rpc):
    err = _raw_error(rpc, {"id": 8, "method": "GetTask", "params": {"id": "x"}}, 8)
    assert_error(err, -32600)


def test_batch_is_rejected(rpc):
    r = rpc.post_raw([{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}])
    assert r.status_code == 200, r.text
    data = r.json()
    if isinstance(data, list):  # some servers answer a batch with a one-element array
        assert len(data) == 1, data
        data = data[0]
    check_error_object(data["error"])
    assert_error(data["error"], -32600)


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 9, "method": 42},
        {"jsonrpc": "2.0", "id": 9},
        "[]",
        '"just a string"',
    ],
)
def test_invalid_request_shapes(rpc, body):
    r = rpc.post_raw(body if isinstance(body, (dict, list)) else body.encode())
    assert r.status_code == 200, r.text
    data = r.json()
    assert isinstance(data, dict), data
    check_error_object(data["error"])
    assert_error(data["error"], -32600)


def test_unknown_method(rpc):
    assert_error(rpc.error("NoSuchMethod", {}), -32601)


def test_unsupported_version_header(rpc):
    err = rpc.error("GetTask", {"id": "x"}, headers={"A2A-Version": "99.0"})
    assert_error(err, -32009)


def test_string_request_id_is_echoed(rpc):
    body = rpc.call("NoSuchMethod", {}, id="abc-123")
    assert body["id"] == "abc-123"


# ---- invalid params ------------------------------------------------------------------------


def _msg(**over):
    m = user_message("hello")
    for k, v in over.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    return m


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="no-message"),
        pytest.param({"message": None}, id="null-message"),
        pytest.param({"message": "hello"}, id="message-is-string"),
        pytest.param({"message": _msg(parts=[])}, id="empty-parts"),
        pytest.param({"message": _msg(parts=None)}, id="no-parts"),
        pytest.param({"message": _msg(messageId=None)}, id="no-messageId"),
        pytest.param({"message": _msg(role="user")}, id="0.3-role"),
        pytest.param({"message": _msg(role=None)}, id="no-role"),
        pytest.param(
            {"message": _msg(), "configuration": {"historyLength": -1}}, id="negative-historyLength"
        ),
        pytest.param(
            {"message": _msg(), "configuration": {"historyLength": "many"}},
            id="string-historyLength",
        ),
        pytest.param([1, 2], id="params-array"),
        pytest.param("params", id="params-string"),
    ],
)
def test_send_message_invalid_params(rpc, params):
    err = rpc.error("SendMessage", params)
    assert_error(err, -32602)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("GetTask", {}),
        ("GetTask", {"id": "x", "historyLength": -1}),
        ("GetTask", {"id": "x", "historyLength": "ten"}),
        ("CancelTask", {}),
        ("ListTasks", {"pageSize": 0}),
        ("ListTasks", {"pageSize": 101}),
    ],
)
def test_other_invalid_params(rpc, method, params):
    assert_error(rpc.error(method, params), -32602)


def test_streaming_invalid_params_is_plain_error(rpc):
    with rpc.stream("SendStreamingMessage", {"message": _msg(parts=[])}) as s:
        assert s.content_type.startswith("application/json"), s.content_type
        body = s.json()
    check_error_object(body["error"])
    assert_error(body["error"], -32602)


# ---- A2A errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
def test_unknown_task_id(rpc, method):
    assert_error(rpc.error(method, {"id": "no-such-task-123"}), -32001)


def test_subscribe_unknown_task(rpc):
    with rpc.stream("SubscribeToTask", {"id": "no-such-task-456"}) as s:
        assert s.content_type.startswith("application/json"), s.content_type
        body = s.json()
    check_error_object(body["error"])
    assert_error(body["error"], -32001)


def test_send_with_unknown_task_id(rpc, fake_llm, marker):
    err = rpc.error("SendMessage", send_params(f"continue {marker}", task_id="no-such-task-789"))
    assert_error(err, -32001)
    assert fake_llm.requests_for(marker) == [], "model called for a rejected message"


def test_stream_with_unknown_task_id(rpc, marker):
    with rpc.stream(
        "SendStreamingMessage", send_params(f"continue {marker}", task_id="no-such-task-790")
    ) as s:
        assert s.content_type.startswith("application/json"), s.content_type
        body = s.json()
    assert_error(body["error"], -32001)


def test_send_to_completed_task(rpc, fake_llm, marker):
    task = rpc.send(f"finish {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    err = rpc.error(
        "SendMessage",
        send_params(f"more {marker}-2", task_id=task["id"], context_id=task["contextId"]),
    )
    assert_error(err, -32004)
    assert fake_llm.requests_for(f"{marker}-2") == []
    again = rpc.get_task(task["id"])
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert json.dumps(again.get("artifacts")) == json.dumps(task.get("artifacts"))


def test_error_messages_do_not_leak_internals(rpc):
    """Odd inputs must produce clean errors, never a stack trace (checked on every body)."""
    odd = [
        (
            "SendMessage",
            {"message": {"messageId": 5, "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        ),
        (
            "SendMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": None}]}},
        ),
        (
            "SendMessage",
            {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "parts": [{"text": "x", "raw": "eA=="}],
                }
            },
        ),
        ("GetTask", {"id": 12345}),
        ("GetTask", {"id": ["a"]}),
        ("ListTasks", {"pageSize": "ten"}),
        ("CancelTask", {"id": None}),
    ]
    for method, params in odd:
        body = rpc.call(method, params)
        assert "error" in body, f"{method}({params}) accepted: {body}"
        check_error_object(body["error"])
        assert body["error"]["code"] in (-32600, -32602, -32001), (method, params, body)
        assert "Traceback" not in json.dumps(body)


def test_other_methods_at_the_json_rpc_endpoint_get_405(rpc):
    """`POST /` is served before FastAPI's routing (app.http.asgi); the route is still known to the
    router, so another method on `/` is refused as not allowed, with its allowed method named."""
    r = rpc.get("/")
    assert r.status_code == 405, (r.status_code, r.text)
    assert r.headers.get("allow") == "POST", r.headers
    error = r.json()["error"]  # in the shape a JSON-RPC client at `/` reads
    assert error["data"][0]["reason"] == "METHOD_NOT_ALLOWED", r.text
