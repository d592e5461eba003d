"""The open-streams limit (A2A_MAX_STREAMS) on a real server: every SSE stream and every blocking
SendMessage holds a slot for its whole life; beyond the limit a request is refused before anything
is written (JSON-RPC -32603 OVERLOADED with a retry hint, REST 503 + Retry-After), and a slot
comes back however its stream ends: the task settles, or the client goes away mid-stream."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, SSEStream, new_id, send_params
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)

SERVER_ENV = {"A2A_MAX_STREAMS": "2"}
LIMIT = "limit of 2 open streams and blocking sends"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@contextlib.contextmanager
def rest_stream(rpc, path: str, body: Any = None) -> Iterator[SSEStream]:
    with rpc.http.stream(
        "POST" if body is not None else "GET",
        rpc.base_url + path,
        json=body,
        headers={**A2A_HEADERS, "Accept": "text/event-stream"},
    ) as response:
        yield SSEStream(response, None)


def assert_overloaded_rpc(body: dict[str, Any], headers: httpx.Headers) -> None:
    assert headers.get("retry-after") == "1", dict(headers)
    error = body["error"]
    assert error["code"] == -32603 and LIMIT in error["message"], error
    (info,) = [d for d in error["data"] if d["@type"] == ERROR_INFO]
    assert info["reason"] == "OVERLOADED" and info["metadata"] == {"retryAfterSeconds": "1"}
    assert {"@type": RETRY_INFO, "retryDelay": "1s"} in error["data"], error


def assert_overloaded_rest(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers.get("retry-after") == "1"
    error = response.json()["error"]
    assert error["status"] == "UNAVAILABLE" and LIMIT in error["message"], error
    assert {d["@type"] for d in error["details"]} == {ERROR_INFO, RETRY_INFO}, error


def rpc_post(rpc, method: str, params: Any) -> httpx.Response:
    return rpc.post_raw({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def test_beyond_the_limit_requests_are_refused_unwritten_until_a_client_leaves(
    rpc, fake_llm, marker
):
    # Slow enough (20 s) that the turns outlive every step below on a loaded machine.
    slow = [f"c{i:02d} " for i in range(80)]
    fake_llm.script(
        text(slow, chunk_delay=0.25, when_user_contains=f"a {marker}"),
        text(slow, chunk_delay=0.25, when_user_contains=f"b {marker}"),
        text(slow, chunk_delay=0.25, when_user_contains=f"quick {marker}"),
    )
    with (
        rpc.stream("SendStreamingMessage", send_params(f"a {marker}")) as a,
        rest_stream(rpc, "/message:stream", send_params(f"b {marker}")) as b,
    ):
        # Keep the iterators: a closed one closes its connection (the client leaves).
        events_a, events_b = a.sse_events(), b.sse_events()
        task_a = next(events_a).data["result"]["task"]
        task_b = next(events_b).data["task"]

        context_id = new_id("ctx-refused-")
        refused = send_params(f"c {marker}", context_id=context_id)
        with rpc.stream("SendStreamingMessage", refused) as c:
            assert not c.is_sse, "a third stream was opened"
            assert_overloaded_rpc(c.json(), c.response.headers)
        r = rpc_post(rpc, "SendMessage", refused)
        assert_overloaded_rpc(r.json(), r.headers)
        r = rpc_post(rpc, "SubscribeToTask", {"id": task_a["id"]})
        assert_overloaded_rpc(r.json(), r.headers)
        assert_overloaded_rest(rpc.http.post(rpc.base_url + "/message:send", json=refused))
        with rest_stream(rpc, "/message:stream", refused) as c:
            c.response.read()
            assert_overloaded_rest(c.response)
        with rest_stream(rpc, f"/tasks/{task_b['id']}:subscribe") as c:
            c.response.read()
            assert_overloaded_rest(c.response)

        # Nothing was written for any refused request, and no model call was made.
        assert rpc.result("ListTasks", {"contextId": context_id})["tasks"] == []
        assert fake_llm.requests_for(f"c {marker}") == []
        # Returning at once holds no slot.
        quick = rpc.send(f"quick {marker}", configuration={"returnImmediately": True})
        assert quick["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        rpc.result("CancelTask", {"id": quick["id"]})

    # Both clients left mid-stream (their turns go on): their slots come back.
    with contextlib.ExitStack() as stack:
        for task in (task_a, task_b):
            deadline = time.monotonic() + 10
            while True:
                s = stack.enter_context(rpc.stream("SubscribeToTask", {"id": task["id"]}))
                if s.is_sse:
                    events = s.sse_events()
                    stack.callback(events.close)
                    assert next(events).data["result"]["task"]["id"] == task["id"]
                    break
                assert_overloaded_rpc(s.json(), s.response.headers)
                assert time.monotonic() < deadline, "the slots of closed streams never came back"
                time.sleep(0.1)


def _until_no_stream_is_open(rpc, timeout: float = 10.0) -> None:
    """The server gives a slot back when it notices its client left: a moment after the close."""
    deadline = time.monotonic() + timeout
    while "a2a_open_streams 0.0" not in rpc.get("/metrics").text:
        assert time.monotonic() < deadline, "streams closed by their clients stay open"
        time.sleep(0.05)


def test_streams_and_blocking_sends_that_end_give_their_slot_back(rpc, fake_llm, marker):
    _until_no_stream_is_open(rpc)  # the previous test's clients have just left
    fake_llm.script(text("quick", when_user_contains=marker, times=None))
    for n in range(5):  # more than the limit, one after the other
        with rpc.stream("SendStreamingMessage", send_params(f"stream {n} {marker}")) as s:
            events = list(s.sse_events())
        state = events[-1].data["result"]["statusUpdate"]["status"]["state"]
        assert state == "TASK_STATE_COMPLETED", events[-1].raw
        task = rpc.send(f"send {n} {marker}")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        with rest_stream(rpc, f"/tasks/{task['id']}:subscribe") as s:
            s.response.read()
            assert s.status_code == 400, "a finished task cannot be subscribed to"
