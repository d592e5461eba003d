"""SIGTERM while requests are in flight (in-memory stores; two replicas on Redis:
tests/e2e_redis/test_sigterm_drain.py).

The server drains before it stops: a blocking SendMessage answers at once with the task as it
stands (HTTP 200 and the task JSON, so the client learns its task id), and an open stream ends at
an event boundary with a complete response (no incomplete chunked read), on both bindings. Nothing
is left for uvicorn's graceful-shutdown timeout to cut.
"""

from __future__ import annotations

import signal

import pytest

from tests.e2e.harness import TERMINAL_STATES, send_params
from tests.e2e_redis.support import (
    BackgroundStream,
    BlockingSend,
    assert_contiguous,
    describe_events,
    ids,
    open_sse,
    result_of,
    rpc_body,
    state_of_event,
)
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(90)


def test_sigterm_answers_blocking_sends_and_ends_streams_cleanly(server, fake_llm, marker):
    slow = [f"w{i:02d} " for i in range(60)]
    kinds = ("rpc-send", "rest-send", "rpc-stream", "rest-stream")
    for kind in kinds:
        fake_llm.script(text(slow, chunk_delay=0.3, when_user_contains=f"{kind} {marker}"))

    sends = {
        "rpc-send": BlockingSend(
            server.url + "/", rpc_body("SendMessage", send_params(f"rpc-send {marker}"))
        ),
        "rest-send": BlockingSend(server.url + "/message:send", send_params(f"rest-send {marker}")),
    }
    body = rpc_body("SendStreamingMessage", send_params(f"rpc-stream {marker}"), "s")
    streams = {
        "rpc-stream": BackgroundStream(lambda: open_sse(server.url, "/", body, request_id="s")),
        "rest-stream": BackgroundStream(
            lambda: open_sse(server.url, "/message:stream", send_params(f"rest-stream {marker}"))
        ),
    }
    for job in [*sends.values(), *streams.values()]:
        job.start()
    for kind in kinds:
        fake_llm.wait_for_requests(f"{kind} {marker}", timeout=20)
    for stream in streams.values():
        stream.wait_for(lambda ev: ev.id == "4", timeout=20, what="a few answer chunks")

    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)

    for kind, send in sends.items():
        task = send.task()
        assert task["id"], task
        assert task["status"]["state"] == "TASK_STATE_WORKING", (kind, task["status"])
    for kind, stream in streams.items():
        events = stream.join(30)  # fails on an incomplete chunked read
        seq = describe_events(events)
        assert all("error" not in (ev.data or {}) for ev in events), f"{kind}: {seq}"
        assert_contiguous(ids(events), kind)
        assert "task" in result_of(events[0]), f"{kind}: {seq}"
        assert state_of_event(events[-1]) not in TERMINAL_STATES, f"{kind}: {seq}"

    server.proc.wait(timeout=30)
    logs = server.logs(200_000)
    assert "timeout graceful shutdown exceeded" not in logs, logs
    assert "Traceback" not in logs, logs
    # Every line reaches the log, the last ones too (uvicorn re-raises the signal at its end).
    assert "Finished server process" in logs.splitlines()[-1], logs[-2000:]
