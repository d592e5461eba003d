"""AGENT_PROFILE=tck: every behaviour the conformance suites drive, through the real stack.

Also the general features it is built on: tools returning files and data (artifacts with file
and data parts, stored with the task), a tool declining the task (REJECTED), a hook answering
with a Message instead of a Task (both bindings, blocking and streamed), an empty answer leaving no
empty artifact. Every payload is checked against the 1.0 proto and JSON Schema.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from tests.e2e.harness import new_id
from tests.e2e.wire import assert_valid

pytestmark = pytest.mark.timeout(60)

SERVER_ENV = {"AGENT_PROFILE": "tck"}
HEADERS = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=20, headers=HEADERS) as c:
        yield c


def message(prefix: str, text: str = "TCK test", **fields: Any) -> dict[str, Any]:
    return {
        "messageId": new_id(f"{prefix}-"),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **fields,
    }


def send(http: httpx.Client, prefix: str, **fields: Any) -> dict[str, Any]:
    response = http.post("/message:send", json={"message": message(prefix, **fields)})
    assert response.status_code == 200, response.text
    assert_valid("send_message_response", response.json())
    return response.json()


def stream(http: httpx.Client, prefix: str) -> list[dict[str, Any]]:
    response = http.post("/message:stream", json={"message": message(prefix)})
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    events = [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]
    for event in events:
        assert_valid("stream_response", event)
    return events


def final_state(events: list[dict[str, Any]]) -> str:
    return events[-1]["statusUpdate"]["status"]["state"]


def test_complete_task(http):
    task = send(http, "tck-complete-task")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]


def test_text_artifact(http):
    task = send(http, "tck-artifact-text")["task"]
    assert task["artifacts"][0]["parts"] == [{"text": "Generated text content"}]


def test_file_artifact_with_bytes_and_nothing_empty_beside_it(http):
    task = send(http, "tck-artifact-file")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    # The file is the answer: no empty text artifact after it.
    [artifact] = task["artifacts"]
    [part] = artifact["parts"]
    assert part["filename"] == "output.txt" and part["mediaType"] == "text/plain"
    assert base64.b64decode(part["raw"]) == b"tck"
    # Stored with the task: GetTask shows the same artifact.
    got = http.get(f"/tasks/{task['id']}").json()
    assert got["artifacts"] == task["artifacts"]


def test_file_artifact_by_url(http):
    [artifact] = send(http, "tck-artifact-file-url")["task"]["artifacts"]
    assert artifact["parts"] == [
        {
            "url": "https://example.com/output.txt",
            "mediaType": "text/plain",
            "filename": "output.txt",
        }
    ]


def test_data_artifact(http):
    [artifact] = send(http, "tck-artifact-data")["task"]["artifacts"]
    assert artifact["parts"] == [{"data": {"key": "value", "count": 42}}]


def test_the_model_reads_a_description_not_the_bytes(http):
    task = send(http, "tck-artifact-file")["task"]
    history = http.get(f"/tasks/{task['id']}").json()["history"]
    assert all("dGNr" not in json.dumps(item) for item in history[1:])  # base64 of the bytes


def test_reject_task(http):
    task = send(http, "tck-reject-task")["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    assert "declines" in task["status"]["message"]["parts"][0]["text"]


def test_message_response_on_both_bindings(http):
    body = send(http, "tck-message-response")
    assert "task" not in body
    assert body["message"]["role"] == "ROLE_AGENT"
    assert body["message"]["parts"] == [{"text": "Direct message response"}]
    rpc = http.post(
        "/",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": message("tck-message-response")},
        },
    ).json()
    assert rpc["result"]["message"]["parts"] == [{"text": "Direct message response"}]
    events = stream(http, "tck-message-response")
    assert len(events) == 1 and events[0]["message"]["parts"] == [
        {"text": "Direct message response"}
    ]


def test_message_response_in_03(http):
    params = {
        "message": {
            "kind": "message",
            "role": "user",
            "messageId": new_id("tck-message-response-"),
            "parts": [{"kind": "text", "text": "hi"}],
        }
    }
    body = httpx.post(
        f"{http.base_url}/",
        json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params},
    ).json()
    assert body["result"]["kind"] == "message"
    assert body["result"]["parts"] == [{"kind": "text", "text": "Direct message response"}]


def test_input_required_then_completed_by_the_answer(http):
    task = send(http, "tck-input-required")["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    follow_up = send(http, "tck-complete-task", taskId=task["id"], contextId=task["contextId"])[
        "task"
    ]
    assert follow_up["id"] == task["id"]
    assert follow_up["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_03_tck_message_stays_open_to_be_continued_and_canceled(http):
    task = send(http, "test-state")["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    again = send(http, "test-followup", taskId=task["id"], contextId=task["contextId"])["task"]
    assert again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = http.post(f"/tasks/{task['id']}:cancel", json={}).json()
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_streamed_chunks_append(http):
    events = stream(http, "tck-stream-artifact-chunked")
    chunks = [event["artifactUpdate"] for event in events if "artifactUpdate" in event]
    assert [chunk["artifact"]["parts"][0]["text"] for chunk in chunks] == ["chunk-1 ", "chunk-2"]
    assert [chunk.get("append", False) for chunk in chunks] == [False, True]
    assert [chunk.get("lastChunk", False) for chunk in chunks] == [False, True]
    assert final_state(events) == "TASK_STATE_COMPLETED"


def test_streamed_file(http):
    events = stream(http, "tck-stream-artifact-file")
    [update] = [event["artifactUpdate"] for event in events if "artifactUpdate" in event]
    assert update["artifact"]["parts"][0]["filename"] == "output.txt"
    assert final_state(events) == "TASK_STATE_COMPLETED"


def test_task_failure_by_text(http):
    task = send(http, "plain", text="tck-task-failure please")["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"


def test_other_tck_ids_complete(http):
    task = send(http, "tck-something-else")["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"][0]["text"].startswith("Unhandled messageId prefix")
