"""The OpenAPI document describes A2A 1.1's task generations, as a client generator reads them:
`generation` on Task and on both update events, GetTask's `currentGeneration` long poll,
`ifGenerationMatch` in SendMessageConfiguration, and the 409 TaskGenerationMismatchError of the
sends; each saying it applies only under `A2A-Version: 1.1`. The schemas are checked by
validating values against them, as a generated client would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.errors import TaskGenerationMismatchError

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = json.loads((ROOT / "openapi" / "openapi.json").read_text())
SCHEMAS = DOCUMENT["components"]["schemas"]
PATHS = DOCUMENT["paths"]


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """`schema` with the document's components beside it, so its `#/components/...` refs
    resolve."""
    return Draft202012Validator({**schema, "components": DOCUMENT["components"]})


def ref(name: str) -> Draft202012Validator:
    return validator({"$ref": f"#/components/schemas/{name}"})


@pytest.mark.parametrize("name", ["Task", "StatusUpdate", "ArtifactUpdate"])
def test_a_task_and_each_update_have_a_generation_in_11(name: str) -> None:
    generation = SCHEMAS[name]["properties"]["generation"]
    assert "A2A-Version: 1.1" in generation["description"]
    assert "generation" not in SCHEMAS[name].get("required", [])  # absent below 1.1
    check = validator(generation)
    assert check.is_valid("7") and check.is_valid("0")
    assert not check.is_valid(7), "ProtoJSON writes an int64 as a string"
    assert not check.is_valid("-1") and not check.is_valid("7.5")


@pytest.mark.parametrize("path", ["/tasks/{id}", "/{tenant}/tasks/{id}"])
def test_get_task_takes_current_generation_as_a_long_poll(path: str) -> None:
    (param,) = [p for p in PATHS[path]["get"]["parameters"] if p["name"] == "currentGeneration"]
    assert param["in"] == "query" and not param["required"]
    description = param["schema"]["description"]
    assert "A2A_LONG_POLL_MAX_S" in description and "held until" in description
    assert "A2A-Version: 1.1" in param["description"]
    check = validator(param["schema"])
    assert check.is_valid("3") and check.is_valid(3) and check.is_valid(0)
    assert not check.is_valid(-1) and not check.is_valid("three") and not check.is_valid("-1")


def test_send_message_configuration_takes_if_generation_match() -> None:
    member = SCHEMAS["SendMessageConfiguration"]["properties"]["ifGenerationMatch"]
    assert "A2A-Version: 1.1" in member["description"]
    assert "409" in member["description"]
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "yes"}], "taskId": "t"}
    params = ref("SendMessageParams")
    for value in ("3", 3):
        assert params.is_valid({"message": message, "configuration": {"ifGenerationMatch": value}})
    assert not params.is_valid({"message": message, "configuration": {"ifGenerationMatch": -3}})


SENDS = ["/message:send", "/message:stream", "/{tenant}/message:send", "/{tenant}/message:stream"]


@pytest.mark.parametrize("path", SENDS)
def test_the_sends_answer_409_with_the_mismatch_error(path: str) -> None:
    conflict = PATHS[path]["post"]["responses"]["409"]
    assert "A2A-Version: 1.1" in conflict["description"]
    content = conflict["content"]["application/json"]
    assert content["schema"] == {"$ref": "#/components/schemas/TaskGenerationMismatchError"}
    error = content["example"]["error"]
    assert (error["code"], error["status"]) == (409, "ABORTED")
    (info,) = error["details"]
    assert info["reason"] == TaskGenerationMismatchError.reason == "TASK_GENERATION_MISMATCH"
    assert set(info["metadata"]) == {"taskId", "expectedGeneration", "currentGeneration"}
    ref("TaskGenerationMismatchError").validate(content["example"])


def test_the_mismatch_error_schema_is_an_aip_193_body_with_error_info() -> None:
    check = ref("TaskGenerationMismatchError")
    body = {
        "error": {
            "code": 409,
            "status": "ABORTED",
            "message": "Task generation mismatch: expected 3 but current generation is 5",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "TASK_GENERATION_MISMATCH",
                    "domain": "a2a-protocol.org",
                    "metadata": {
                        "taskId": "t",
                        "expectedGeneration": "3",
                        "currentGeneration": "5",
                    },
                }
            ],
        }
    }
    check.validate(body)
    assert not check.is_valid({"error": {**body["error"], "code": 400}})
    assert not check.is_valid({"error": {**body["error"], "details": [{"reason": "X"}]}})
    assert (
        str(TaskGenerationMismatchError.code)
        in SCHEMAS["TaskGenerationMismatchError"]["description"]
    )


def test_only_the_sends_answer_409() -> None:
    conflicting = {
        path for path, item in PATHS.items() for op in item.values() if "409" in op["responses"]
    }
    assert conflicting == set(SENDS)
