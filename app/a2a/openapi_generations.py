"""A2A 1.1's task generations in the OpenAPI document (docs/protocol.md#a2a-11-task-generations).

The wire models are 1.0's: the 1.1 members are read from the raw params and appended to rendered
payloads (app/a2a/generations.py), only for a request served in 1.1. So they are added here to
the schemas and operations the document builds from those models, each saying that it applies
only under `A2A-Version: 1.1`, for a client generator to see them.
"""

from __future__ import annotations

from typing import Any

from app.errors import TaskGenerationMismatchError

__all__ = ["with_task_generations"]

_REF = "#/components/schemas/{model}"
_ONLY_IN_11 = (
    " Only under `A2A-Version: 1.1`: a request in 1.0, 0.3 or without a version gets no such"
    " member."
)
_READ_IN_11 = (
    " Only read under `A2A-Version: 1.1`: a request in 1.0, 0.3 or without a version is served"
    " as if it were absent."
)
_INT64 = "^[0-9]+$"

GENERATION = {
    "type": "string",
    "format": "int64",
    "pattern": _INT64,
    "description": "A2A 1.1: the task's generation, its journal position (the task at 1, each"
    ' event at the next), written as ProtoJSON writes an int64 (a decimal string, `"7"`).'
    " Contiguous in a stream, a subscribe and a Last-Event-ID replay: a gap means an event was"
    " missed (re-read the task). On a Task it is the generation of that snapshot (a GetTask"
    " while a turn works may be behind a stream's last event)." + _ONLY_IN_11,
}
"""`generation` on a Task and on a status or artifact update."""


def _generation_in(description: str) -> dict[str, Any]:
    """A generation a client sends: a JSON number or a decimal string (as ProtoJSON reads an
    int64), >= 0; anything else is 400 INVALID_PARAMS (-32602)."""
    return {
        "anyOf": [
            {"type": "string", "format": "int64", "pattern": _INT64},
            {"type": "integer", "format": "int64", "minimum": 0},
        ],
        "description": description + _READ_IN_11,
    }


IF_GENERATION_MATCH = _generation_in(
    "A2A 1.1: on a message naming an existing task (an answer to an input-required task), take"
    " it only while the task is at this generation (an atomic compare-and-set); otherwise 409"
    " ABORTED, TASK_GENERATION_MISMATCH (JSON-RPC -32010). A message without a `taskId` creates"
    " a task and ignores it."
)

CURRENT_GENERATION = {
    "name": "currentGeneration",
    "in": "query",
    "required": False,
    "schema": _generation_in(
        "A2A 1.1: a long poll. The task is returned at once if its generation is already past"
        " this one; else the request is held until it is (answered with the task at its new"
        " generation) or for at most `A2A_LONG_POLL_MAX_S` seconds (default 30; answered with"
        " the task as it stands). Events that carry no snapshot of the task (streamed chunks,"
        " progress) do not end the wait: the task returned is exactly at its generation, which"
        " may be behind a stream's last event. A held long poll counts as an open stream (503"
        " beyond `A2A_MAX_STREAMS`); one held when the replica starts draining is answered at"
        " once (one that would wait on a replica already draining is 503)."
    ),
    "description": "A2A 1.1: wait until the task's generation passes this one, or"
    " `A2A_LONG_POLL_MAX_S`, before answering." + _READ_IN_11,
}
"""GetTask's long poll (JSON-RPC: the `currentGeneration` param)."""

_MISMATCH = TaskGenerationMismatchError
_EXAMPLE = {
    "error": {
        "code": _MISMATCH.http_status,
        "status": _MISMATCH.status,
        "message": "Task generation mismatch: expected 3 but current generation is 5",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": _MISMATCH.reason,
                "domain": "a2a-protocol.org",
                "metadata": {
                    "taskId": "task-abc",
                    "expectedGeneration": "3",
                    "currentGeneration": "5",
                },
            }
        ],
    }
}

SCHEMAS: dict[str, Any] = {
    "ErrorInfo": {
        "type": "object",
        "description": "google.rpc.ErrorInfo, one of an AIP-193 error's `details`.",
        "properties": {
            "@type": {"const": "type.googleapis.com/google.rpc.ErrorInfo"},
            "reason": {"type": "string"},
            "domain": {"type": "string"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["@type", "reason", "domain"],
    },
    "TaskGenerationMismatchError": {
        "type": "object",
        "description": f"A2A 1.1 TaskGenerationMismatchError (JSON-RPC {_MISMATCH.code}): the"
        " AIP-193 body whose ErrorInfo has reason TASK_GENERATION_MISMATCH and the metadata"
        " `taskId`, `expectedGeneration` (the `ifGenerationMatch` sent) and `currentGeneration`"
        " (the task's, as GetTask shows it), as decimal strings.",
        "properties": {
            "error": {
                "type": "object",
                "properties": {
                    "code": {"const": _MISMATCH.http_status},
                    "status": {"const": _MISMATCH.status},
                    "message": {"type": "string"},
                    "details": {
                        "type": "array",
                        "items": {"$ref": _REF.format(model="ErrorInfo")},
                    },
                },
                "required": ["code", "status", "message", "details"],
            }
        },
        "required": ["error"],
    },
}

CONFLICT = {
    "description": "A2A 1.1: `configuration.ifGenerationMatch` is not the task's generation"
    " (TaskGenerationMismatchError); the answer was not taken. Only under `A2A-Version: 1.1`.",
    "content": {
        "application/json": {
            "schema": {"$ref": _REF.format(model="TaskGenerationMismatchError")},
            "example": _EXAMPLE,
        }
    },
}
"""The 409 of SendMessage and SendStreamingMessage (refused before a stream starts)."""

_WITH_GENERATION = ("Task", "StatusUpdate", "ArtifactUpdate")
_SENDS = ("/message:send", "/message:stream")


def with_task_generations(schemas: dict[str, Any], paths: dict[str, Any]) -> None:
    """Add 1.1's members, param and error to the 1.0 schemas and paths (in place; before the
    copies within a tenant are made, so that they have them too)."""
    for name in _WITH_GENERATION:
        schemas[name]["properties"]["generation"] = GENERATION
    schemas["SendMessageConfiguration"]["properties"]["ifGenerationMatch"] = IF_GENERATION_MATCH
    schemas.update(SCHEMAS)
    get_task = paths["/tasks/{id}"]["get"]
    get_task["parameters"] = [*get_task["parameters"], CURRENT_GENERATION]
    for path in _SENDS:
        responses = paths[path]["post"]["responses"]
        paths[path]["post"]["responses"] = {**responses, "409": CONFLICT}
