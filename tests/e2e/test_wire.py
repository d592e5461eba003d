"""Self-test of the wire validator: it must accept good payloads and reject bad ones.

Runs without any server.
"""

from __future__ import annotations

import copy

import pytest

from tests.e2e.wire import assert_valid, is_valid

TASK = {
    "id": "t1",
    "contextId": "c1",
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-11-22T10:00:00.123Z"},
    "artifacts": [{"artifactId": "a1", "parts": [{"text": "hello"}]}],
    "history": [
        {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "c1"},
        {
            "messageId": "m2",
            "role": "ROLE_AGENT",
            "parts": [{"text": "hello"}],
            "contextId": "c1",
            "taskId": "t1",
        },
    ],
}

CARD = {
    "name": "agent",
    "description": "d",
    "version": "0.1.0",
    "supportedInterfaces": [
        {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "capabilities": {"streaming": True},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["text/plain"],
    "skills": [{"id": "s", "name": "s", "description": "d", "tags": ["t"]}],
}


def _mut(obj, path, value=None, delete=False):
    o = copy.deepcopy(obj)
    cur = o
    for k in path[:-1]:
        cur = cur[k]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return o


def test_good_payloads_pass():
    assert_valid("task", TASK)
    assert_valid("send_message_response", {"task": TASK})
    assert_valid("stream_response", {"task": TASK})
    assert_valid(
        "stream_response",
        {
            "statusUpdate": {
                "taskId": "t1",
                "contextId": "c1",
                "status": {"state": "TASK_STATE_WORKING"},
            }
        },
    )
    assert_valid(
        "stream_response",
        {
            "artifactUpdate": {
                "taskId": "t1",
                "contextId": "c1",
                "artifact": {"artifactId": "a", "parts": [{"text": "x"}]},
                "append": True,
                "lastChunk": False,
            }
        },
    )
    assert_valid(
        "list_tasks_response", {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
    )
    assert_valid("agent_card", CARD)
    assert_valid("message", TASK["history"][0])


@pytest.mark.parametrize(
    ("kind", "payload", "why"),
    [
        ("task", _mut(TASK, ["status", "state"], "completed"), "0.3 enum string"),
        ("task", _mut(TASK, ["status", "state"], "TASK_STATE_DONE"), "unknown enum"),
        ("task", _mut(TASK, ["status", "state"], 3), "integer enum"),
        ("task", _mut(TASK, ["history", 0, "role"], "user"), "0.3 role"),
        ("task", _mut(TASK, ["kind"], "task"), "unknown field (0.3 kind)"),
        ("task", _mut(TASK, ["id"], delete=True), "missing required id"),
        ("task", _mut(TASK, ["status"], delete=True), "missing required status"),
        ("task", _mut(TASK, ["context_id"], "c1"), "snake_case output key"),
        ("task", _mut(TASK, ["artifacts", 0, "parts"], []), "empty required parts"),
        ("task", _mut(TASK, ["artifacts", 0, "parts", 0], {}), "part without content"),
        (
            "task",
            _mut(TASK, ["artifacts", 0, "parts", 0], {"kind": "text", "text": "x"}),
            "0.3 part",
        ),
        ("task", _mut(TASK, ["status", "timestamp"], "2026-11-22T10:00:00+01:00"), "non-Z ts"),
        ("task", _mut(TASK, ["status", "timestamp"], "yesterday"), "garbage ts"),
        ("send_message_response", TASK, "unwrapped task"),
        ("send_message_response", {}, "empty oneof"),
        ("stream_response", {"task": TASK, "message": TASK["history"][0]}, "two oneof members"),
        (
            "stream_response",
            {
                "statusUpdate": {
                    "taskId": "t1",
                    "contextId": "c1",
                    "status": {"state": "TASK_STATE_COMPLETED"},
                    "final": True,
                }
            },
            "0.3 final flag",
        ),
        (
            "list_tasks_response",
            {"tasks": [], "pageSize": 50, "totalSize": 0},
            "missing nextPageToken",
        ),
        ("agent_card", _mut(CARD, ["skills"], []), "no skills"),
        ("agent_card", _mut(CARD, ["iconUrl"], 3), "iconUrl not a string"),
        (
            "agent_card",
            _mut(CARD, ["supportedInterfaces", 0, "protocolVersion"], delete=True),
            "interface without version",
        ),
        ("message", _mut(TASK["history"][0], ["messageId"], delete=True), "no messageId"),
    ],
)
def test_bad_payloads_are_rejected(kind, payload, why):
    assert not is_valid(kind, payload), why
    with pytest.raises(AssertionError):
        assert_valid(kind, payload)


def test_json_schema_bundle_rejects_what_the_spec_rejects():
    """The vendored A2A 1.0 JSON Schema is really applied (not just the proto parse)."""
    from wire import _schema_problems

    good = {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
    assert _schema_problems("task", good) == []
    bad = {"id": "t", "contextId": "c", "status": {"state": "completed"}, "kind": "task"}
    problems = _schema_problems("task", bad)
    assert any("completed" in problem for problem in problems), problems
    assert any("kind" in problem for problem in problems), problems
