"""Limits on one message and on one read: each refused with -32602 / 400 naming field and limit."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings

LIMITS = {
    "a2a_max_parts": 5,
    "a2a_max_text_chars": 50,
    "a2a_max_file_bytes": 30,
    "a2a_max_metadata_bytes": 40,
    "a2a_max_history_length": 7,
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(**LIMITS))  # type: ignore[arg-type]
    with TestClient(app, base_url="http://localhost") as test_client:
        yield test_client


def _message(parts: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"messageId": "m-1", "role": "ROLE_USER", "parts": parts, **fields}


def _rpc(client: TestClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = client.post(
        "/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _refused(body: dict[str, Any], field: str, limit_name: str, limit: int) -> None:
    assert "error" in body, body
    error = body["error"]
    assert error["code"] == -32602, error
    assert field in error["message"] and str(limit) in error["message"], error
    metadata = error["data"][0]["metadata"]
    assert metadata["field"] == field and metadata[limit_name] == str(limit), metadata


TEXT = {"text": "hi"}
CASES = [
    ([TEXT] * 6, {}, "message.parts", "maxParts", 5),
    ([{"text": "x" * 51}], {}, "message.parts[0].text", "maxTextChars", 50),
    (
        [TEXT, {"raw": base64.b64encode(b"x" * 31).decode(), "mediaType": "text/plain"}],
        {},
        "message.parts[1].raw",
        "maxFileBytes",
        30,
    ),
    (
        [{"text": "hi", "metadata": {"k": "v" * 40}}],
        {},
        "message.parts[0].metadata",
        "maxMetadataBytes",
        40,
    ),
    ([TEXT], {"metadata": {"k": "v" * 40}}, "message.metadata", "maxMetadataBytes", 40),
]


@pytest.mark.parametrize(("parts", "fields", "field", "limit_name", "limit"), CASES)
def test_a_message_beyond_a_limit_is_refused_on_both_bindings(
    client: TestClient,
    parts: list[dict[str, Any]],
    fields: dict[str, Any],
    field: str,
    limit_name: str,
    limit: int,
) -> None:
    params = {"message": _message(parts, **fields), "configuration": {"returnImmediately": True}}
    tasks_before = client.get("/tasks").json()["totalSize"]
    _refused(_rpc(client, "SendMessage", params), field, limit_name, limit)
    response = client.post("/message:send", json=params)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in error["message"] and str(limit) in error["message"], error
    assert error["details"][0]["metadata"][limit_name] == str(limit)
    assert client.get("/tasks").json()["totalSize"] == tasks_before  # nothing was started


def test_a_message_at_the_limits_is_taken(client: TestClient) -> None:
    parts = [{"text": "y" * 50, "metadata": {"k": "v"}}] * 4 + [
        {"raw": base64.b64encode(b"x" * 30).decode(), "mediaType": "text/plain"}
    ]
    params = {"message": _message(parts), "configuration": {"returnImmediately": True}}
    body = _rpc(client, "SendMessage", params)
    assert "result" in body, body
    client.post(f"/tasks/{body['result']['task']['id']}:cancel", json={})


def test_params_metadata_beyond_the_limit_is_refused(client: TestClient) -> None:
    params = {"message": _message([TEXT]), "metadata": {"k": "v" * 40}}
    _refused(_rpc(client, "SendStreamingMessage", params), "metadata", "maxMetadataBytes", 40)


def test_100k_parts_are_refused_before_any_part_is_validated(client: TestClient) -> None:
    """1.5 MB of parts, the last one invalid: the count is refused before the parts are read
    (validating them would have named the invalid part, after seconds of work)."""
    parts: list[dict[str, Any]] = [{"text": "a"}] * 100_000 + [{}]
    params = {"message": _message(parts)}
    _refused(_rpc(client, "SendMessage", params), "message.parts", "maxParts", 5)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("GetTask", {"id": "nope", "historyLength": 8}),
        ("ListTasks", {"historyLength": 8}),
        ("SendMessage", {"message": _message([TEXT]), "configuration": {"historyLength": 8}}),
    ],
)
def test_history_length_beyond_the_cap_is_refused(
    client: TestClient, method: str, params: dict[str, Any]
) -> None:
    _refused(_rpc(client, method, params), "historyLength", "maxHistoryLength", 7)


def test_history_length_cap_on_rest_query(client: TestClient) -> None:
    response = client.get("/tasks?historyLength=8")
    assert response.status_code == 400, response.text
    assert "historyLength" in response.json()["error"]["message"]
    assert client.get("/tasks?historyLength=7").status_code == 200


def test_page_size_is_capped(client: TestClient) -> None:
    body = _rpc(client, "ListTasks", {"pageSize": 101})
    assert body["error"]["code"] == -32602 and "pageSize" in body["error"]["message"], body
