"""What the gRPC binding's ProtoJSON route costs per call: protobuf <-> the JSON the HTTP bindings
already read and write (app/grpc/calls.py), against what the JSON-RPC binding does for the same.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/grpc_conversions.py

Prints microseconds per conversion (best of 5 runs of N): a SendMessage request in, a completed
task out (the reply of a blocking send: history of 2, one answer artifact), one streamed artifact
chunk out; each beside the JSON-only work the HTTP bindings do for it.
"""

from __future__ import annotations

import timeit

from a2a.types import a2a_pb2
from google.protobuf import json_format

from app.a2a.wire import render_entry
from app.grpc.protojson import protobuf_of
from app.grpc.service_v1 import render_stream_response
from app.http.json_body import parse_json, render_json
from stores.codec import dump_event, stored_entry
from stores.models import Artifact, ArtifactUpdate, Part

N = 5_000

REQUEST = a2a_pb2.SendMessageRequest(
    message=a2a_pb2.Message(
        message_id="m-1",
        role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text="What is the weather like in Paris today? " * 4)],
    )
)
TEXT = "The weather in Paris is mild today, with a light breeze. " * 8
TASK = {
    "id": "9f1c2b9e-6a55-4c7e-8d0c-1f2e3d4c5b6a",
    "contextId": "1a2b3c4d-5e6f-4a1b-9c8d-7e6f5a4b3c2d",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-28T00:10:00.123Z"},
    "artifacts": [{"artifactId": "a-1", "name": "answer", "parts": [{"text": TEXT}]}],
    "history": [
        {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "What is the weather?"}]},
        {"messageId": "m-2", "role": "ROLE_AGENT", "parts": [{"text": TEXT}]},
    ],
    "metadata": {"usage": {"promptTokens": 120, "completionTokens": 80, "llmCalls": 2}},
}
CHUNK = stored_entry(
    7,
    dump_event(
        ArtifactUpdate(
            task_id=TASK["id"],
            context_id=TASK["contextId"],
            artifact=Artifact(artifact_id="a-1", name="answer", parts=[Part(text="tok042 ")]),
            append=True,
        )
    ),
)
REQUEST_JSON = render_json(json_format.MessageToDict(REQUEST))


def best_us(statement: object) -> float:
    return min(timeit.repeat(statement, number=N, repeat=5)) / N * 1e6  # type: ignore[arg-type]


def main() -> None:
    rows = [
        ("request in: MessageToDict (gRPC)", lambda: json_format.MessageToDict(REQUEST)),
        ("request in: parse_json (JSON-RPC body)", lambda: parse_json(REQUEST_JSON)),
        (
            "task out: protobuf_of + serialize (gRPC)",
            lambda: protobuf_of({"task": TASK}, a2a_pb2.SendMessageResponse).SerializeToString(),
        ),
        (
            "task out: json_format.Parse + serialize (gRPC, the library's reader)",
            lambda: json_format.Parse(
                render_json({"task": TASK}), a2a_pb2.SendMessageResponse()
            ).SerializeToString(),
        ),
        ("task out: render_json (JSON-RPC)", lambda: render_json({"task": TASK})),
        (
            "chunk out: render_stream_response + serialize (gRPC)",
            lambda: render_stream_response(CHUNK).SerializeToString(),
        ),
        (
            "chunk out: json_format.Parse + serialize (gRPC, the library's reader)",
            lambda: json_format.Parse(
                render_entry(CHUNK), a2a_pb2.StreamResponse()
            ).SerializeToString(),
        ),
        ("chunk out: render_entry (SSE)", lambda: render_entry(CHUNK)),
    ]
    for name, statement in rows:
        print(f"{best_us(statement):8.1f} us  {name}")


if __name__ == "__main__":
    main()
