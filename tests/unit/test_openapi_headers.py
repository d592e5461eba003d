"""The OpenAPI document names `A2A-Extensions` where the server reads and writes it: a request
header of every A2A operation (both bindings, both generations, within a tenant too), and a
header of each of their responses; and the server does echo it, on a result and on an error."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from app.a2a.openapi import NOT_A2A_PATHS
from app.main import create_app
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
URI = "https://ext.example/echoed/v1"

OPERATIONS = [
    (path, method, operation)
    for path, item in DOCUMENT["paths"].items()
    if path not in NOT_A2A_PATHS
    for method, operation in item.items()
]


def test_the_a2a_operations_are_all_there() -> None:
    paths = {path for path, _, _ in OPERATIONS}
    assert {"/", "/message:send", "/tasks/{id}:cancel", "/v1/message:send"} <= paths
    assert "/{tenant}/tasks/{id}:subscribe" in paths
    assert len(OPERATIONS) >= 30


@pytest.mark.parametrize(
    ("path", "method", "operation"), OPERATIONS, ids=[f"{m} {p}" for p, m, _ in OPERATIONS]
)
def test_each_a2a_operation_lists_the_extensions_headers(path, method, operation) -> None:
    headers = [p for p in operation["parameters"] if p["in"] == "header"]
    assert "A2A-Extensions" in [p["name"] for p in headers], operation["parameters"]
    for status, response in operation["responses"].items():
        assert "A2A-Extensions" in response.get("headers", {}), (status, response)


def test_the_other_paths_do_not() -> None:
    for path in NOT_A2A_PATHS:
        for operation in DOCUMENT["paths"][path].values():
            assert "parameters" not in operation


async def test_the_server_names_the_activated_extensions_on_a_result_and_an_error() -> None:
    app = create_app(Settings(a2a_extensions=[{"uri": URI}]))
    transport = httpx.ASGITransport(app=app)
    headers = {"A2A-Version": "1.0", "A2A-Extensions": f"{URI}, https://ext.example/unknown"}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        listed = await client.get("/tasks", headers=headers)
        missing = await client.get("/tasks/no-such-task", headers=headers)
    assert listed.status_code == 200, listed.text
    assert missing.status_code == 404, missing.text
    assert listed.headers["A2A-Extensions"] == missing.headers["A2A-Extensions"] == URI
