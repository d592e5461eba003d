"""An OpenAI-compatible fake chat-completions server for tests.

It runs in a background thread of the test process (uvicorn on 127.0.0.1, free port) and is
controlled directly through Python methods::

    with FakeLLMServer() as llm:
        llm.script(text(["Hel", "lo"], when_user_contains="marker-1"))
        ...  # point LiteLLM / the server at llm.base_url
        assert llm.requests_for("marker-1")[0]["messages"][-1]["content"] == "... marker-1 ..."

Replies come from a script queue.  A request takes the first queued step whose
``when_user_contains`` marker occurs in the text of the request's *last user message*; failing
that, the first step without a marker (FIFO).  When nothing matches it answers
``"echo: <last user text>"`` so stray calls never hang.

Only loopback is ever bound.  No third-party network access.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn

log = logging.getLogger(__name__)

__all__ = [
    "FakeLLMServer",
    "RecordedRequest",
    "Step",
    "error",
    "last_user_text",
    "message_text",
    "text",
    "tool_calls",
]


# --------------------------------------------------------------------------------------------
# Script steps
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One scripted model reply.

    ``chunks``           text content, streamed one chunk per SSE event.
    ``tool_calls``       ``[(name, arguments_json_string), ...]`` emitted as streamed
                         ``delta.tool_calls`` (ids ``call_<n>``), finish_reason ``tool_calls``.
    ``status``           if set, answer with this HTTP error status and an OpenAI error body.
    ``delay``            seconds to wait before the first byte (status line included).
    ``chunk_delay``      seconds to wait before each streamed chunk after the first.
    ``finish_reason``    overrides the computed finish reason (e.g. ``"length"``).
    ``when_user_contains`` only match requests whose last user message contains this string.
    ``times``            how many requests this step answers (``None`` = unlimited).
    ``arg_splits``       in how many pieces each tool-call argument string is streamed.
    """

    chunks: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    status: int | None = None
    error_message: str = "fake upstream error"
    error_type: str | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    finish_reason: str | None = None
    when_user_contains: str | None = None
    times: int | None = 1
    arg_splits: int = 2
    usage: dict[str, int] | None = None

    def matches(self, user_text: str) -> bool:
        return self.when_user_contains is not None and self.when_user_contains in user_text


def text(
    chunks: str | Sequence[str],
    *,
    chunk_delay: float = 0.0,
    delay: float = 0.0,
    finish_reason: str | None = None,
    when_user_contains: str | None = None,
    times: int | None = 1,
) -> Step:
    """A text reply; a plain string is sent as a single chunk."""
    if isinstance(chunks, str):
        chunks = [chunks]
    return Step(
        chunks=list(chunks),
        chunk_delay=chunk_delay,
        delay=delay,
        finish_reason=finish_reason,
        when_user_contains=when_user_contains,
        times=times,
    )


def tool_calls(
    calls: Iterable[tuple[str, str | dict[str, Any]]],
    *,
    content: str | Sequence[str] = (),
    delay: float = 0.0,
    chunk_delay: float = 0.0,
    finish_reason: str | None = None,
    when_user_contains: str | None = None,
    times: int | None = 1,
    arg_splits: int = 2,
) -> Step:
    """A tool-call reply.  Arguments may be given as a dict (JSON-encoded here) or a string."""
    norm = [(n, a if isinstance(a, str) else json.dumps(a)) for n, a in calls]
    if isinstance(content, str):
        content = [content] if content else []
    return Step(
        chunks=list(content),
        tool_calls=norm,
        delay=delay,
        chunk_delay=chunk_delay,
        finish_reason=finish_reason,
        when_user_contains=when_user_contains,
        times=times,
        arg_splits=arg_splits,
    )


def error(
    status: int,
    message: str = "fake upstream error",
    *,
    error_type: str | None = None,
    delay: float = 0.0,
    when_user_contains: str | None = None,
    times: int | None = 1,
) -> Step:
    """An HTTP error reply with an OpenAI-style error body."""
    return Step(
        status=status,
        error_message=message,
        error_type=error_type,
        delay=delay,
        when_user_contains=when_user_contains,
        times=times,
    )


# --------------------------------------------------------------------------------------------
# Request helpers
# --------------------------------------------------------------------------------------------


def message_text(msg: dict[str, Any]) -> str:
    """The text of an OpenAI chat message (string content or a list of content parts)."""
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
        return "".join(out)
    return str(content)


def last_user_text(body: dict[str, Any]) -> str:
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return message_text(msg)
    return ""


@dataclass
class RecordedRequest:
    path: str
    body: dict[str, Any]
    received_at: float
    step: Step | None
    finished_at: float | None = None
    client_disconnected: bool = False


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class FakeLLMServer:
    """OpenAI-compatible fake; see module docstring."""

    model_name = "fake-model"

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("FakeLLMServer only binds loopback")
        self.host = host
        self._want_port = port
        self.port: int | None = None
        self._lock = threading.Lock()
        self._queue: list[Step] = []
        self._records: list[RecordedRequest] = []
        self._call_ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("FakeLLMServer not started")
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 10.0) -> FakeLLMServer:
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._want_port))
        sock.listen(128)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._asgi,
            log_level="warning",
            access_log=False,
            lifespan="off",
            interface="asgi3",
            loop="asyncio",
            http="h11",
            ws="none",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"fake-llm-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("FakeLLMServer failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._server = None
        self._thread = None
        self._sock = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- control ---------------------------------------------------------------------------

    def script(self, *steps: Step | Iterable[Step]) -> None:
        """Append steps to the reply queue (accepts steps or iterables of steps)."""
        flat: list[Step] = []
        for s in steps:
            if isinstance(s, Step):
                flat.append(s)
            else:
                flat.extend(s)
        with self._lock:
            self._queue.extend(flat)

    def reset(self) -> None:
        """Forget the script queue and the recorded requests."""
        with self._lock:
            self._queue.clear()
            self._records.clear()

    @property
    def pending(self) -> list[Step]:
        with self._lock:
            return list(self._queue)

    @property
    def records(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every recorded chat-completions request body, in arrival order (deep copies)."""
        with self._lock:
            return [copy.deepcopy(r.body) for r in self._records]

    def requests_for(self, marker: str) -> list[dict[str, Any]]:
        """Recorded request bodies whose last user message contains ``marker``."""
        return [b for b in self.requests if marker in last_user_text(b)]

    def records_for(self, marker: str) -> list[RecordedRequest]:
        return [r for r in self.records if marker in last_user_text(r.body)]

    def tool_result(self, marker: str) -> str:
        """What the model was told a tool call returned: the first tool message in the requests
        for ``marker`` (the request after the one that called the tool carries it)."""
        for request in self.requests_for(marker):
            for message in request["messages"]:
                if message.get("role") == "tool":
                    return str(message["content"])
        raise AssertionError(f"no tool result in the requests for {marker!r}")

    def wait_for_requests(self, marker: str, count: int = 1, timeout: float = 10.0) -> list[dict]:
        """Block until at least ``count`` requests for ``marker`` have arrived."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.requests_for(marker)
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"fake LLM saw {len(got)} request(s) for {marker!r}, wanted {count}"
                )
            time.sleep(0.02)

    # ---- matching --------------------------------------------------------------------------

    def _take_step(self, body: dict[str, Any]) -> Step | None:
        user = last_user_text(body)
        with self._lock:
            idx = next((i for i, s in enumerate(self._queue) if s.matches(user)), None)
            if idx is None:
                idx = next(
                    (i for i, s in enumerate(self._queue) if s.when_user_contains is None), None
                )
            if idx is None:
                return None
            step = self._queue[idx]
            if step.times is not None:
                step.times -= 1
                if step.times <= 0:
                    del self._queue[idx]
            return step

    # ---- ASGI ------------------------------------------------------------------------------

    async def _asgi(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._handle(scope, receive, send)
        except Exception:  # never let the fake crash the server thread noisily
            log.exception("fake LLM handler failed")

    async def _handle(self, scope: dict, receive: Any, send: Any) -> None:
        path: str = scope.get("path", "")
        method: str = scope.get("method", "GET")
        raw = b""
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            raw += msg.get("body", b"")
            if not msg.get("more_body"):
                break

        if method == "GET" and path in ("/", "/health", "/healthz"):
            await _send_json(send, 200, {"status": "ok"})
            return
        if method == "GET" and path.rstrip("/") == "/v1/models":
            await _send_json(
                send, 200, {"object": "list", "data": [{"id": self.model_name, "object": "model"}]}
            )
            return
        if method != "POST" or path.rstrip("/") not in (
            "/v1/chat/completions",
            "/chat/completions",
        ):
            await _send_json(send, 404, _error_body(f"no route {method} {path}", "not_found"))
            return

        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            await _send_json(
                send, 400, _error_body(f"invalid JSON: {exc}", "invalid_request_error")
            )
            return

        step = self._take_step(body)
        if step is None:
            step = Step(chunks=[f"echo: {last_user_text(body)}"])
        rec = RecordedRequest(path=path, body=body, received_at=time.monotonic(), step=step)
        with self._lock:
            self._records.append(rec)

        disconnected = asyncio.Event()

        async def watch() -> None:
            while True:
                m = await receive()
                if m["type"] == "http.disconnect":
                    disconnected.set()
                    return

        watcher = asyncio.create_task(watch())
        try:
            await self._respond(body, step, send, disconnected)
        finally:
            watcher.cancel()
            rec.client_disconnected = disconnected.is_set()
            rec.finished_at = time.monotonic()

    async def _respond(
        self, body: dict[str, Any], step: Step, send: Any, disconnected: asyncio.Event
    ) -> None:
        async def pause(seconds: float) -> bool:
            """Sleep; return False if the client went away meanwhile."""
            if seconds <= 0:
                return not disconnected.is_set()
            try:
                await asyncio.wait_for(disconnected.wait(), timeout=seconds)
                return False
            except TimeoutError:
                return True

        if not await pause(step.delay):
            return

        if step.status is not None:
            etype = step.error_type or (
                "rate_limit_exceeded"
                if step.status == 429
                else "server_error"
                if step.status >= 500
                else "invalid_request_error"
            )
            await _send_json(
                send,
                step.status,
                _error_body(step.error_message, etype),
                extra_headers=[(b"retry-after-ms", b"10"), (b"retry-after", b"0")],
            )
            return

        model = body.get("model") or self.model_name
        calls = [(f"call_{next(self._call_ids)}", n, a) for n, a in step.tool_calls]
        finish = step.finish_reason or ("tool_calls" if calls else "stop")
        content = "".join(step.chunks)
        usage = step.usage or {
            "prompt_tokens": 10,
            "completion_tokens": max(1, len(content.split()) + len(calls)),
            "total_tokens": 10 + max(1, len(content.split()) + len(calls)),
        }
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())

        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": content or None}
            if calls:
                message["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ]
            await _send_json(
                send,
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                    ],
                    "usage": usage,
                },
            )
            return

        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
                ],
            }

        async def emit(obj: dict[str, Any] | str) -> bool:
            if disconnected.is_set():
                return False
            data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
            try:
                await send(
                    {
                        "type": "http.response.body",
                        "body": f"data: {data}\n\n".encode(),
                        "more_body": True,
                    }
                )
            except Exception:  # client went away
                disconnected.set()
                return False
            return True

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        events.extend(chunk({"content": c}) for c in step.chunks)
        for index, (call_id, name, args) in enumerate(calls):
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for piece in _split(args, step.arg_splits):
                events.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
        events.append(chunk({}, finish))

        first = True
        for ev in events:
            # chunk_delay paces the content chunks (not the role preamble)
            if not first and step.chunk_delay and ev["choices"][0]["delta"]:
                if not await pause(step.chunk_delay):
                    return
            first = False
            if not await emit(ev):
                return
        opts = body.get("stream_options") or {}
        if opts.get("include_usage"):
            if not await emit(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            ):
                return
        if not await emit("[DONE]"):
            return
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception:
            disconnected.set()


def _split(s: str, pieces: int) -> list[str]:
    if pieces <= 1 or len(s) < 2:
        return [s]
    size = max(1, -(-len(s) // pieces))
    return [s[i : i + size] for i in range(0, len(s), size)]


def _error_body(message: str, etype: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": None, "code": etype}}


async def _send_json(
    send: Any, status: int, obj: Any, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(obj).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers.extend(extra_headers or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
