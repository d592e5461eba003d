"""What every provider fake shares: a loopback uvicorn in a thread, a script, a record of requests.

A provider fake (Anthropic, Gemini, Ollama) is a `ProviderFake` that knows its routes, how to
read the user's text out of its request shape, what its real API refuses, and how to stream a
`Reply` in its own wire format. Tests drive every fake the same way::

    with AnthropicFake() as fake:
        fake.script(text(["Hel", "lo"], when_user_contains=marker))
        ...  # point LLM_API_BASE at fake.base_url
        (request,) = fake.requests_for(marker)
        assert request.body["system"] == [...]

A request takes the first queued reply whose `when_user_contains` marker occurs in the text of
its last user message, else the first reply without a marker; with nothing queued it answers
"echo: <last user text>" so a stray call never hangs. Every request is recorded (path, query,
headers, body, the refusal it got if any), refused or not, so tests assert on the wire.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import uvicorn

from tests.fakes.providers.script import Recorded, Refusal, Reply

log = logging.getLogger(__name__)


Chunks = AsyncIterator[bytes]


class ProviderFake:
    """A provider's API on 127.0.0.1 (a free port), served from a background thread."""

    base_path = ""
    """What follows host:port in `base_url` (the `LLM_API_BASE` LiteLLM wants)."""

    def __init__(self, *, api_key: str = "sk-test") -> None:
        self.api_key = api_key
        self.port: int | None = None
        self._lock = threading.Lock()
        self._queue: list[Reply] = []
        self._records: list[Recorded] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    # ---- what a provider implements ---------------------------------------------------------

    def route(self, method: str, path: str) -> bool:
        """Whether this is the provider's chat endpoint."""
        raise NotImplementedError

    def user_text(self, body: dict[str, Any]) -> str:
        """The text of the request's last user message (what markers are matched against)."""
        raise NotImplementedError

    def check(self, record: Recorded) -> None:
        """Raise `Refusal` for what the real API refuses."""

    def error_response(self, status: int, reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
        """The provider's error body and headers for an error reply."""
        raise NotImplementedError

    def stream(self, record: Recorded, reply: Reply) -> tuple[str, Chunks]:
        """The content type and the chunks of the provider's streamed answer."""
        raise NotImplementedError

    def complete(self, record: Recorded, reply: Reply) -> dict[str, Any]:
        """The provider's whole (non-streamed) answer."""
        raise NotImplementedError

    def streaming(self, record: Recorded) -> bool:
        return bool(record.body.get("stream"))

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{type(self).__name__} not started")
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def start(self, timeout: float = 10.0) -> ProviderFake:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._asgi,
            log_level="warning",
            access_log=False,
            lifespan="off",
            interface="asgi3",
            http="h11",
            ws="none",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} failed to start")
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
        self._server = self._thread = self._sock = None

    def __enter__(self) -> ProviderFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- control and records ---------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._records.clear()

    @property
    def pending(self) -> list[Reply]:
        with self._lock:
            return list(self._queue)

    @property
    def records(self) -> list[Recorded]:
        with self._lock:
            return [copy.deepcopy(record) for record in self._records]

    def requests_for(self, marker: str) -> list[Recorded]:
        """Every request whose last user message contains `marker`, in arrival order."""
        return [r for r in self.records if marker in self.user_text(r.body)]

    def wait_for_requests(self, marker: str, count: int = 1, timeout: float = 20.0) -> list:
        deadline = time.monotonic() + timeout
        while len(got := self.requests_for(marker)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"saw {len(got)} request(s) for {marker!r}, wanted {count}")
            time.sleep(0.02)
        return got

    def _take(self, body: dict[str, Any]) -> Reply:
        user = self.user_text(body)
        with self._lock:
            index = next(
                (
                    i
                    for i, reply in enumerate(self._queue)
                    if reply.when_user_contains is not None and reply.when_user_contains in user
                ),
                None,
            )
            if index is None:
                index = next(
                    (i for i, r in enumerate(self._queue) if r.when_user_contains is None), None
                )
            if index is None:
                return Reply(chunks=[f"echo: {user}"])
            reply = self._queue[index]
            if reply.times is not None:
                reply.times -= 1
                if reply.times <= 0:
                    del self._queue[index]
            return reply

    # ---- ASGI ------------------------------------------------------------------------------

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            await self._handle(scope, receive, send)
        except Exception:  # the fake must never take its server thread down
            log.exception("%s handler failed", type(self).__name__)

    async def _handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        method, path = scope["method"], scope["path"]
        record = Recorded(
            method=method,
            path=path,
            query=parse_qs(scope.get("query_string", b"").decode()),
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body={},
        )
        if not self.route(method, path):
            body, headers = self.error_response(404, Reply(message=f"no route {method} {path}"))
            await send_json(send, 404, body, headers)
            return
        try:
            parsed = json.loads(raw or b"{}")
            if not isinstance(parsed, dict):
                raise Refusal(400, "the request body is not a JSON object")
            record.body = parsed
            with self._lock:
                self._records.append(record)
            self.check(record)
        except (ValueError, Refusal) as exc:
            refusal = exc if isinstance(exc, Refusal) else Refusal(400, f"invalid JSON: {exc}")
            record.refused = refusal.message
            reply = Reply(message=refusal.message, error_type=refusal.error_type)
            body, headers = self.error_response(refusal.status, reply)
            await send_json(send, refusal.status, body, headers)
            return
        reply = record.reply = self._take(record.body)
        if reply.status is not None and not reply.stream_error:
            body, headers = self.error_response(reply.status, reply)
            await send_json(send, reply.status, body, headers)
            return
        if not self.streaming(record):
            await send_json(send, 200, self.complete(record, reply), {})
            return
        content_type, chunks = self.stream(record, reply)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type.encode()),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)  # one chunk per write, as a network would deliver them
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def sse(data: dict[str, Any], event: str | None = None) -> bytes:
    """One server-sent event (with its `event:` line when the format names events)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def send_json(send: Any, status: int, body: Any, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
    ]
    raw_headers.extend((k.encode(), v.encode()) for k, v in headers.items())
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
