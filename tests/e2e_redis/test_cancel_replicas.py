"""CancelTask on replica B of a turn running on replica A (the request travels by Redis pub/sub;
on PostgreSQL, tests/e2e_postgres, by LISTEN/NOTIFY)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import send_params
from tests.e2e_redis.support import (
    BackgroundStream,
    describe_events,
    open_sse,
    rpc_body,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

CANCELED = "TASK_STATE_CANCELED"
CANCEL_BUDGET_S = 1.0  # pub/sub reaches A at once; B answers once A has recorded the cancel


def _start_on_a(rpc_a, msg):
    task = rpc_a.send(msg, configuration={"returnImmediately": True})
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), task
    return task


def _subscribe(url, task_id, rid):
    body = rpc_body("SubscribeToTask", {"id": task_id}, rid)
    return BackgroundStream(lambda: open_sse(url, "/", body, request_id=rid, read_timeout=30))


def test_cancel_on_b_of_model_call_on_a(replicas, rpc_a, rpc_b, fake_llm, marker, store_view):
    a, b = replicas
    fake_llm.script(text("too late", delay=20.0, when_user_contains=marker))
    task = _start_on_a(rpc_a, f"slow model {marker}")
    task_id = task["id"]
    fake_llm.wait_for_requests(marker, 1, timeout=15)  # A's model call is in flight
    store_view.assert_runs_on(a, task_id)

    watcher = _subscribe(a.url, task_id, "watch-a").start()
    watcher.wait_for(lambda ev: True, timeout=10, what="the snapshot on A")

    t0 = time.monotonic()
    canceled = rpc_b.result("CancelTask", {"id": task_id})
    elapsed = time.monotonic() - t0
    assert canceled["status"]["state"] == CANCELED, canceled["status"]
    assert elapsed < CANCEL_BUDGET_S, f"CancelTask on B took {elapsed:.2f}s"

    events = watcher.join(10)
    assert state_of_event(events[-1]) == CANCELED, describe_events(events)

    # A really stopped its model call (it did not just relabel the task).
    rec = fake_llm.records_for(marker)[0]
    deadline = time.monotonic() + 5
    while rec.finished_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rec.client_disconnected, "A kept its model call open after the cancel"

    time.sleep(3)
    for rpc in (rpc_a, rpc_b):
        later = rpc.get_task(task_id)
        assert later["status"]["state"] == CANCELED, later["status"]
        assert "too late" not in task_text(later), later
    store_view.assert_released(task_id)  # no lease held, no cancel flag left behind

    # The context is free again: a new message in it runs (on B this time).
    fake_llm.script(text("next one", when_user_contains=f"again {marker}"))
    nxt = rpc_b.send(f"again {marker}", context_id=task["contextId"])
    assert nxt["status"]["state"] == "TASK_STATE_COMPLETED", nxt["status"]
    assert task_text(nxt) == "next one"


def test_cancel_on_b_of_tool_call_on_a(
    replicas, rpc_a, rpc_b, fake_llm, marker, store_view, cluster
):
    a, b = replicas
    seconds = 3.0
    fake_llm.script(
        tool_calls([("slow_tool", {"seconds": seconds, "tag": marker})], when_user_contains=marker),
        text("after the tool", when_user_contains=marker),
    )
    task = _start_on_a(rpc_a, f"slow tool {marker}")
    task_id = task["id"]
    deadline = time.monotonic() + 15
    while not cluster.tool_runs(marker)[0]:
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.05)
    store_view.assert_runs_on(a, task_id)

    watcher = _subscribe(b.url, task_id, "watch-b").start()
    watcher.wait_for(lambda ev: True, timeout=10, what="the snapshot on B")
    t0 = time.monotonic()
    canceled = rpc_b.result("CancelTask", {"id": task_id})
    elapsed = time.monotonic() - t0
    assert canceled["status"]["state"] == CANCELED, canceled["status"]
    assert elapsed < CANCEL_BUDGET_S, f"CancelTask on B took {elapsed:.2f}s"
    events = watcher.join(10)
    assert state_of_event(events[-1]) == CANCELED, describe_events(events)

    time.sleep(seconds + 0.5)  # the tool would have finished by now
    starts, ends = cluster.tool_runs(marker)
    assert starts == [str(a.proc.pid)], starts
    assert ends == [], "the canceled tool call ran to its end"
    assert len(fake_llm.records_for(marker)) == 1, "the model was called again after the cancel"
    for rpc in (rpc_a, rpc_b):
        assert rpc.get_task(task_id)["status"]["state"] == CANCELED


def test_cancel_from_b_is_final(replicas, rpc_a, rpc_b, fake_llm, marker):
    fake_llm.script(text("never", delay=20.0, when_user_contains=marker))
    task = _start_on_a(rpc_a, f"cancel twice {marker}")
    fake_llm.wait_for_requests(marker, 1, timeout=15)
    first = rpc_b.result("CancelTask", {"id": task["id"]})
    assert first["status"]["state"] == CANCELED
    # a later cancel, on either replica, finds it ended: not cancelable, nothing recorded
    for rpc in (rpc_a, rpc_b):
        err = rpc.error("CancelTask", {"id": task["id"]})
        assert err["code"] == -32002, err
        assert err["data"][0]["reason"] == "TASK_NOT_CANCELABLE", err
        assert rpc.get_task(task["id"])["status"] == first["status"]
    # a message to a canceled task is refused on either replica
    for rpc in (rpc_a, rpc_b):
        err = rpc.error("SendMessage", send_params("more", task_id=task["id"]))
        assert err["code"] == -32004, err
