"""Many requests at once, over both bindings, each turned into an `Outcome` a test can count.

An outcome is what the client learned, judged the way an outside caller judges it:

* TASK        a task (SendMessage result, or a stream whose first event is the task);
* OVERLOADED  the clean refusal of a replica at its limit: JSON-RPC -32603 whose data holds an
              ErrorInfo with reason OVERLOADED and a RetryInfo; REST 503 with `Retry-After` and
              the same ErrorInfo in an AIP-193 body;
* BUSY        the conversation already runs a turn: JSON-RPC -32004 / REST 400, reason
              UNSUPPORTED_OPERATION;
* BAD         anything else (a 5xx, a plain-text or non-JSON body, "store unavailable", another
              -32603, a dropped connection, a stream cut short), with the reason in `detail`.

Unary calls live here, streams in tests/e2e_chaos/streams.py. `simultaneous` sends a few
requests so that they reach the servers together (for races).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

import httpx

from tests.e2e.harness import A2A_HEADERS, ERROR_INFO_TYPE, SSEEvent, send_params

TASK, OVERLOADED, BUSY, BAD = "task", "overloaded", "busy", "bad"
RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
JSON_TYPES = ("application/json", "application/a2a+json")

Binding = Literal["rpc", "rest"]


def http_client(timeout: float = 60.0) -> httpx.AsyncClient:
    """One client for a whole burst: no connection cap (each stream holds one), loopback only.

    Idle connections are dropped after 2 s, well before the server's keep-alive timeout (5 s):
    with httpx's default (also 5 s) a send after a lull could go out on a connection the server
    was closing at that moment and fail with a ReadError (seen in CI after a burst's streams
    ended), a race of HTTP keep-alive that every client avoids the same way."""
    return httpx.AsyncClient(
        trust_env=False,
        timeout=httpx.Timeout(timeout, connect=10),
        limits=httpx.Limits(
            max_connections=None, max_keepalive_connections=256, keepalive_expiry=2.0
        ),
    )


@dataclass
class Outcome:
    label: str
    kind: str = BAD
    task: dict[str, Any] | None = None
    detail: str = ""
    events: list[SSEEvent] = field(default_factory=list)
    stream_problem: str | None = None

    @property
    def task_id(self) -> str | None:
        return self.task["id"] if self.task else None

    @property
    def last_state(self) -> str | None:
        """The last task state seen (the stream's last status, or the returned task's)."""
        state = self.task["status"]["state"] if self.task else None
        for ev in self.events:
            result = stream_result(ev.data)
            for kind in ("task", "statusUpdate"):
                if result and kind in result:
                    state = result[kind]["status"]["state"]
        return state

    def __str__(self) -> str:
        return f"{self.label}: {self.kind} {self.detail}".strip()


# ---------------------------------------------------------------------------------------------
# Judging errors
# ---------------------------------------------------------------------------------------------


def _typed(details: Any, type_url: str) -> list[dict[str, Any]]:
    if not isinstance(details, list):
        return []
    return [d for d in details if isinstance(d, dict) and d.get("@type") == type_url]


def error_reason(details: Any) -> str | None:
    infos = _typed(details, ERROR_INFO_TYPE)
    return infos[0].get("reason") if infos else None


def judge_rpc_error(err: Any) -> tuple[str, str]:
    """(kind, detail) of a JSON-RPC error object."""
    if not isinstance(err, dict) or not isinstance(err.get("code"), int):
        return BAD, f"malformed JSON-RPC error {err!r}"
    reason = error_reason(err.get("data"))
    if err["code"] == -32603 and reason == "OVERLOADED":
        if not _typed(err.get("data"), RETRY_INFO_TYPE):
            return BAD, f"overload error without a RetryInfo: {err}"
        return OVERLOADED, ""
    if err["code"] == -32004 and reason == "UNSUPPORTED_OPERATION":
        return BUSY, ""
    return BAD, f"JSON-RPC error {json.dumps(err)[:400]}"


def judge_rest_error(status: int, headers: httpx.Headers, body: Any) -> tuple[str, str]:
    """(kind, detail) of a REST error answer (AIP-193 body)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return BAD, f"HTTP {status} without an AIP-193 error body: {str(body)[:300]}"
    reason = error_reason(error.get("details"))
    if status == 503 and reason == "OVERLOADED":
        retry_after = headers.get("retry-after", "")
        if not retry_after.strip().isdigit():
            return BAD, f"overload 503 without a numeric Retry-After ({retry_after!r}): {error}"
        return OVERLOADED, ""
    if status == 400 and reason == "UNSUPPORTED_OPERATION":
        return BUSY, ""
    return BAD, f"HTTP {status} {json.dumps(error)[:400]}"


def json_body(response: httpx.Response) -> tuple[Any, str | None]:
    """The parsed body, or why it is not a clean JSON answer."""
    text = response.text
    if "Traceback" in text:
        return None, f"HTTP {response.status_code} body leaks a traceback: {text[:300]!r}"
    ctype = response.headers.get("content-type", "").split(";")[0].strip()
    if ctype not in JSON_TYPES:
        return None, f"HTTP {response.status_code} {ctype or 'no content-type'}: {text[:200]!r}"
    try:
        return response.json(), None
    except ValueError:
        return None, f"HTTP {response.status_code} body is not JSON: {text[:200]!r}"


def judge_rpc_response(out: Outcome, response: httpx.Response, request_id: Any) -> Outcome:
    body, problem = json_body(response)
    if problem:
        out.detail = problem
        return out
    if response.status_code != 200:
        out.detail = f"JSON-RPC answered HTTP {response.status_code}: {response.text[:300]}"
        return out
    if not isinstance(body, dict) or body.get("id") != request_id:
        out.detail = f"not the response to id {request_id!r}: {str(body)[:300]}"
        return out
    if "error" in body:
        out.kind, out.detail = judge_rpc_error(body["error"])
        return out
    result = body.get("result")
    task = result.get("task") if isinstance(result, dict) and "task" in result else result
    if not isinstance(task, dict) or "id" not in task:
        out.detail = f"result is not a task: {str(result)[:300]}"
        return out
    out.kind, out.task = TASK, task
    return out


def judge_rest_response(out: Outcome, response: httpx.Response) -> Outcome:
    body, problem = json_body(response)
    if problem:
        out.detail = problem
        return out
    if response.status_code != 200:
        out.kind, out.detail = judge_rest_error(response.status_code, response.headers, body)
        return out
    task = body.get("task") if isinstance(body, dict) and "task" in body else body
    if not isinstance(task, dict) or "id" not in task:
        out.detail = f"REST result is not a task: {str(body)[:300]}"
        return out
    out.kind, out.task = TASK, task
    return out


# ---------------------------------------------------------------------------------------------
# Unary calls
# ---------------------------------------------------------------------------------------------


def rpc_payload(method: str, params: Any, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def send(
    http: httpx.AsyncClient,
    base: str,
    text: str,
    *,
    binding: Binding,
    label: str,
    immediate: bool = False,
    context_id: str | None = None,
) -> Outcome:
    """SendMessage over JSON-RPC (`POST /`) or HTTP+JSON (`POST /message:send`), blocking
    unless `immediate`; the answer judged the way that binding's client judges it."""
    config = {"returnImmediately": True} if immediate else None
    params = send_params(text, context_id=context_id, configuration=config)
    match binding:
        case "rpc":
            url, body = base + "/", rpc_payload("SendMessage", params, label)
        case "rest":
            url, body = base + "/message:send", params
        case _:
            assert_never(binding)
    out = Outcome(label)
    try:
        r = await http.post(url, json=body, headers=A2A_HEADERS)
    except httpx.HTTPError as exc:
        out.detail = f"no answer: {exc!r}"
        return out
    if binding == "rpc":
        return judge_rpc_response(out, r, label)
    return judge_rest_response(out, r)


async def simultaneous(
    posts: list[tuple[str, Any]], read_timeout: float = 30.0
) -> list[httpx.Response]:
    """POST each (url, JSON body) so that they all arrive at once ("last byte" synchronisation):
    each request is written over a connection of its own but for its last byte, and the last
    bytes are written together once every connection holds the rest. The answers, in order.
    """
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]] = []
    try:
        for url, body in posts:
            parsed = httpx.URL(url)
            host, port, path = parsed.host, parsed.port, parsed.raw_path.decode()
            raw = json.dumps(body).encode()
            request = (
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
                f"Content-Type: application/json\r\nA2A-Version: 1.0\r\n"
                f"Content-Length: {len(raw)}\r\n\r\n"
            ).encode() + raw
            reader, writer = await asyncio.open_connection(host, port)
            opened.append((reader, writer, request[-1:]))
            writer.write(request[:-1])
            await writer.drain()
        for _, writer, last in opened:
            writer.write(last)
        async with asyncio.timeout(read_timeout):
            answers = [await reader.read() for reader, _, _ in opened]
    finally:
        for _, writer, _ in opened:
            writer.close()
    return [_parse_http(a) for a in answers]


def _parse_http(raw: bytes) -> httpx.Response:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = [tuple(h.split(": ", 1)) for h in lines[1:] if ": " in h]
    if any(k.lower() == "transfer-encoding" and "chunked" in v for k, v in headers):
        body = _dechunk(body)
    return httpx.Response(status, headers=headers, content=body)


def _dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2 :]
    return out


def stream_result(data: Any) -> dict[str, Any] | None:
    """The StreamResponse of an SSE data document (JSON-RPC `result`, or REST's bare object)."""
    if not isinstance(data, dict):
        return None
    if "jsonrpc" in data:
        return data.get("result") if isinstance(data.get("result"), dict) else None
    if "error" in data:
        return None
    return data


def answer_of(out: Outcome) -> str:
    """The answer as the client has it: the streamed artifact chunks, or the task's artifacts."""
    if out.events:
        text = ""
        for ev in out.events:
            result = stream_result(ev.data) or {}
            update = result.get("artifactUpdate")
            if update:
                piece = "".join(p.get("text", "") for p in update["artifact"]["parts"])
                text = text + piece if update.get("append") else piece
        return text
    return task_answer(out.task or {})


def task_answer(task: dict[str, Any]) -> str:
    return "".join(
        p.get("text", "") for a in task.get("artifacts") or [] for p in a.get("parts") or []
    )


def summarize(outcomes: list[Outcome], limit: int = 12) -> str:
    """Counts per kind, then the first few outcomes that are not clean."""
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.kind] = counts.get(o.kind, 0) + 1
    bad = [o for o in outcomes if o.kind == BAD or o.stream_problem]
    lines = [f"counts={counts}"]
    for o in bad[:limit]:
        lines.append(f"  {o} {o.stream_problem or ''}".rstrip())
    if len(bad) > limit:
        lines.append(f"  ... and {len(bad) - limit} more")
    return "\n".join(lines)
