"""SubscribeToTask: snapshot first, live events until terminal, concurrent subscribers."""

from __future__ import annotations

import pytest

from tests.e2e.harness import (
    TERMINAL_STATES,
    assert_error,
    check_error_object,
    describe,
    kind_of,
    state_of,
    stream_results,
)
from tests.e2e.wire import artifact_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)


def _start(rpc, msg):
    task = rpc.send(msg, configuration={"returnImmediately": True})
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), task
    return task


def test_subscribe_to_running_task(rpc, fake_llm, marker):
    fake_llm.script(
        text(["one ", "two ", "three"], delay=1.0, chunk_delay=0.1, when_user_contains=marker)
    )
    task = _start(rpc, f"subscribe me {marker}")
    with rpc.stream("SubscribeToTask", {"id": task["id"]}) as s:
        assert s.is_sse, f"{s.status_code} {s.content_type}: {s.response.read()[:500]!r}"
        events = list(s.sse_events())
    results = stream_results(events, s.request_id)
    seq = describe(results)
    assert kind_of(results[0]) == "task", f"first event must be the Task snapshot\n{seq}"
    snap = results[0]["task"]
    assert snap["id"] == task["id"] and snap["contextId"] == task["contextId"]
    assert snap["status"]["state"] not in TERMINAL_STATES, seq
    for r in results[1:]:
        ev = r[kind_of(r)]
        assert ev["taskId"] == task["id"] and ev["contextId"] == task["contextId"], r
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED", seq
    assert kind_of(results[-1]) == "statusUpdate", seq
    arts = "".join(
        p.get("text", "")
        for r in results
        if kind_of(r) == "artifactUpdate"
        for p in r["artifactUpdate"]["artifact"]["parts"]
    )
    assert arts == "one two three", f"subscribed before the model answered\n{seq}"
    assert artifact_text(rpc.get_task(task["id"])) == "one two three"


def test_concurrent_subscribers_see_the_same_events(rpc, fake_llm, marker):
    fake_llm.script(text(["x", "y", "z"], delay=1.5, chunk_delay=0.1, when_user_contains=marker))
    task = _start(rpc, f"two watchers {marker}")
    with (
        rpc.stream("SubscribeToTask", {"id": task["id"]}) as a,
        rpc.stream("SubscribeToTask", {"id": task["id"]}) as b,
    ):
        ita, itb = a.sse_events(), b.sse_events()
        first_a, first_b = next(ita), next(itb)  # both subscribed before the model answers
        rest_a, rest_b = list(ita), list(itb)
    ra = stream_results([first_a, *rest_a], a.request_id)
    rb = stream_results([first_b, *rest_b], b.request_id)

    def live(results):
        return [r for r in results[1:] if kind_of(r) == "artifactUpdate"] + [results[-1]]

    assert live(ra) == live(rb), f"A:\n{describe(ra)}\nB:\n{describe(rb)}"
    assert state_of(ra[-1]) == "TASK_STATE_COMPLETED"


def test_subscribe_while_streaming_send(rpc, fake_llm, marker):
    from tests.e2e.harness import send_params

    fake_llm.script(text(["p", "q"], delay=1.0, chunk_delay=0.1, when_user_contains=marker))
    with rpc.stream("SendStreamingMessage", send_params(f"sender+watcher {marker}")) as a:
        ita = a.sse_events()
        first = next(ita)
        tid = first.data["result"]["task"]["id"]
        with rpc.stream("SubscribeToTask", {"id": tid}) as b:
            rb = stream_results(list(b.sse_events()), b.request_id)
        ra = stream_results([first, *ita], a.request_id)
    assert state_of(ra[-1]) == state_of(rb[-1]) == "TASK_STATE_COMPLETED"
    arts_a = [r for r in ra if kind_of(r) == "artifactUpdate"]
    arts_b = [r for r in rb if kind_of(r) == "artifactUpdate"]
    assert arts_a == arts_b, f"sender:\n{describe(ra)}\nwatcher:\n{describe(rb)}"


def test_subscribe_to_completed_task_is_plain_error(rpc, fake_llm, marker):
    task = rpc.send(f"already done {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    with rpc.stream("SubscribeToTask", {"id": task["id"]}) as s:
        assert s.status_code == 200
        assert s.content_type.startswith("application/json"), (
            f"terminal-task subscribe should be a plain JSON-RPC error, got {s.content_type!r}"
        )
        body = s.json()
    assert body.get("jsonrpc") == "2.0" and body.get("id") == s.request_id, body
    check_error_object(body["error"])
    assert_error(body["error"], -32004)
