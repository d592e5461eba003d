"""Refusals as each binding's client reads them.

CancelTask: the body of `POST /tasks/{id}:cancel` (the official Go SDK's `null` among others) is
ignored as the official servers ignore it, and a task already ended, canceled included, is
TaskNotCancelable everywhere (-32002; HTTP 400 FAILED_PRECONDITION; gRPC FAILED_PRECONDITION),
each with the reason TASK_NOT_CANCELABLE. Invalid params carry the reason INVALID_PARAMS on every
binding and generation (the official clients map that reason back to the error type).
"""

from __future__ import annotations

import json
import socket
from typing import Any

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.rpc import error_details_pb2, status_pb2

from tests.e2e.harness import A2A_HEADERS, free_port
from tests.e2e.wire import assert_valid
from tests.fakes.fake_llm import tool_calls

pytestmark = pytest.mark.timeout(60)

GRPC_PORT = free_port()
SERVER_ENV = {"A2A_GRPC_PORT": str(GRPC_PORT)}
TENANT = "ops-team"
CANCELED = "TASK_STATE_CANCELED"


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=20) as client:
        yield client


def waiting_task(http: httpx.Client, fake_llm, marker: str, *, tenant: str = "") -> str:
    """A task waiting for the user's answer (cancelable, and nobody runs it)."""
    fake_llm.script(tool_calls([("ask_user", {"question": "?"})], when_user_contains=marker))
    message = {"messageId": f"m-{marker}", "role": "ROLE_USER", "parts": [{"text": marker}]}
    prefix = f"/{tenant}" if tenant else ""
    sent = http.post(f"{prefix}/message:send", json={"message": message}, headers=A2A_HEADERS)
    assert sent.status_code == 200, sent.text
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    return task["id"]


def go_sdk_cancel(url: str, path: str) -> tuple[int, dict[str, Any]]:
    """The request a2a-go v2.3.1's RESTTransport.CancelTask writes, byte for byte: net/http's
    header order and canonical spellings (`A2a-Version`), the body `json.Marshal(nil)`."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "User-Agent: Go-http-client/1.1\r\n"
        "Content-Length: 4\r\n"
        "A2a-Version: 1.0\r\n"
        "Accept: application/json\r\n"
        "Content-Type: application/json\r\n"
        "Accept-Encoding: gzip\r\n"
        "\r\n"
        "null"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=20) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = dict(
        line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
    )
    if headers.get("transfer-encoding") == "chunked":
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    return status, json.loads(body)


def not_cancelable(response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "FAILED_PRECONDITION", error
    assert [detail["reason"] for detail in error["details"]] == ["TASK_NOT_CANCELABLE"], error


# --- the body is ignored ------------------------------------------------------------------------


def test_the_go_sdk_cancel_request_cancels(server, http, fake_llm, marker):
    task_id = waiting_task(http, fake_llm, marker)
    status, task = go_sdk_cancel(server.url, f"/tasks/{task_id}:cancel")
    assert status == 200, task
    assert_valid("task", task)
    assert (task["id"], task["status"]["state"]) == (task_id, CANCELED)


def test_the_go_sdk_cancel_request_within_a_tenant(server, http, fake_llm, marker):
    task_id = waiting_task(http, fake_llm, marker, tenant=TENANT)
    status, task = go_sdk_cancel(server.url, f"/{TENANT}/tasks/{task_id}:cancel")
    assert status == 200, task
    assert (task["id"], task["status"]["state"]) == (task_id, CANCELED)
    got = http.get(f"/{TENANT}/tasks/{task_id}", headers=A2A_HEADERS).json()
    assert got["status"]["state"] == CANCELED


BODIES = [
    pytest.param(b"", {}, id="empty"),
    pytest.param(b"null", {"Content-Type": "application/json"}, id="null"),
    pytest.param(b"{}", {"Content-Type": "application/json"}, id="object"),
    pytest.param(b'{"metadata": {"why": "done"}}', {}, id="metadata"),
    pytest.param(b'{"metadata": 7}', {"Content-Type": "application/a2a+json"}, id="bad-metadata"),
    pytest.param(b"[1, 2]", {"Content-Type": "application/json"}, id="array"),
    pytest.param(b'"stop"', {"Content-Type": "application/json"}, id="string"),
    pytest.param(b"42", {"Content-Type": "application/json"}, id="number"),
    pytest.param(b"please stop", {"Content-Type": "text/plain"}, id="not-json"),
    pytest.param(b"{not json", {"Content-Type": "application/json"}, id="broken-json"),
]


@pytest.mark.parametrize(("body", "headers"), BODIES)
def test_any_cancel_body_is_ignored(http, fake_llm, marker, body, headers):
    task_id = waiting_task(http, fake_llm, marker)
    canceled = http.post(f"/tasks/{task_id}:cancel", content=body, headers=A2A_HEADERS | headers)
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"]["state"] == CANCELED


@pytest.mark.parametrize(("body", "headers"), BODIES)
def test_any_cancel_body_is_ignored_on_the_03_route(http, fake_llm, marker, body, headers):
    task_id = waiting_task(http, fake_llm, marker)
    canceled = http.post(f"/v1/tasks/{task_id}:cancel", content=body, headers=headers)
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELLED"


# --- a canceled task is not cancelable, on every binding -----------------------------------------


def test_a_canceled_task_is_not_cancelable_on_any_binding(server, http, fake_llm, marker):
    task_id = waiting_task(http, fake_llm, marker)
    first = http.post(f"/tasks/{task_id}:cancel", headers=A2A_HEADERS)
    assert first.json()["status"]["state"] == CANCELED

    status, error = go_sdk_cancel(server.url, f"/tasks/{task_id}:cancel")
    assert status == 400, error
    assert error["error"]["details"][0]["reason"] == "TASK_NOT_CANCELABLE"
    not_cancelable(http.post(f"/tasks/{task_id}:cancel", headers=A2A_HEADERS))
    not_cancelable(http.post(f"/v1/tasks/{task_id}:cancel", json={}))

    for method, version in (("CancelTask", "1.0"), ("tasks/cancel", "0.3")):
        payload = {"jsonrpc": "2.0", "id": 3, "method": method, "params": {"id": task_id}}
        answer = http.post("/", json=payload, headers={"A2A-Version": version}).json()
        assert answer["error"]["code"] == -32002, answer
        if version == "1.0":
            assert answer["error"]["data"][0]["reason"] == "TASK_NOT_CANCELABLE", answer

    after = http.get(f"/tasks/{task_id}", headers=A2A_HEADERS).json()
    assert after["status"] == first.json()["status"]  # nothing recorded by the refused ones


async def test_a_canceled_task_is_not_cancelable_over_grpc(http, fake_llm, marker):
    task_id = waiting_task(http, fake_llm, marker)
    assert http.post(f"/tasks/{task_id}:cancel", headers=A2A_HEADERS).status_code == 200
    async with grpc.aio.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        calls = [
            a2a_pb2_grpc.A2AServiceStub(channel).CancelTask(
                a2a_pb2.CancelTaskRequest(id=task_id), metadata=(("a2a-version", "1.0"),)
            ),
            a2a_v0_3_pb2_grpc.A2AServiceStub(channel).CancelTask(
                a2a_v0_3_pb2.CancelTaskRequest(name=f"tasks/{task_id}"),
                metadata=(("a2a-version", "0.3"),),
            ),
        ]
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            trailers = dict(refused.value.trailing_metadata() or ())
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info)
            assert (info.reason, info.domain) == ("TASK_NOT_CANCELABLE", "a2a-protocol.org")


# --- invalid params: INVALID_PARAMS everywhere ---------------------------------------------------


def test_invalid_params_carry_their_reason_on_every_http_binding(http):
    for method, version in (("GetTask", "1.0"), ("tasks/get", "0.3")):
        payload = {"jsonrpc": "2.0", "id": 4, "method": method, "params": {"id": ""}}
        answer = http.post("/", json=payload, headers={"A2A-Version": version}).json()
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"][0]["reason"] == "INVALID_PARAMS", answer
    for path, headers in (("/tasks?pageSize=0", A2A_HEADERS), ("/v1/tasks/x?historyLength=-1", {})):
        refused = http.get(path, headers=headers)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT", error
        assert error["details"][0]["reason"] == "INVALID_PARAMS", error


async def test_invalid_params_carry_their_reason_over_grpc():
    async with grpc.aio.insecure_channel(f"127.0.0.1:{GRPC_PORT}") as channel:
        call = a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
            a2a_pb2.ListTasksRequest(page_size=1000), metadata=(("a2a-version", "1.0"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(refused.value.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.reason == "INVALID_PARAMS"
