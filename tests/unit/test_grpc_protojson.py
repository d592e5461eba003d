"""The gRPC binding's ProtoJSON reader (app/grpc/protojson.py) reads what protobuf's own reader
(`json_format.ParseDict`, unknown fields ignored) reads, for every shape the binding sends."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2
from a2a.types import a2a_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from app.grpc.protojson import protobuf_of, reader

TASK = {
    "id": "t-1",
    "contextId": "c-1",
    "kind": "task",  # a member the proto does not have: left out
    "status": {
        "state": "TASK_STATE_INPUT_REQUIRED",
        "timestamp": "2026-11-28T00:10:00.123Z",
        "message": {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "Which?"}]},
    },
    "artifacts": [
        {
            "artifactId": "a-1",
            "name": "answer",
            "parts": [
                {"text": "hello", "metadata": {"k": [1, "two", None, {"x": True}]}},
                {"raw": "aGVsbG8gd29ybGQ=", "mediaType": "text/plain", "filename": "out.txt"},
                {"raw": "_-8", "mediaType": "application/octet-stream"},
                {"url": "https://example.com/f", "mediaType": "text/plain"},
                {"data": {"key": "value", "count": 42}},
                {"data": [1, 2, 3]},
                {"data": "just text"},
            ],
        }
    ],
    "history": [
        {
            "messageId": "m",
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}],
            "referenceTaskIds": ["t-0"],
            "extensions": ["urn:x"],
        }
    ],
    "metadata": {"usage": {"promptTokens": 120, "llmCalls": 2}, "nested": {"a": {"b": []}}},
}

CARD = {
    "name": "Agent",
    "description": "d",
    "version": "1",
    "supportedInterfaces": [
        {"url": "127.0.0.1:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {"streaming": True, "pushNotifications": False},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "S", "description": "x", "tags": ["t"]}],
    "securitySchemes": {
        "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}},
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
    },
    "securityRequirements": [{"schemes": {"apiKey": {"list": []}, "bearer": {"list": ["a"]}}}],
    "url": "http://ignored.example",  # a 0.3 member: left out
}

CASES: list[tuple[type[Message], dict[str, Any]]] = [
    (a2a_pb2.SendMessageResponse, {"task": TASK}),
    (a2a_pb2.SendMessageResponse, {"message": TASK["history"][0]}),
    (
        a2a_pb2.StreamResponse,
        {"statusUpdate": {"taskId": "t", "contextId": "c", "status": TASK["status"]}},
    ),
    (
        a2a_pb2.StreamResponse,
        {
            "artifactUpdate": {
                "taskId": "t",
                "contextId": "c",
                "artifact": TASK["artifacts"][0],
                "append": True,
                "lastChunk": False,
            }
        },
    ),
    (
        a2a_pb2.ListTasksResponse,
        {"tasks": [TASK, TASK], "nextPageToken": "", "pageSize": 50, "totalSize": 2},
    ),
    (
        a2a_pb2.TaskPushNotificationConfig,
        {
            "taskId": "t",
            "id": "p",
            "url": "https://h/x",
            "token": "k",
            "authentication": {"scheme": "Bearer", "credentials": "s"},
        },
    ),
    (a2a_pb2.AgentCard, CARD),
    (
        a2a_v0_3_pb2.StreamResponse,
        {
            "statusUpdate": {
                "taskId": "t",
                "contextId": "c",
                "status": {"state": "TASK_STATE_CANCELLED"},
                "final": True,
            }
        },
    ),
    (
        a2a_v0_3_pb2.Task,
        {
            "id": "t",
            "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "history": [
                {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "content": [
                        {"file": {"fileWithBytes": "aGk=", "mimeType": "text/plain"}},
                        {"data": {"data": {"a": 1}}},
                    ],
                }
            ],
        },
    ),
    (
        a2a_v0_3_pb2.TaskPushNotificationConfig,
        {
            "name": "tasks/t/pushNotificationConfigs/p",
            "pushNotificationConfig": {
                "id": "p",
                "url": "https://h",
                "authentication": {"schemes": ["Bearer"], "credentials": "c"},
            },
        },
    ),
]


@pytest.mark.parametrize(
    ("message_class", "value"), CASES, ids=lambda case: getattr(case, "__name__", "")
)
def test_reads_as_protobufs_own_reader_does(
    message_class: type[Message], value: dict[str, Any]
) -> None:
    expected = json_format.ParseDict(value, message_class(), ignore_unknown_fields=True)
    assert reader(message_class)(value) == expected
    assert protobuf_of(value, message_class) == expected


def test_a_timestamp_with_nanoseconds_and_an_offset() -> None:
    for stamp in (
        "2026-11-28T00:10:00.123456789Z",
        "2026-11-28T01:10:00+01:00",
        "2026-11-28T00:10:00Z",
    ):
        value = {"status": {"state": "TASK_STATE_WORKING", "timestamp": stamp}}
        expected = json_format.ParseDict(value, a2a_pb2.Task())
        assert reader(a2a_pb2.Task)(value) == expected, stamp
