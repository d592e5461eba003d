"""SIGTERM of a replica with clients on it (two replicas on Redis): nobody is left without an
answer, and everybody can go on with the other replica.

A's blocking SendMessage answers at once with the task as it stands (its id); A's open stream ends
cleanly at an event boundary. A hands its turns over on its way out; B takes them over and
finishes them; a resubscribe on B with the stream's Last-Event-ID continues it with no gap and no
duplicate.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.harness import TERMINAL_STATES, send_params
from tests.e2e_redis.support import (
    BlockingSend,
    assert_contiguous,
    describe_events,
    ids,
    open_sse,
    rebuild_answer,
    result_of,
    rpc_body,
    state_of_event,
    stream_in_background,
    task_text,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 6  # B looks for handed-over turns every 2 s
SERVER_ENV = {"LEASE_TTL_S": str(LEASE_TTL_S)}


def test_sigterm_answers_clients_and_the_other_replica_goes_on(cluster, fake_llm, marker):
    a, b = cluster.spawn(2)
    slow = [f"a{i:02d} " for i in range(60)]
    fake_llm.script(
        text(slow, chunk_delay=0.3, when_user_contains=f"stream {marker}"),
        text(slow, chunk_delay=0.3, when_user_contains=f"send {marker}"),
        text(["taken ", "over ", "by B"], when_user_contains=f"stream {marker}"),
        text(["B ", "finished"], when_user_contains=f"send {marker}"),
    )
    stream = stream_in_background(
        a.url, "SendStreamingMessage", send_params(f"stream {marker}"), "s"
    )
    send = BlockingSend(a.url + "/", rpc_body("SendMessage", send_params(f"send {marker}")))
    send.start()
    fake_llm.wait_for_requests(f"send {marker}", timeout=20)
    stream.wait_for(lambda ev: ev.id == "5", timeout=20, what="a few answer chunks")

    assert a.proc is not None
    os.killpg(a.proc.pid, signal.SIGTERM)

    sent = send.task()
    assert sent["status"]["state"] == "TASK_STATE_WORKING", sent["status"]
    first = stream.join(30)  # fails on an incomplete chunked read
    seq = describe_events(first)
    assert all(result_of(ev) for ev in first), seq  # no error event
    assert state_of_event(first[-1]) not in TERMINAL_STATES, seq
    streamed = result_of(first[0])["task"]
    a.proc.wait(timeout=30)
    logs = a.logs(200_000)
    assert "timeout graceful shutdown exceeded" not in logs and "Traceback" not in logs, logs

    # The client resumes its stream on B, from the last event it saw.
    resume = rpc_body("SubscribeToTask", {"id": streamed["id"]}, "r")
    headers = {"Last-Event-ID": first[-1].id}
    with open_sse(b.url, "/", resume, headers=headers, request_id="r", read_timeout=30) as s:
        rest = list(s.sse_events())
    seq += "\nresumed on B:" + describe_events(rest)
    union = first + rest
    assert_contiguous(ids(union), "stream on A + resumed stream on B")
    assert state_of_event(union[-1]) == "TASK_STATE_COMPLETED", seq

    rpc_b = cluster.client(b)
    done = rpc_b.get_task(streamed["id"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert task_text(done) == "taken over by B"
    assert rebuild_answer(union) == task_text(done), seq
    finished = rpc_b.wait_for_state(sent["id"], "TASK_STATE_COMPLETED", timeout=30)
    assert task_text(finished) == "B finished"
