"""The OpenAPI document names `A2A-Version` and `A2A-Extensions` where the server reads them:
request headers of every A2A operation (both bindings, both generations, within a tenant too),
`A2A-Extensions` a header of each of their responses too; and the server does what they say."""

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


@pytest.mark.parametrize(
    ("path", "method", "operation"), OPERATIONS, ids=[f"{m} {p}" for p, m, _ in OPERATIONS]
)
def test_each_a2a_operation_lists_the_version_header(path, method, operation) -> None:
    (version,) = [p for p in operation["parameters"] if p["name"] == "A2A-Version"]
    assert version["in"] == "header" and version["required"] is False
    assert "1.1" in version["schema"]["examples"]


async def test_a_version_of_the_other_generation_is_refused_as_documented() -> None:
    app = create_app(Settings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        refused = await client.get("/tasks", headers={"A2A-Version": "0.3"})
        served = await client.get("/tasks", headers={"A2A-Version": "1.1"})
    assert refused.status_code == 400, refused.text
    assert "VERSION_NOT_SUPPORTED" in refused.text
    assert served.status_code == 200, served.text


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
