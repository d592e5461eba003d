"""Turns that cannot finish: the iteration limit and upstream model failures end in FAILED."""

from __future__ import annotations

import re

import pytest

from tests.e2e.harness import describe, kind_of, send_params, state_of, stream_results
from tests.e2e.wire import assert_valid, message_text
from tests.fakes.fake_llm import error, tool_calls

pytestmark = pytest.mark.timeout(60)

SERVER_ENV = {"AGENT_MAX_ITERATIONS": "2"}


def test_max_iterations_fails_the_task(rpc, fake_llm, marker):
    fake_llm.script(tool_calls([("add", {"a": 1, "b": 1})], when_user_contains=marker, times=None))
    task = rpc.send(f"loop forever {marker}")
    assert_valid("task", task)
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    msg = message_text(task["status"].get("message"))
    assert re.search(r"iteration", msg, re.IGNORECASE), (
        f"status message should mention the iteration limit: {msg!r}"
    )
    n = len(fake_llm.requests_for(marker))
    assert 2 <= n <= 3, f"AGENT_MAX_ITERATIONS=2 but the model was called {n} times"


def test_max_iterations_stream_ends_failed(rpc, fake_llm, marker):
    fake_llm.script(tool_calls([("add", {"a": 2, "b": 2})], when_user_contains=marker, times=None))
    with rpc.stream("SendStreamingMessage", send_params(f"loop stream {marker}")) as s:
        events = list(s.sse_events())
    results = stream_results(events, s.request_id)
    seq = describe(results)
    assert kind_of(results[-1]) == "statusUpdate", seq
    assert state_of(results[-1]) == "TASK_STATE_FAILED", seq
    msg = message_text(results[-1]["statusUpdate"]["status"].get("message"))
    assert re.search(r"iteration", msg, re.IGNORECASE), seq


@pytest.mark.parametrize("status", [400, 500])
def test_model_error_fails_the_task(rpc, fake_llm, marker, status):
    fake_llm.script(
        error(status, f"upstream exploded {status}", when_user_contains=marker, times=None)
    )
    task = rpc.send(f"doomed {marker}")
    assert_valid("task", task)
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    assert task["status"].get("message"), f"a FAILED task should explain why: {task['status']}"
    assert "Traceback" not in str(task)
    # the task is queryable afterwards and stays FAILED
    assert rpc.get_task(task["id"])["status"]["state"] == "TASK_STATE_FAILED"
