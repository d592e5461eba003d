"""What only a cluster can show: every key of a task in one slot, and a failover of the shard that
holds a streaming task's journal, survived with every event delivered exactly once."""

from __future__ import annotations

import time

import pytest
from redis.cluster import key_slot

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from tests.e2e.harness import SSEEvent, kind_of, send_params
from tests.e2e_redis.support import (
    BackgroundStream,
    assert_contiguous,
    chunk_texts,
    describe_events,
    ids,
    keys_with_prefix,
    open_sse,
    rebuild_answer,
    result_of,
    rpc_body,
    state_of_event,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

COMPLETED = "TASK_STATE_COMPLETED"
SERVER_ENV = {"A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1"}  # a webhook that refuses, but is stored


def slot(key: str) -> int:
    return key_slot(key.encode())


def test_every_key_a_task_writes_hashes_to_its_slot(
    replicas, rpc_a, fake_llm, marker, redis_client, prefix
):
    """Keys seen while the turn runs (checkpoint, claim, lease, journal) and after it (task,
    push config and cursor): a task's keys share `{task}`'s slot, a conversation's `{context}`'s."""
    a, _ = replicas
    fake_llm.script(
        tool_calls([("slow_tool", {"tag": marker, "seconds": 1.5})], when_user_contains=marker),
        text("done", when_user_contains=marker),
    )
    push = {"url": "http://127.0.0.1:9/hook", "token": "t"}
    task = rpc_a.send(
        f"slots {marker}",
        configuration={"returnImmediately": True, "taskPushNotificationConfig": push},
    )
    task_id, context_id = task["id"], task["contextId"]
    seen: set[str] = set()
    while True:
        seen |= set(keys_with_prefix(redis_client, prefix))
        if rpc_a.get_task(task_id)["status"]["state"] == COMPLETED:
            break
    seen |= set(keys_with_prefix(redis_client, prefix))

    keys = RedisKeys(prefix)
    of_task = {k for k in seen if k.endswith("{" + task_id + "}")}
    kinds = {k.split(":")[1] for k in of_task}
    assert {"task", "journal", "checkpoint", "lease", "push"} <= kinds, sorted(of_task)
    assert {slot(k) for k in of_task} == {slot(keys.task(ANONYMOUS, task_id))}, sorted(of_task)
    of_context = {k for k in seen if k.endswith("{" + context_id + "}")}
    assert {"conversation", "units", "claim"} <= {k.split(":")[1] for k in of_context}
    assert {slot(k) for k in of_context} == {slot(keys.conversation(ANONYMOUS, context_id))}


def test_a_shard_failover_during_a_streamed_turn_delivers_every_event_once(
    replicas, fake_llm, marker, prefix, redis_cluster
):
    a, b = replicas
    chunks = [f"w{i:02d} " for i in range(60)]
    fake_llm.script(text(chunks, chunk_delay=0.05, when_user_contains=marker))
    body = rpc_body("SendStreamingMessage", send_params(f"long answer {marker}"), "on-a")
    on_a = BackgroundStream(lambda: open_sse(a.url, "/", body, request_id="on-a")).start()
    first = on_a.wait_for(lambda ev: True, timeout=20, what="the task")
    task_id = result_of(first)["task"]["id"]
    subscribe = rpc_body("SubscribeToTask", {"id": task_id}, "on-b")
    on_b = BackgroundStream(lambda: open_sse(b.url, "/", subscribe, request_id="on-b")).start()
    on_a.wait_for(lambda ev: chunk_texts([ev]) == ["w10 "], timeout=20, what="chunk w10 on A")

    journal = RedisKeys(prefix).journal(ANONYMOUS, task_id)
    old, new = redis_cluster.failover(journal)
    assert redis_cluster.master_of(journal) == new != old

    # A stream cut by the failover ends with a clear error; its client resubscribes from the
    # last event it has (Last-Event-ID), as any client does after an outage.
    events_a = read_to_the_end(on_a, a.url, task_id, "again-a")
    events_b = read_to_the_end(on_b, b.url, task_id, "again-b")
    for name, events in (("A", events_a), ("B", events_b)):
        seq = f"\n{name}: {describe_events(events)}"
        assert_contiguous(ids(events), f"{name}'s stream, resumed")
        assert state_of_event(events[-1]) == COMPLETED, seq
        assert kind_of(result_of(events[0])) == "task", seq
    assert rebuild_answer(events_a) == "".join(chunks)
    # B starts from its snapshot: the answer so far, then every later chunk once.
    snapshot = result_of(events_b[0])["task"]
    so_far = "".join(
        part.get("text", "")
        for artifact in snapshot.get("artifacts", [])
        for part in artifact["parts"]
    )
    assert rebuild_answer(events_b[1:], start=so_far) == "".join(chunks)


def read_to_the_end(
    stream: BackgroundStream, url: str, task_id: str, request_id: str
) -> list[SSEEvent]:
    """A stream's events to the task's end, resubscribing with Last-Event-ID after a cut (an
    error event, or an error answer while the shard fails over)."""
    events = [ev for ev in stream.join(60) if ev.id is not None]
    for _ in range(20):
        if events and state_of_event(events[-1]) == COMPLETED:
            return events
        time.sleep(0.25)
        body = rpc_body("SubscribeToTask", {"id": task_id}, request_id)
        headers = {"Last-Event-ID": events[-1].id} if events else {}
        with open_sse(url, "/", body, headers=headers, request_id=request_id) as resumed:
            if resumed.is_sse:
                events += [ev for ev in resumed.sse_events() if ev.id is not None]
    raise AssertionError(f"the stream never reached the end: {describe_events(events)}")
