"""SendStreamingMessage: SSE framing, event sequence, artifact chunks, client disconnect."""

from __future__ import annotations

import pytest

from tests.e2e.harness import (
    TERMINAL_STATES,
    describe,
    kind_of,
    send_params,
    state_of,
    stream_results,
)
from tests.e2e.wire import artifact_text, parts_text
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)

CHUNKS = ["Stream", "ing ", "works ", "fine", "!"]


def _stream(rpc, params):
    with rpc.stream("SendStreamingMessage", params) as s:
        assert s.status_code == 200, s.response.read()
        assert s.content_type.startswith("text/event-stream"), (
            f"content-type {s.content_type!r}: {s.response.read()[:1000]!r}"
        )
        events = list(s.sse_events())
        return events, stream_results(events, s.request_id)


def test_stream_event_sequence(rpc, fake_llm, marker):
    fake_llm.script(text(CHUNKS, chunk_delay=0.05, when_user_contains=marker))
    events, results = _stream(rpc, send_params(f"stream please {marker}"))
    seq = describe(results)

    assert kind_of(results[0]) == "task", f"first event must be the Task\n{seq}"
    task = results[0]["task"]
    tid, cid = task["id"], task["contextId"]
    assert tid and cid
    assert state_of(results[0]) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), seq

    rest = results[1:]
    for r in rest:
        assert kind_of(r) in ("statusUpdate", "artifactUpdate"), seq
        ev = r[kind_of(r)]
        assert ev["taskId"] == tid and ev["contextId"] == cid, f"foreign ids in {r}"

    # the last event is the terminal COMPLETED status; nothing terminal before it
    assert kind_of(rest[-1]) == "statusUpdate", seq
    assert state_of(rest[-1]) == "TASK_STATE_COMPLETED", seq
    assert not any(state_of(r) in TERMINAL_STATES for r in results[:-1]), seq

    kinds = [kind_of(r) for r in rest]
    assert "artifactUpdate" in kinds, f"no artifactUpdate events\n{seq}"
    first_art = kinds.index("artifactUpdate")
    assert any(
        kind_of(r) == "statusUpdate" and state_of(r) == "TASK_STATE_WORKING"
        for r in rest[:first_art]
    ), f"expected a WORKING status update before the first artifact chunk\n{seq}"


def test_artifact_chunks_concatenate_to_final_artifact(rpc, fake_llm, marker):
    fake_llm.script(text(CHUNKS, chunk_delay=0.05, when_user_contains=marker))
    _, results = _stream(rpc, send_params(f"chunks {marker}"))
    seq = describe(results)
    arts = [r["artifactUpdate"] for r in results if kind_of(r) == "artifactUpdate"]
    assert arts, seq

    ids = {a["artifact"]["artifactId"] for a in arts}
    assert len(ids) == 1, f"answer streamed into several artifacts {ids}\n{seq}"
    streamed = "".join(parts_text(a["artifact"]["parts"]) for a in arts)
    assert streamed == "".join(CHUNKS), seq
    assert len(arts) >= 2, f"{len(CHUNKS)} model chunks arrived as one artifact event\n{seq}"

    assert not arts[0].get("append", False), f"first chunk must not append\n{seq}"
    assert all(a.get("append") is True for a in arts[1:]), f"later chunks must append\n{seq}"
    assert arts[-1].get("lastChunk") is True, f"last chunk must have lastChunk true\n{seq}"
    assert not any(a.get("lastChunk") for a in arts[:-1]), f"lastChunk before the end\n{seq}"

    tid = results[0]["task"]["id"]
    final = rpc.get_task(tid)
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [a["artifactId"] for a in final.get("artifacts", [])] == list(ids), final
    assert artifact_text(final) == streamed


def test_stream_request_id_may_be_a_string(rpc, fake_llm, marker):
    fake_llm.script(text(["ok"], when_user_contains=marker))
    with rpc.stream("SendStreamingMessage", send_params(f"sid {marker}"), id="req-abc") as s:
        events = list(s.sse_events())
    results = stream_results(events, "req-abc")
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED", describe(results)


def test_client_disconnect_does_not_cancel_task(rpc, fake_llm, marker):
    chunks = ["a", "b", "c", "d", "e"]
    fake_llm.script(text(chunks, chunk_delay=0.3, when_user_contains=marker))
    with rpc.stream("SendStreamingMessage", send_params(f"leave early {marker}")) as s:
        it = s.sse_events()
        first = next(it)
        assert "task" in first.data["result"], first.raw
        task_id = first.data["result"]["task"]["id"]
    # connection closed after one event; the task must still finish on its own
    final = rpc.wait_for_state(task_id, TERMINAL_STATES, timeout=15)
    assert final["status"]["state"] == "TASK_STATE_COMPLETED", final["status"]
    assert artifact_text(final) == "abcde"
