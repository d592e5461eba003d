"""SSE requests for the chaos suite: open a stream, judge its first event, read it to the end.

A stream's first event decides its `Outcome` (the task, or a refusal sent before any event);
`on_first` tells the caller at that moment, while the stream stays open, so a test can count open
streams against a limit. Later events must all be StreamResponses and the last must end the task,
else `Outcome.stream_problem` says what went wrong (an error event, garbage, a cut connection).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from tests.e2e.harness import A2A_HEADERS, TERMINAL_STATES, SSEEvent, send_params
from tests.e2e_chaos.client import (
    BAD,
    TASK,
    Outcome,
    judge_rest_error,
    judge_rest_response,
    judge_rpc_error,
    judge_rpc_response,
    rpc_payload,
    stream_result,
)


async def sse_events(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    """Each event's data as one JSON document (a line that is not JSON is kept as a string)."""
    ev_id: str | None = None
    ev_name: str | None = None
    datas: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            for d in datas:
                yield SSEEvent(ev_id, ev_name, _loads(d), d)
            ev_id, ev_name, datas = None, None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            ev_id = value
        elif name == "event":
            ev_name = value
        elif name == "data":
            datas.append(value)
    for d in datas:
        yield SSEEvent(ev_id, ev_name, _loads(d), d)


def _loads(d: str) -> Any:
    try:
        return json.loads(d)
    except ValueError:
        return d


def _judge_first_event(out: Outcome, ev: SSEEvent, rest: bool) -> None:
    data = ev.data
    if rest and ev.event == "error":
        out.kind, out.detail = judge_rest_error(
            int(data["error"].get("code", 0)) if isinstance(data, dict) else 0,
            httpx.Headers(),
            data,
        )
        if out.kind != BAD:  # an overload in an SSE error event lacks its 503 and Retry-After
            out.kind, out.detail = BAD, f"refusal sent as an SSE error event: {ev.raw[:300]}"
        return
    if isinstance(data, dict) and "error" in data and "jsonrpc" in data:
        out.kind, out.detail = judge_rpc_error(data["error"])
        return
    result = stream_result(data)
    task = result.get("task") if result else None
    if not isinstance(task, dict) or "id" not in task:
        out.detail = f"first event is not the task: {ev.raw[:300]}"
        return
    out.kind, out.task = TASK, task


def _check_stream_tail(out: Outcome, rest: bool) -> None:
    """After the first event: each later one is a StreamResponse, and the last ends the task."""
    for ev in out.events[1:]:
        if stream_result(ev.data) is None or (rest and ev.event == "error"):
            out.stream_problem = f"error or garbage in the stream: {ev.raw[:300]}"
            return
    if out.last_state not in TERMINAL_STATES | {"TASK_STATE_INPUT_REQUIRED"}:
        out.stream_problem = f"stream ended with the task {out.last_state}"


async def open_stream(
    http: httpx.AsyncClient,
    url: str,
    body: dict[str, Any] | None,
    *,
    label: str,
    rest: bool,
    method: str = "POST",
    on_first: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Open an SSE request, judge its first event (or its refusal), then read it to the end."""
    out = Outcome(label)
    decided = False

    def decide() -> None:
        nonlocal decided
        if not decided:
            decided = True
            if on_first is not None:
                on_first(out)

    headers = {**A2A_HEADERS, "Accept": "text/event-stream"}
    try:
        async with http.stream(method, url, json=body, headers=headers) as r:
            if not r.headers.get("content-type", "").startswith("text/event-stream"):
                await r.aread()
                if rest:
                    judge_rest_response(out, r)
                else:
                    judge_rpc_response(out, r, label)
                if out.kind == TASK:  # a streaming request must not get a unary answer
                    out.kind, out.detail = BAD, "streaming request answered without a stream"
                decide()
                return out
            if r.status_code != 200:
                out.detail = f"SSE with HTTP {r.status_code}"
                decide()
                return out
            async for ev in sse_events(r):
                out.events.append(ev)
                if len(out.events) == 1:
                    _judge_first_event(out, ev, rest)
                    decide()
                    if out.kind != TASK:
                        return out
    except httpx.HTTPError as exc:
        if not decided:
            out.kind, out.detail = BAD, f"no answer: {exc!r}"
        else:
            out.stream_problem = f"stream cut: {exc!r}"
        decide()
        return out
    if not out.events:
        out.detail = "stream ended without any event"
    else:
        _check_stream_tail(out, rest)
    decide()
    return out


async def rpc_stream_send(
    http: httpx.AsyncClient,
    base: str,
    text: str,
    *,
    label: str,
    context_id: str | None = None,
    on_first: Callable[[Outcome], None] | None = None,
) -> Outcome:
    body = rpc_payload("SendStreamingMessage", send_params(text, context_id=context_id), label)
    return await open_stream(http, base + "/", body, label=label, rest=False, on_first=on_first)


async def rest_stream_send(
    http: httpx.AsyncClient,
    base: str,
    text: str,
    *,
    label: str,
    context_id: str | None = None,
    on_first: Callable[[Outcome], None] | None = None,
) -> Outcome:
    body = send_params(text, context_id=context_id)
    return await open_stream(
        http, base + "/message:stream", body, label=label, rest=True, on_first=on_first
    )


async def rpc_subscribe(
    http: httpx.AsyncClient,
    base: str,
    task_id: str,
    *,
    label: str,
    on_first: Callable[[Outcome], None] | None = None,
) -> Outcome:
    body = rpc_payload("SubscribeToTask", {"id": task_id}, label)
    return await open_stream(http, base + "/", body, label=label, rest=False, on_first=on_first)


async def rest_subscribe(
    http: httpx.AsyncClient,
    base: str,
    task_id: str,
    *,
    label: str,
    on_first: Callable[[Outcome], None] | None = None,
) -> Outcome:
    return await open_stream(
        http,
        f"{base}/tasks/{task_id}:subscribe",
        None,
        label=label,
        rest=True,
        method="GET",
        on_first=on_first,
    )
