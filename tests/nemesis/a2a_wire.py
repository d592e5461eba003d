"""The nemesis' client on the wire: JSON-RPC calls and SSE streams, each answer judged the way a
client that read docs/operations.md judges it (what it may retry, what it must not see).

Expected, and handled by the workload (workload.py):

* a transport failure (a replica killed, paused, restarting: refused, reset, silent);
* `-32603` with ErrorInfo `STORE_UNAVAILABLE` (its metadata may name the task made), or
  `OVERLOADED` (retry after `retryAfterSeconds`);
* `-32004` `UNSUPPORTED_OPERATION` (the context runs another task, named in the metadata; or the
  task is not waiting for an answer);
* `-32001` for a task a refusal named that cannot be read, `-32002` for a cancel of a task that
  ended.

Anything else (another code, an HTTP status other than 200, a body that is not JSON) is an error
no client was told to expect: recorded as such.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.e2e.harness import A2A_HEADERS, ERROR_INFO_TYPE
from tests.e2e_chaos.streams import sse_events
from tests.nemesis.history import StreamRecord

STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
OVERLOADED = "OVERLOADED"
BUSY = "UNSUPPORTED_OPERATION"
NOT_FOUND = "TASK_NOT_FOUND"
NOT_CANCELABLE = "TASK_NOT_CANCELABLE"
EXPECTED_REASONS = {STORE_UNAVAILABLE, OVERLOADED, BUSY, NOT_FOUND, NOT_CANCELABLE}
TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


@dataclass
class Reply:
    """One answer: a result, an A2A error (code, reason, metadata), or why there was none."""

    result: Any = None
    code: int | None = None
    reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    transport: str | None = None  # no answer: refused, reset, timed out
    unexpected: str | None = None  # an answer no client was told to expect

    @property
    def ok(self) -> bool:
        return self.result is not None

    def describe(self) -> str:
        if self.transport:
            return f"transport: {self.transport}"
        if self.unexpected:
            return f"unexpected: {self.unexpected}"
        return f"{self.code} {self.reason} {self.message[:200]} {self.meta}"


def judge_error(err: Any) -> Reply:
    if not isinstance(err, dict) or not isinstance(err.get("code"), int):
        return Reply(unexpected=f"malformed JSON-RPC error {err!r}"[:400])
    infos = [
        d
        for d in err.get("data") or []
        if isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE
    ]
    reason = infos[0].get("reason") if infos else None
    meta = (infos[0].get("metadata") or {}) if infos else {}
    reply = Reply(code=err["code"], reason=reason, meta=meta, message=str(err.get("message")))
    known = {-32603: {STORE_UNAVAILABLE, OVERLOADED}, -32004: {BUSY}, -32001: {NOT_FOUND},
             -32002: {NOT_CANCELABLE}}  # fmt: skip
    if reason not in known.get(err["code"], set()):
        reply.unexpected = f"JSON-RPC error {json.dumps(err)[:400]}"
    return reply


def state_of(result: dict[str, Any]) -> str | None:
    for kind in ("task", "statusUpdate"):
        if kind in result:
            return result[kind]["status"]["state"]
    return None


def task_id_of(result: dict[str, Any]) -> str | None:
    if "task" in result:
        return result["task"]["id"]
    for kind in ("statusUpdate", "artifactUpdate"):
        if kind in result:
            return result[kind].get("taskId")
    return None


class Wire:
    def __init__(self, *, request_timeout_s: float, silence_s: float) -> None:
        self.request_timeout_s = request_timeout_s
        self.silence_s = silence_s
        self.http = httpx.AsyncClient(
            trust_env=False,
            timeout=httpx.Timeout(request_timeout_s, connect=3),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def close(self) -> None:
        await self.http.aclose()

    async def call(self, url: str, method: str, params: Any) -> Reply:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        try:
            response = await self.http.post(url + "/", json=body, headers=A2A_HEADERS)
        except httpx.HTTPError as exc:
            return Reply(transport=f"{type(exc).__name__} {exc}"[:200])
        return self._judge_body(response.status_code, response.headers, response.content)

    def _judge_body(self, status: int, headers: httpx.Headers, raw: bytes) -> Reply:
        ctype = headers.get("content-type", "")
        if status != 200 or not ctype.startswith("application/json"):
            return Reply(unexpected=f"HTTP {status} {ctype}: {raw[:300]!r}")
        try:
            data = json.loads(raw)
        except ValueError:
            return Reply(unexpected=f"not JSON: {raw[:300]!r}")
        if isinstance(data, dict) and "error" in data:
            return judge_error(data["error"])
        if not isinstance(data, dict) or "result" not in data:
            return Reply(unexpected=f"no result: {raw[:300]!r}")
        return Reply(result=data["result"])

    async def stream(
        self,
        url: str,
        method: str,
        params: Any,
        record: StreamRecord,
        *,
        stop_at_input: bool,
        answering: asyncio.Event | None = None,
    ) -> Reply | None:
        """Read one SSE answer into `record` until a final event (None), or the error that ended
        it (a Reply); `answering` is set at its first answer chunk. A stream silent for `silence_s` (keep-alives included) is given up."""
        headers = {**A2A_HEADERS, "Accept": "text/event-stream"}
        if record.after is not None:
            headers["Last-Event-ID"] = str(record.after)
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        timeout = httpx.Timeout(self.request_timeout_s, connect=3, read=self.silence_s)
        try:
            async with self.http.stream(
                "POST", url + "/", json=body, headers=headers, timeout=timeout
            ) as response:
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    raw = await response.aread()
                    record.ended = "refused"
                    return self._judge_body(response.status_code, response.headers, raw)
                async for event in sse_events(response):
                    data = event.data
                    if not isinstance(data, dict):
                        record.ended = "unexpected"
                        return Reply(unexpected=f"SSE data is not JSON: {event.raw[:200]!r}")
                    if "error" in data:
                        record.ended = f"error {data['error'].get('message', '')[:80]}"
                        return judge_error(data["error"])
                    result = data.get("result")
                    if not isinstance(result, dict) or not (event.id or "").isdigit():
                        record.ended = "unexpected"
                        return Reply(
                            unexpected=f"SSE event without result or id: {event.raw[:200]}"
                        )
                    record.events.append((int(event.id or 0), result))
                    if answering is not None and "artifactUpdate" in result:
                        answering.set()
                    if record.task_id is None:
                        record.task_id = task_id_of(result)
                    state = state_of(result)
                    if state in TERMINAL or (stop_at_input and state == INPUT_REQUIRED):
                        record.ended = "final"
                        return None
                record.ended = "cut: ended before a final event"
                return Reply(transport=record.ended)
        except httpx.HTTPError as exc:
            record.ended = f"cut: {type(exc).__name__}"
            return Reply(transport=record.ended)
