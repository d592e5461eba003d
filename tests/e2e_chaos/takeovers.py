"""A streamed turn that changed replicas under a fault, checked as its client and an auditor see it.

The client streamed the turn from one replica (`stream_turn`), lost that stream (a pause, a
partition, an error event) and resubscribed on another with the last id it had (`resubscribe`).
`turn_problems` then says what went wrong, if anything:

* the journal (read from Redis) holds positions 1..n, each once; the writer epoch never goes
  down, exactly one terminal status and nothing after it, and the answer rebuilt from its chunks
  is the model's answer once (tests/e2e_chaos/redis_view.journal_problems);
* the events the client got, first stream then resubscription, are those positions, each once,
  and rebuild the same answer;
* GetTask says COMPLETED with that answer, and the conversation holds the turn once.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.harness import SSEEvent, send_params
from tests.e2e_chaos.client import error_reason
from tests.e2e_chaos.redis_view import RedisView, journal_problems
from tests.e2e_redis.support import (
    BackgroundStream,
    describe_events,
    open_sse,
    rebuild_answer,
    rpc_body,
    stream_in_background,
    task_text,
)


def stream_turn(url: str, text: str, request_id: str) -> BackgroundStream:
    """SendStreamingMessage (JSON-RPC) on `url`, read in a thread; the client waits long (a
    paused server answers nothing, and the test decides when to give up on it)."""
    return stream_in_background(
        url, "SendStreamingMessage", send_params(text), request_id, read_timeout=120
    )


def positioned(events: list[SSEEvent]) -> list[SSEEvent]:
    """The events that carry a journal position (`id:`): all but a last error event."""
    return [ev for ev in events if ev.id is not None]


def chunks_seen(stream: BackgroundStream) -> int:
    return sum(1 for ev in stream.snapshot() if '"artifactUpdate"' in ev.raw)


def task_id_of(stream: BackgroundStream) -> str:
    first = stream.wait_for(lambda ev: '"task"' in ev.raw, 30, "the task event")
    return str(first.data["result"]["task"]["id"])


def stream_error(events: list[SSEEvent]) -> str | None:
    """None if the stream's last event is the clean store-unavailable error (JSON-RPC -32603 /
    REST `event: error` 503, both with ErrorInfo STORE_UNAVAILABLE), else what it is."""
    if not events:
        return "no event at all"
    last = events[-1]
    data = last.data if isinstance(last.data, dict) else {}
    if "jsonrpc" in data:
        err = data.get("error") or {}
        if err.get("code") == -32603 and error_reason(err.get("data")) == "STORE_UNAVAILABLE":
            return None
    elif last.event == "error":
        err = data.get("error") or {}
        if err.get("code") == 503 and error_reason(err.get("details")) == "STORE_UNAVAILABLE":
            return None
    return f"last event is not the store-unavailable error: {last.raw[:300]}"


def resubscribe(url: str, task_id: str, last_id: str, request_id: str) -> list[SSEEvent]:
    """SubscribeToTask on `url` with Last-Event-ID, read to the end of the task."""
    body = rpc_body("SubscribeToTask", {"id": task_id}, request_id)
    with open_sse(
        url,
        "/",
        body,
        headers={"Last-Event-ID": last_id},
        request_id=request_id,
        read_timeout=60,
    ) as s:
        return list(s.sse_events())


def turn_problems(
    view: RedisView, rpc: Any, task_id: str, want: str, seen: list[SSEEvent]
) -> list[str]:
    """What is wrong with a turn that changed replicas (see the module), [] if nothing."""
    rows = view.journal(task_id)
    positions = [int(row.position.split("-")[0]) for row in rows]
    problems = journal_problems(rows, want)
    if positions != list(range(1, len(rows) + 1)):
        problems.append(f"journal positions are not 1..n once each: {positions}")
    ids = [int(ev.id) for ev in positioned(seen) if ev.id is not None]
    if ids != positions:
        problems.append(f"the client got positions {ids}, the journal holds {positions}")
    elif rebuild_answer(positioned(seen)) != want:
        problems.append(f"the client rebuilt {rebuild_answer(positioned(seen))!r}")
    task = rpc.get_task(task_id)
    if task["status"]["state"] != "TASK_STATE_COMPLETED" or task_text(task) != want:
        problems.append(f"GetTask: {task['status']['state']} with {task_text(task)!r}")
    said = [(m["role"], m.get("content")) for m in view.conversation(task["contextId"])]
    if [role for role, _ in said] != ["user", "assistant"] or said[-1][1] != want:
        problems.append(f"stored conversation: {said}")
    if problems:
        problems.append("journal:\n  " + "\n  ".join(row.describe() for row in rows))
        problems.append("client saw:" + describe_events(positioned(seen)))
    return problems
