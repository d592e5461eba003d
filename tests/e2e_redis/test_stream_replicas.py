"""One task, two replicas: a stream on A is seen identically by a subscriber on B, and a client
that loses its stream on one replica resumes it on the other with ``Last-Event-ID``."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import SSEEvent, kind_of, send_params, stream_results
from tests.e2e_redis.support import (
    assert_contiguous,
    chunk_texts,
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

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

COMPLETED = "TASK_STATE_COMPLETED"


def _is_chunk(ev: SSEEvent, piece: str) -> bool:
    r = result_of(ev)
    return kind_of(r) == "artifactUpdate" and chunk_texts([ev]) == [piece]


def test_stream_on_a_subscribe_on_b(replicas, rpc_a, rpc_b, fake_llm, marker):
    a, b = replicas
    chunks = [f"w{i:02d} " for i in range(40)]
    fake_llm.script(text(chunks, chunk_delay=0.05, when_user_contains=marker))

    params = send_params(f"long answer {marker}")
    on_a = stream_in_background(a.url, "SendStreamingMessage", params, "on-a")
    on_a.wait_for(lambda ev: _is_chunk(ev, "w06 "), timeout=20, what="chunk w06 on A")
    task_id = result_of(on_a.snapshot()[0])["task"]["id"]
    seen_on_a_before = len(on_a.snapshot())

    with open_sse(b.url, "/", rpc_body("SubscribeToTask", {"id": task_id}, "on-b"),
                  request_id="on-b") as s:  # fmt: skip
        assert s.is_sse, f"HTTP {s.status_code}: {s.response.read()[:500]!r}"
        events_b = list(s.sse_events())
    events_a = on_a.join(30)

    results_a = stream_results(events_a, "on-a")
    results_b = stream_results(events_b, "on-b")
    seq = f"\nA:{describe_events(events_a)}\nB:{describe_events(events_b)}"

    # A: the snapshot (id 1), then every journal entry once, ending at COMPLETED.
    ids_a = ids(events_a)
    assert kind_of(results_a[0]) == "task" and ids_a[0] == 1, seq
    assert_contiguous(ids_a, "A's stream")
    assert state_of_event(events_a[-1]) == COMPLETED, seq

    # B: its snapshot first, then exactly the entries after the snapshot's position.
    assert kind_of(results_b[0]) == "task", f"B's first event must be the Task snapshot{seq}"
    snap = results_b[0]["task"]
    assert snap["id"] == task_id
    snap_id = ids(events_b)[0]
    assert_contiguous(ids(events_b), "B's stream (snapshot id, then the entries after it)")
    assert state_of_event(events_b[-1]) == COMPLETED, seq

    after_a = [
        (ev.id, r) for ev, r in zip(events_a, results_a, strict=True) if int(ev.id) > snap_id
    ]
    after_b = [(ev.id, r) for ev, r in zip(events_b[1:], results_b[1:], strict=True)]
    assert after_b == after_a, f"B must replay A's events after id {snap_id} identically{seq}"

    # The snapshot is the task as of its id: the state A's stream had reached at that id.
    at_snap = results_a[snap_id - 1]
    if kind_of(at_snap) == "statusUpdate":
        assert snap["status"] == at_snap["statusUpdate"]["status"], seq
    # B subscribed mid-answer, so the replay includes chunks A had already delivered.
    replayed = [ev for ev in events_b[1:] if int(ev.id) <= int(events_a[seen_on_a_before - 1].id)]
    assert len(chunk_texts(replayed)) >= 5, f"expected B to catch up on earlier chunks{seq}"

    full = "".join(chunks)
    assert rebuild_answer(events_a) == full, seq
    assert rebuild_answer(events_b[1:], start=task_text(snap)) == full, seq
    for rpc in (rpc_a, rpc_b):
        task = rpc.get_task(task_id)
        assert task["status"]["state"] == COMPLETED
        assert task_text(task) == full


def _start_stream(binding: str, url: str, marker: str, request_id: str):
    if binding == "jsonrpc":
        body = rpc_body("SendStreamingMessage", send_params(f"answer {marker}"), request_id)
        return open_sse(url, "/", body, request_id=request_id)
    return open_sse(url, "/message:stream", send_params(f"answer {marker}"))


def _resubscribe(binding: str, url: str, task_id: str, last_id: str, request_id: str):
    headers = {"Last-Event-ID": last_id}
    if binding == "jsonrpc":
        body = rpc_body("SubscribeToTask", {"id": task_id}, request_id)
        return open_sse(url, "/", body, headers=headers, request_id=request_id)
    return open_sse(url, f"/tasks/{task_id}:subscribe", {}, headers=headers)


@pytest.mark.parametrize("when", ["running", "finished"])
@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_reconnect_on_other_replica_with_last_event_id(
    binding, when, replicas, rpc_a, rpc_b, fake_llm, marker
):
    a, b = replicas
    chunks = [f"c{i:02d} " for i in range(30)]
    fake_llm.script(text(chunks, chunk_delay=0.05, when_user_contains=marker))

    # Read part of a stream on A, then drop the connection.
    first: list[SSEEvent] = []
    with _start_stream(binding, a.url, marker, "first") as s:
        assert s.is_sse, f"HTTP {s.status_code}: {s.response.read()[:500]!r}"
        for ev in s.sse_events():
            first.append(ev)
            if len(first) == 9:
                break
    task_id = result_of(first[0])["task"]["id"]
    assert len(chunk_texts(first)) >= 5, describe_events(first)
    if when == "finished":
        rpc_b.wait_for_state(task_id, COMPLETED, timeout=20)
    else:
        assert rpc_b.get_task(task_id)["status"]["state"] == "TASK_STATE_WORKING"

    last_id = first[-1].id
    assert last_id is not None
    with _resubscribe(binding, b.url, task_id, last_id, "second") as s:
        assert s.is_sse, f"HTTP {s.status_code}: {s.response.read()[:500]!r}"
        second = list(s.sse_events())
    seq = f"\nfirst:{describe_events(first)}\nsecond:{describe_events(second)}"
    if binding == "jsonrpc":
        stream_results(first, "first")
        stream_results(second, "second")

    assert second, f"nothing after Last-Event-ID {last_id}{seq}"
    assert kind_of(result_of(second[0])) != "task", f"no snapshot after a Last-Event-ID{seq}"
    assert int(second[0].id) == int(last_id) + 1, seq
    union = ids(first) + ids(second)
    assert union[0] == 1, seq
    assert_contiguous(union, "the two streams together")
    assert state_of_event(second[-1]) == COMPLETED, seq

    final = rpc_a.get_task(task_id)
    full = "".join(chunks)
    assert task_text(final) == full
    assert "".join(chunk_texts(first + second)) == full, seq
    assert rebuild_answer(first + second) == full, seq


def test_last_event_id_at_the_end_returns_nothing_and_closes(replicas, rpc_a, fake_llm, marker):
    """A client that saw the final event and reconnects gets an empty stream that ends at once."""
    a, b = replicas
    fake_llm.script(text(["x ", "y"], when_user_contains=marker))
    with _start_stream("jsonrpc", a.url, marker, "s") as s:
        events = list(s.sse_events())
    assert state_of_event(events[-1]) == COMPLETED, describe_events(events)
    task_id = result_of(events[0])["task"]["id"]
    t0 = time.monotonic()
    with _resubscribe("jsonrpc", b.url, task_id, events[-1].id, "again") as s:
        assert s.is_sse, f"HTTP {s.status_code}: {s.response.read()[:500]!r}"
        again = list(s.sse_events())
    elapsed = time.monotonic() - t0
    assert again == [], describe_events(again)
    assert elapsed < 5, f"a stream with nothing left to send stayed open {elapsed:.1f}s"


def test_streams_on_several_tasks_share_reads_on_b_each_exactly_once(
    replicas, rpc_a, fake_llm, marker
):
    """Subscribers on B to three tasks answering on A at once: B's readers share multi-key reads
    (stores/redis/journal_mux.py; the first reads alone), and each stream still carries its own task's
    events, every one once, in order, to the end."""
    a, b = replicas
    answers = {n: [f"t{n}w{i:02d} " for i in range(30)] for n in range(3)}
    fake_llm.script(
        *(
            text(chunks, chunk_delay=0.05, when_user_contains=f"task {n} {marker}")
            for n, chunks in answers.items()
        )
    )
    on_a = {
        n: stream_in_background(
            a.url, "SendStreamingMessage", send_params(f"task {n} {marker}"), f"a{n}"
        )
        for n in answers
    }
    task_ids = {}
    for n, stream in on_a.items():
        stream.wait_for(lambda ev: result_of(ev).get("task") is not None, timeout=20, what="task")
        task_ids[n] = result_of(stream.snapshot()[0])["task"]["id"]
    on_b = {
        n: stream_in_background(b.url, "SubscribeToTask", {"id": task_ids[n]}, f"b{n}")
        for n in answers
    }
    for n, stream in on_b.items():
        events = stream.join(60)
        on_a[n].join(60)
        seq = describe_events(events)
        assert kind_of(result_of(events[0])) == "task", seq
        assert_contiguous(ids(events), f"B's stream of task {n}")
        assert state_of_event(events[-1]) == COMPLETED, seq
        snap = result_of(events[0])["task"]
        assert rebuild_answer(events[1:], start=task_text(snap)) == "".join(answers[n]), seq
