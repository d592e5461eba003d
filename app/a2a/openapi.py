"""The OpenAPI document of the HTTP surface, built from the same models the bindings use.

`python -m app.a2a.openapi > openapi/openapi.json` writes it; a test keeps the file equal to this.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import models_json_schema

from app.a2a.card import package_version
from app.a2a.openapi_generations import with_task_generations
from app.a2a.rest import LIST_QUERY, TENANT_PREFIX
from app.a2a.wire import ListTasksParams, SendMessageParams, TaskIdParams
from stores.models import ArtifactUpdate, StatusUpdate, Task
from stores.tenants import MAX_TENANT_LENGTH, TENANT_NAME

_REF = "#/components/schemas/{model}"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=name)}


def _param(name: str, where: str, kind: str) -> dict[str, Any]:
    return {"name": name, "in": where, "schema": {"type": kind}}


def _json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _ok(schema: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    return {"200": {"description": "OK", "content": {media_type: {"schema": schema}}}}


_ERROR = {
    "description": "AIP-193 error body",
    "content": {"application/json": {"schema": _ref("Error")}},
}
_SSE = {"type": "string", "description": "Server-sent events; each `data:` is one StreamResponse."}


def _v03_paths(task_id: list[dict[str, Any]], errors: dict[str, Any]) -> dict[str, Any]:
    """The A2A 0.3 HTTP+JSON routes: ProtoJSON of the 0.3 proto (see docs/protocol.md)."""
    body = {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}
    v03 = {"type": "object", "description": "ProtoJSON of the A2A 0.3 proto"}
    return {
        "/v1/message:send": {
            "post": {
                "summary": "A2A 0.3: send a message (SendMessageRequest -> SendMessageResponse)",
                "requestBody": body,
                "responses": {**_ok(v03), **errors},
            }
        },
        "/v1/message:stream": {
            "post": {
                "summary": "A2A 0.3: send a message and stream the task's events",
                "requestBody": body,
                "responses": {**_ok(_SSE, "text/event-stream"), **errors},
            }
        },
        "/v1/tasks/{id}": {
            "get": {
                "summary": "A2A 0.3: get a task",
                "parameters": [
                    *task_id,
                    {"name": "historyLength", "in": "query", "schema": {"type": "integer"}},
                ],
                "responses": {**_ok(v03), **errors},
            }
        },
        "/v1/tasks/{id}:cancel": {
            "post": {
                "summary": "A2A 0.3: cancel a task",
                "parameters": task_id,
                "responses": {**_ok(v03), **errors},
            }
        },
        "/v1/tasks/{id}:subscribe": {
            method: {
                "summary": "A2A 0.3: stream a task's events",
                "parameters": task_id,
                "responses": {**_ok(_SSE, "text/event-stream"), **errors},
            }
            for method in ("get", "post")
        },
        "/v1/card": {
            "get": {
                "summary": "A2A 0.3: the authenticated extended card",
                "responses": {**_ok({"type": "object"}), "400": _ERROR, "401": _ERROR},
            }
        },
    }


TENANT_PATHS = (
    "/message:send",
    "/message:stream",
    "/tasks",
    "/tasks/{id}",
    "/tasks/{id}:cancel",
    "/tasks/{id}:subscribe",
    "/tasks/{id}/pushNotificationConfigs",
    "/tasks/{id}/pushNotificationConfigs/{configId}",
    "/extendedAgentCard",
)
"""The 1.0 routes that have a copy within a tenant (the proto's `additional_bindings`)."""

_TENANT = {
    "name": "tenant",
    "in": "path",
    "required": True,
    "schema": {
        "type": "string",
        "pattern": f"^{TENANT_NAME.pattern}$",
        "maxLength": MAX_TENANT_LENGTH,
    },
    "description": "The tenant (docs/protocol.md#tenants); a `tenant` in the body is not read",
}


def _within_a_tenant(paths: dict[str, Any]) -> dict[str, Any]:
    """The copies of `paths` under `/{tenant}`: the same operations, scoped to the tenant."""
    return {
        TENANT_PREFIX + path: {
            method: operation
            | {
                "summary": f"{operation['summary']} (within a tenant)",
                "parameters": [_TENANT, *operation.get("parameters", [])],
            }
            for method, operation in item.items()
        }
        for path, item in paths.items()
    }


_EXTENSIONS = "A2A-Extensions"
_EXTENSIONS_REQUESTED = {
    "name": _EXTENSIONS,
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "The A2A extensions the client asks for: comma-separated URIs (0.3 clients"
    " may name it X-A2A-Extensions). One the agent requires and the request does not name is"
    " -32008 / 400 (docs/extensions.md).",
}
_EXTENSIONS_ACTIVATED = {
    "description": "The extensions activated for the request (comma-separated URIs: those it"
    " named that the agent declares), on a result, a stream or an error alike; absent when none"
    " was, or when the request was refused before activation (credentials, rate, a required"
    " extension missing). Also as X-A2A-Extensions for a client that used that name.",
    "schema": {"type": "string"},
}
_VERSION_REQUESTED = {
    "name": "A2A-Version",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "examples": ["1.0", "1.1", "0.3"]},
    "description": "The protocol version the client speaks (also as an `A2A-Version` query"
    " parameter, for browsers' SSE). Absent: the operation's own generation (a 0.3 client sends"
    " none). `1.1` adds task generations to the 1.0 operations; a version of another generation"
    " than the operation's, or one not served, is -32009 / 400 VERSION_NOT_SUPPORTED.",
}
NOT_A2A_PATHS = ("/.well-known/agent-card.json", "/healthz", "/readyz")
"""Paths that are not A2A operations: no extensions are read or named there."""


def _with_extension_headers(paths: dict[str, Any]) -> dict[str, Any]:
    """Every A2A operation with `A2A-Version` and `A2A-Extensions` as request headers, and
    `A2A-Extensions` a header of each of its responses (docs/extensions.md)."""
    return {
        path: item
        if path in NOT_A2A_PATHS
        else {
            method: operation
            | {
                "parameters": [
                    *operation.get("parameters", []),
                    _VERSION_REQUESTED,
                    _EXTENSIONS_REQUESTED,
                ],
                "responses": {
                    status: response
                    | {
                        "headers": {
                            **response.get("headers", {}),
                            _EXTENSIONS: _EXTENSIONS_ACTIVATED,
                        }
                    }
                    for status, response in operation["responses"].items()
                },
            }
            for method, operation in item.items()
        }
        for path, item in paths.items()
    }


def build_openapi() -> dict[str, Any]:
    _, definitions = models_json_schema(
        [(model, "validation") for model in (SendMessageParams, TaskIdParams, ListTasksParams)]
        + [(model, "serialization") for model in (Task, StatusUpdate, ArtifactUpdate)],
        by_alias=True,
        ref_template=_REF,
    )
    schemas: dict[str, Any] = definitions["$defs"]
    schemas["Error"] = {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer"},
                    "status": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {"type": "array", "items": {"type": "object"}},
                },
            }
        },
    }
    task_id = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
    errors = {"400": _ERROR, "404": _ERROR, "415": _ERROR, "503": _ERROR}
    paths: dict[str, Any] = {
        "/": {
            "post": {
                "summary": "A2A JSON-RPC 2.0 endpoint: the 1.0 methods (SendMessage,"
                " SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, ...) and"
                " the 0.3 ones (message/send, message/stream, tasks/get, tasks/cancel,"
                " tasks/resubscribe, ...); under `A2A-Version: 1.1`, the 1.0 methods with task"
                " generations (GetTask's `currentGeneration`, `ifGenerationMatch`, -32010)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {
                    "200": {
                        "description": "A JSON-RPC response, or an SSE stream of them",
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "text/event-stream": {"schema": _SSE},
                        },
                    }
                },
            }
        },
        "/message:send": {
            "post": {
                "summary": "Send a message; wait for the task to settle unless returnImmediately",
                "requestBody": _json_body("SendMessageParams"),
                "responses": {
                    **_ok({"type": "object", "properties": {"task": _ref("Task")}}),
                    **errors,
                },
            }
        },
        "/message:stream": {
            "post": {
                "summary": "Send a message and stream the task's events",
                "requestBody": _json_body("SendMessageParams"),
                "responses": {**_ok(_SSE, "text/event-stream"), **errors},
            }
        },
        "/tasks": {
            "get": {
                "summary": "List tasks, newest status first",
                "parameters": [
                    {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
                    for name in LIST_QUERY
                ],
                "responses": {**_ok({"type": "object"}), **errors},
            }
        },
        "/tasks/{id}": {
            "get": {
                "summary": "Get a task",
                "parameters": [
                    *task_id,
                    {"name": "historyLength", "in": "query", "schema": {"type": "integer"}},
                ],
                "responses": {**_ok(_ref("Task")), **errors},
            }
        },
        "/tasks/{id}:cancel": {
            "post": {
                "summary": "Cancel a task",
                "parameters": task_id,
                "responses": {**_ok(_ref("Task")), **errors},
            }
        },
        "/tasks/{id}:subscribe": {
            method: {
                "summary": "Stream a task's events: the task, or the events after Last-Event-ID",
                "parameters": [
                    *task_id,
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                ],
                "responses": {**_ok(_SSE, "text/event-stream"), **errors},
            }
            for method in ("get", "post")
        },
        "/tasks/{id}/pushNotificationConfigs": {
            "get": {
                "summary": "List the task's webhooks (push-notification configs)",
                "parameters": task_id,
                "responses": {**_ok({"type": "object"}), **errors},
            },
            "post": {
                "summary": "Register a webhook for the task (TaskPushNotificationConfig)",
                "parameters": task_id,
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                "responses": {**_ok({"type": "object"}), **errors},
            },
        },
        "/tasks/{id}/pushNotificationConfigs/{configId}": {
            method: {
                "summary": summary,
                "parameters": [
                    *task_id,
                    {
                        "name": "configId",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {**_ok({"type": "object"}), **errors},
            }
            for method, summary in (
                ("get", "Get one of the task's webhooks"),
                ("delete", "Remove one of the task's webhooks (idempotent)"),
            )
        },
        "/extendedAgentCard": {
            "get": {
                "summary": "The extended agent card (A2A_EXTENDED_CARD; 400 when there is none)",
                "responses": {**_ok({"type": "object"}), "400": _ERROR, "401": _ERROR},
            }
        },
        **_v03_paths(task_id, errors),
        "/.well-known/agent-card.json": {
            "get": {"summary": "The agent card", "responses": _ok({"type": "object"})}
        },
        "/healthz": {"get": {"summary": "The process is up", "responses": _ok({"type": "object"})}},
        "/readyz": {
            "get": {
                "summary": "The stores answer and the model adapter is loaded",
                "responses": {**_ok({"type": "object"}), "503": {"description": "Not ready"}},
            }
        },
    }
    with_task_generations(schemas, paths)  # A2A 1.1, under `A2A-Version: 1.1`
    paths |= _within_a_tenant({path: paths[path] for path in paths if path in TENANT_PATHS})
    paths = _with_extension_headers(paths)
    return {
        "openapi": "3.1.0",
        "info": {"title": "a2a-agent-server", "version": package_version()},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def render() -> str:
    return json.dumps(build_openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
