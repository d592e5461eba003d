"""Small helpers shared by the agent-engine end-to-end tests (client side only)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tests.e2e.harness import RpcClient, describe, kind_of, state_of, stream_results
from tests.e2e.wire import assert_valid, message_text
from tests.fakes.fake_llm import message_text as llm_text

STREAM_READ_TIMEOUT = 30.0


@dataclass
class StreamRun:
    results: list[dict[str, Any]]
    received_at: list[float]
    request_id: Any

    @property
    def seq(self) -> str:
        return describe(self.results)

    @property
    def task_id(self) -> str:
        first = self.results[0]
        assert kind_of(first) == "task", f"first stream event is not the task\n{self.seq}"
        return first["task"]["id"]

    @property
    def context_id(self) -> str:
        return self.results[0]["task"]["contextId"]

    @property
    def final_state(self) -> str | None:
        return state_of(self.results[-1])

    def progress(self) -> list[tuple[int, str, float]]:
        """(event index, message text, client receive time) of WORKING status updates with text."""
        out = []
        for i, r in enumerate(self.results):
            if kind_of(r) == "statusUpdate" and state_of(r) == "TASK_STATE_WORKING":
                msg = r["statusUpdate"]["status"].get("message")
                if msg:
                    out.append((i, message_text(msg), self.received_at[i]))
        return out

    def artifact_indexes(self) -> list[int]:
        return [i for i, r in enumerate(self.results) if kind_of(r) == "artifactUpdate"]

    def artifact_text(self) -> str:
        return "".join(
            p.get("text", "")
            for r in self.results
            if kind_of(r) == "artifactUpdate"
            for p in r["artifactUpdate"]["artifact"]["parts"]
        )


def stream_send(rpc: RpcClient, params: dict[str, Any]) -> StreamRun:
    """SendStreamingMessage; read until the server closes the stream; validate every event."""
    received: list[float] = []
    with rpc.stream("SendStreamingMessage", params, read_timeout=STREAM_READ_TIMEOUT) as s:
        assert s.status_code == 200 and s.is_sse, (
            f"streaming send answered HTTP {s.status_code} {s.content_type!r}"
        )
        events = []
        for ev in s.sse_events():
            received.append(time.monotonic())
            events.append(ev)
    results = stream_results(events, s.request_id)
    return StreamRun(results=results, received_at=received, request_id=s.request_id)


def validated_task(task: dict[str, Any]) -> dict[str, Any]:
    assert_valid("task", task)
    return task


def status_text(task: dict[str, Any]) -> str:
    return message_text(task["status"].get("message"))


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def assistant_calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool call of every assistant message in a model request, in order."""
    return [
        tc
        for m in body["messages"]
        if m.get("role") == "assistant"
        for tc in (m.get("tool_calls") or [])
    ]


def call_args(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call["function"]["arguments"] or "{}")


def tool_text(msg: dict[str, Any]) -> str:
    return llm_text(msg)


def assert_tool_messages_follow_their_calls(body: dict[str, Any]) -> None:
    """Every tool message sits in the run right after the assistant message that made its call."""
    msgs = body["messages"]
    open_calls: set[str] = set()
    for n, m in enumerate(msgs):
        role = m.get("role")
        if role == "tool":
            assert m.get("tool_call_id") in open_calls, (
                f"message {n} is a tool result for {m.get('tool_call_id')!r} without its call "
                f"right before it: {[x.get('role') for x in msgs]}\n{json.dumps(msgs, indent=1)}"
            )
            open_calls.discard(m["tool_call_id"])
            continue
        assert not open_calls, (
            f"message {n} ({role}) comes before the results of calls {sorted(open_calls)}: "
            f"{json.dumps(msgs, indent=1)}"
        )
        if role == "assistant":
            open_calls = {tc["id"] for tc in (m.get("tool_calls") or [])}
    assert not open_calls, f"calls without results at the end: {sorted(open_calls)}"
