"""CancelTask: mid model call, mid tool call, with an open stream; a second cancel; terminal tasks."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import (
    TERMINAL_STATES,
    assert_error,
    describe,
    send_params,
    state_of,
    stream_results,
)
from tests.e2e.wire import artifact_text, assert_valid
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

ACTIVE = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


def _start(rpc, msg):
    task = rpc.send(msg, configuration={"returnImmediately": True})
    assert task["status"]["state"] in ACTIVE, task["status"]
    return task


def test_cancel_during_model_call(rpc, fake_llm, marker):
    model_delay = 3.0
    fake_llm.script(text("too late", delay=model_delay, when_user_contains=marker))
    task = _start(rpc, f"slow model {marker}")
    fake_llm.wait_for_requests(marker, 1, timeout=10)  # the model call is in flight

    t0 = time.monotonic()
    canceled = rpc.result("CancelTask", {"id": task["id"]})
    elapsed = time.monotonic() - t0
    assert_valid("task", canceled)
    assert canceled["id"] == task["id"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED", canceled["status"]
    assert elapsed < 2.0, f"CancelTask took {elapsed:.2f}s"

    # wait past the moment the model would have answered: still canceled, answer discarded
    rec = fake_llm.records_for(marker)[0]
    time.sleep(max(0.0, rec.received_at + model_delay + 1.0 - time.monotonic()))
    later = rpc.get_task(task["id"])
    assert later["status"]["state"] == "TASK_STATE_CANCELED", later["status"]
    assert "too late" not in artifact_text(later), later


def test_a_second_cancel_finds_the_task_ended(rpc, fake_llm, marker):
    fake_llm.script(text("never", delay=3.0, when_user_contains=marker))
    task = _start(rpc, f"cancel twice {marker}")
    first = rpc.result("CancelTask", {"id": task["id"]})
    assert first["status"]["state"] == "TASK_STATE_CANCELED", first
    err = rpc.error("CancelTask", {"id": task["id"]})
    assert_error(err, -32002)  # the spec lists a canceled task as not cancelable
    assert err["data"][0]["reason"] == "TASK_NOT_CANCELABLE", err
    later = rpc.get_task(task["id"])
    assert later["status"] == first["status"], (first["status"], later["status"])
    assert later.get("artifacts") == first.get("artifacts")


def test_cancel_during_tool_call(rpc, fake_llm, marker):
    tool_seconds = 3.0
    fake_llm.script(
        tool_calls(
            [("slow_echo", {"text": "zzz", "seconds": tool_seconds})], when_user_contains=marker
        ),
        text("after tool", when_user_contains=marker),
    )
    task = _start(rpc, f"slow tool {marker}")
    fake_llm.wait_for_requests(marker, 1, timeout=10)
    time.sleep(0.5)  # the tool is now sleeping
    t0 = time.monotonic()
    canceled = rpc.result("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED", canceled["status"]
    assert time.monotonic() - t0 < 2.0

    time.sleep(tool_seconds)  # the tool would have finished by now
    later = rpc.get_task(task["id"])
    assert later["status"]["state"] == "TASK_STATE_CANCELED", later["status"]
    assert len(fake_llm.requests_for(marker)) == 1, "model was called again after cancel"
    assert "after tool" not in artifact_text(later)


def test_cancel_ends_open_stream(rpc, fake_llm, marker):
    fake_llm.script(text("unused", delay=3.0, when_user_contains=marker))
    with rpc.stream("SendStreamingMessage", send_params(f"stream then cancel {marker}")) as s:
        it = s.sse_events()
        first = next(it)
        task_id = first.data["result"]["task"]["id"]
        fake_llm.wait_for_requests(marker, 1, timeout=10)
        t0 = time.monotonic()
        rpc.result("CancelTask", {"id": task_id})
        rest = list(it)  # the server must close the stream after the terminal event
        closed_after = time.monotonic() - t0
    results = stream_results([first, *rest], s.request_id)
    assert state_of(results[-1]) == "TASK_STATE_CANCELED", describe(results)
    assert "statusUpdate" in results[-1], describe(results)
    assert closed_after < 2.5, f"stream closed {closed_after:.2f}s after cancel"


def test_cancel_completed_task_is_not_cancelable(rpc, fake_llm, marker):
    task = rpc.send(f"quick {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    err = rpc.error("CancelTask", {"id": task["id"]})
    assert_error(err, -32002)
    assert rpc.get_task(task["id"])["status"]["state"] == "TASK_STATE_COMPLETED"


def test_cancel_unknown_task(rpc):
    assert_error(rpc.error("CancelTask", {"id": "does-not-exist-cancel"}), -32001)


def test_canceled_task_rejects_follow_up(rpc, fake_llm, marker):
    fake_llm.script(text("never", delay=3.0, when_user_contains=marker))
    task = _start(rpc, f"cancel then continue {marker}")
    rpc.result("CancelTask", {"id": task["id"]})
    err = rpc.error(
        "SendMessage",
        send_params(f"more {marker}", task_id=task["id"], context_id=task["contextId"]),
    )
    assert_error(err, -32004)
    assert rpc.get_task(task["id"])["status"]["state"] in TERMINAL_STATES
