"""The in-memory server stays bounded under sustained traffic, seen from outside: beyond
A2A_MEMORY_MAX_TASKS, the conversation written to longest ago is gone (a follow-up in its context
reaches the model without it), a recent one keeps its history, and the task of the oldest turn is
no longer found. `a2a-server` as a user starts it, no Redis."""

from __future__ import annotations

import pytest

from tests.fakes.fake_llm import message_text as llm_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(120)

LIMIT = 20
SERVER_ENV = {"A2A_MEMORY_MAX_TASKS": str(LIMIT)}


def _users(body: dict) -> list[str]:
    return [llm_text(m) for m in body["messages"] if m["role"] == "user"]


def test_beyond_the_limit_the_oldest_conversation_goes_and_a_recent_one_stays(
    rpc, fake_llm, server, marker
):
    fake_llm.script(text("ok", when_user_contains=marker, times=None))
    oldest = rpc.send(f"oldest {marker}-old1")
    assert oldest["status"]["state"] == "TASK_STATE_COMPLETED"
    recent = None
    for n in range(LIMIT + 5):  # each in a new context: a conversation and a task each
        recent = rpc.send(f"filler {n} {marker}")
        assert recent["status"]["state"] == "TASK_STATE_COMPLETED"
    assert recent is not None

    rpc.send(f"again {marker}-old2", context_id=oldest["contextId"])
    rpc.send(f"again {marker}-new2", context_id=recent["contextId"])
    (old_follow_up,) = fake_llm.requests_for(f"{marker}-old2")
    (new_follow_up,) = fake_llm.requests_for(f"{marker}-new2")
    assert _users(old_follow_up) == [f"again {marker}-old2"], "the oldest history was kept"
    assert _users(new_follow_up) == [f"filler {LIMIT + 4} {marker}", f"again {marker}-new2"]

    error = rpc.error("GetTask", {"id": oldest["id"]})
    assert error["code"] == -32001  # TaskNotFoundError: dropped to make room
    server.settle_log()
    assert "conversations written to longest ago" in server.log_since(0)
