"""Tool execution by the agent engine, as a client sees it: parallel calls, tool errors as data,
the circuit breaker, progress updates, and tool units in later turns' history."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import send_params
from tests.e2e.wire import artifact_text
from tests.e2e_engine.engine_helpers import (
    assert_tool_messages_follow_their_calls,
    assistant_calls,
    call_args,
    status_text,
    stream_send,
    tool_messages,
    tool_text,
    validated_task,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

SERVER_ENV = {
    "AGENT_TOOL_CONCURRENCY": "5",
    "AGENT_MAX_CONSECUTIVE_TOOL_ERRORS": "3",
}


def test_parallel_tool_calls_run_concurrently_and_results_keep_call_order(rpc, fake_llm, marker):
    # Run one after the other these would take 3.0 s; concurrently ~1.2 s. The first call takes
    # longest, so the results finish in reverse call order.
    seconds = [1.2, 1.0, 0.8]
    fake_llm.script(
        tool_calls([("sleepy", {"seconds": s}) for s in seconds], when_user_contains=marker),
        text("all three slept", when_user_contains=marker),
    )
    run = stream_send(rpc, send_params(f"sleep three times {marker}"))
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    assert run.artifact_text() == "all three slept", run.seq

    progress = run.progress()
    calling = [p for p in progress if p[1] == "calling sleepy"]
    finished = [p for p in progress if p[1] == "sleepy finished"]
    assert len(calling) == 3 and len(finished) == 3, f"progress: {progress}\n{run.seq}"
    span = finished[-1][2] - calling[0][2]
    assert span < 2.2, (
        f"three sleepy calls took {span:.2f}s from the first 'calling sleepy' to the last "
        f"'sleepy finished' (sequential would be {sum(seconds):.1f}s): not run in parallel"
    )
    assert max(i for i, *_ in calling) < min(i for i, *_ in finished), (
        f"all three calls should start before any finishes\n{run.seq}"
    )

    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    calls = assistant_calls(reqs[1])
    assert [c["function"]["name"] for c in calls] == ["sleepy"] * 3, calls
    assert [call_args(c)["seconds"] for c in calls] == seconds, calls
    results = tool_messages(reqs[1])
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls], (
        f"tool results not in call order: results {[m['tool_call_id'] for m in results]} "
        f"vs calls {[c['id'] for c in calls]}"
    )
    assert [tool_text(m) for m in results] == [f"slept {s:g}" for s in seconds], results
    assert_tool_messages_follow_their_calls(reqs[1])


def test_failing_tool_is_reported_to_the_model_and_the_turn_recovers(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("flaky", {"x": 7})], when_user_contains=marker),
        text("flaky is broken, sorry", when_user_contains=marker),
    )
    run = stream_send(rpc, send_params(f"use flaky {marker}"))
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    assert run.artifact_text() == "flaky is broken, sorry", run.seq
    texts = [t for _, t, _ in run.progress()]
    assert "calling flaky" in texts, run.seq
    assert "flaky failed" in texts, f"no 'flaky failed' WORKING status update\n{run.seq}"
    assert "flaky finished" not in texts, run.seq
    assert texts.index("calling flaky") < texts.index("flaky failed"), texts

    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    (call,) = assistant_calls(reqs[1])
    (result,) = tool_messages(reqs[1])
    assert result["tool_call_id"] == call["id"], (result, call)
    content = tool_text(result)
    assert content.startswith("Error:"), f"tool error should start with 'Error:': {content!r}"
    assert "ValueError" in content and "boom" in content, content

    task = validated_task(rpc.get_task(run.task_id))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == "flaky is broken, sorry"


def test_same_tool_error_three_times_trips_the_circuit_breaker(rpc, fake_llm, marker):
    # The model never gives up: every request gets the same flaky call.
    fake_llm.script(
        tool_calls([("flaky", {"x": 1})], when_user_contains=marker, times=None),
    )
    task = validated_task(rpc.send(f"keep trying flaky {marker}"))
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    msg = status_text(task)
    assert "flaky" in msg, f"failure message should name the tool: {msg!r}"
    assert "3" in msg and "AGENT_MAX_CONSECUTIVE_TOOL_ERRORS" in msg, (
        f"failure message should name the limit: {msg!r}"
    )
    assert task["status"]["message"]["role"] == "ROLE_AGENT", task["status"]

    time.sleep(0.5)  # nothing more may happen after the failure
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 3, f"expected exactly 3 model calls before the breaker, got {len(reqs)}"
    # each later request carries the earlier failures, as complete units
    assert len(tool_messages(reqs[2])) == 2, reqs[2]["messages"]
    assert_tool_messages_follow_their_calls(reqs[2])
    later = rpc.get_task(task["id"])
    assert later["status"]["state"] == "TASK_STATE_FAILED", later["status"]


def test_tool_progress_brackets_the_tool_run(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("add", {"a": 40, "b": 2})], when_user_contains=marker),
        text(["The answer ", "is 42."], when_user_contains=marker),
    )
    run = stream_send(rpc, send_params(f"add 40 and 2 {marker}"))
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    progress = run.progress()
    calling = [i for i, t, _ in progress if t == "calling add"]
    finished = [i for i, t, _ in progress if t == "add finished"]
    assert len(calling) == 1, f"want one 'calling add' WORKING update\n{run.seq}"
    assert len(finished) == 1, f"want one 'add finished' WORKING update\n{run.seq}"
    arts = run.artifact_indexes()
    assert arts, run.seq
    assert calling[0] < finished[0] < arts[0], (
        f"'calling add' must precede 'add finished', which must precede the answer that uses "
        f"its result\n{run.seq}"
    )
    upd = run.results[calling[0]]["statusUpdate"]
    assert upd["taskId"] == run.task_id and upd["contextId"] == run.context_id, upd
    assert upd["status"]["message"]["role"] == "ROLE_AGENT", upd
    assert run.artifact_text() == "The answer is 42.", run.seq
    reqs = fake_llm.requests_for(marker)
    assert [tool_text(m) for m in tool_messages(reqs[1])] == ["42"], reqs[1]["messages"]


def test_next_turn_sees_the_tool_unit_of_the_previous_turn(rpc, fake_llm, marker):
    first, second = f"{marker}-first", f"{marker}-second"
    fake_llm.script(
        tool_calls(
            [("add", {"a": 2, "b": 3}), ("add", {"a": 10, "b": 1})],
            content="Let me add.",
            when_user_contains=first,
        ),
        text("5 and 11", when_user_contains=first),
        text("still 5 and 11", when_user_contains=second),
    )
    t1 = validated_task(rpc.send(f"add twice {first}"))
    assert t1["status"]["state"] == "TASK_STATE_COMPLETED", t1["status"]
    t2 = validated_task(rpc.send(f"what were they? {second}", context_id=t1["contextId"]))
    assert t2["status"]["state"] == "TASK_STATE_COMPLETED", t2["status"]
    assert t2["contextId"] == t1["contextId"] and t2["id"] != t1["id"]
    assert artifact_text(t2) == "still 5 and 11"

    (req,) = fake_llm.requests_for(second)
    msgs = req["messages"]
    roles = [m["role"] for m in msgs if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "user"], roles
    convo = [m for m in msgs if m["role"] != "system"]
    assert first in tool_text(convo[0]) and second in tool_text(convo[-1]), convo
    assert tool_text(convo[1]) == "Let me add.", convo[1]
    calls = convo[1].get("tool_calls") or []
    assert [c["function"]["name"] for c in calls] == ["add", "add"], convo[1]
    assert [call_args(c) for c in calls] == [{"a": 2, "b": 3}, {"a": 10, "b": 1}], calls
    assert [m["tool_call_id"] for m in convo[2:4]] == [c["id"] for c in calls], convo
    assert [tool_text(m) for m in convo[2:4]] == ["5", "11"], convo
    assert tool_text(convo[4]) == "5 and 11", convo[4]
    assert_tool_messages_follow_their_calls(req)
