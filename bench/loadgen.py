"""Load generators of the side-by-side bench: wrk for request/response (C, so the client costs
the servers little of the machine's two cores) and a small asyncio HTTP/1.1 client for streams
(first-event latency and events/s need every event timed, which wrk cannot do) and for holding
thousands of idle streams open.

Both speak raw A2A 1.0 JSON-RPC at `/`, which our server and the official SDK's both serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

_SEND_LUA = r"""
local counter, tid, threads = 0, 0, {}
failures = 0
setup = function(thread)
  tid = tid + 1; thread:set("tid", tid); table.insert(threads, thread)
end
request = function()
  counter = counter + 1
  local body = '{"jsonrpc":"2.0","id":1,"method":"%METHOD%","params":%PARAMS%}'
  body = string.gsub(body, "MSGID", "w" .. tostring(tid) .. "-" .. counter)
  return wrk.format("POST", "/", {["Content-Type"]="application/json", ["A2A-Version"]="1.0"}, body)
end
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, "%EXPECT%", 1, true) then failures = failures + 1 end
end
done = function(summary, latency, requests)
  local failed = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout
  for _, thread in ipairs(threads) do failed = failed + thread:get("failures") end
  io.write(string.format("RESULT %d %d %d %d %d\n", summary.requests, failed,
    latency:percentile(50), latency:percentile(99), summary.duration))
end
"""


@dataclass(frozen=True)
class Rate:
    per_s: float
    p50_ms: float
    p99_ms: float
    failures: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], *, timeout_s: float = 120) -> None:
    """Until something listens on `port` (RuntimeError if `proc` exits first, or at timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s:.0f} s")


@contextlib.contextmanager
def served(
    command: list[str], *, env: dict[str, str], cwd: str | Path
) -> Iterator[tuple[str, int]]:
    """A server started by `command` (its `{port}` filled in with a free one), its output to
    /dev/null: (its URL, its pid) once it listens; terminated on the way out."""
    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in command]
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process' CPU time so far (user + system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


async def asgi_post(app: Any, request: bytes) -> bytes:
    """One JSON-RPC POST through an ASGI app in process (no HTTP server), its response body read
    to the end."""
    answered, chunks, received = asyncio.Event(), [], False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": request, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                answered.set()

    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"a2a-version", b"1.0"),
        (b"content-length", str(len(request)).encode()),
    ]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/", "raw_path": b"/", "root_path": "", "query_string": b"",
             "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000),
             "state": {}}  # fmt: skip
    await app(scope, receive, send)
    return b"".join(chunks)


def send_params(text: str = "hi", **extra: object) -> dict[str, object]:
    message = {"messageId": "MSGID", "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, **extra}


def wrk(
    url: str,
    *,
    method: str,
    params: dict[str, object],
    expect: str,
    concurrency: int,
    seconds: float,
) -> Rate:
    """`concurrency` connections (one wrk thread) sending `method` for `seconds`; a reply
    without `expect` in its body counts as a failure (and still in the rate: read both)."""
    script = (
        _SEND_LUA.replace("%METHOD%", method)
        .replace("%PARAMS%", json.dumps(params, separators=(",", ":")))
        .replace("%EXPECT%", expect)
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{concurrency}",
                f"-d{seconds:g}s",
                "--timeout",
                "30s",
                "-s",
                file.name,
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 60,
        ).stdout
    finally:
        Path(file.name).unlink()
    match = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    if match is None:
        raise RuntimeError(f"wrk printed no result: {out}")
    requests, failures, p50_us, p99_us, duration_us = map(int, match.groups())
    return Rate(requests / (duration_us / 1e6), p50_us / 1000, p99_us / 1000, failures)


def rpc_body(method: str, params: dict[str, object]) -> bytes:
    text = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    return text.replace("MSGID", uuid.uuid4().hex).encode()


def _request(url: str, body: bytes) -> bytes:
    host = urlsplit(url).netloc
    return (
        f"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nA2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def get_task_request(url: str, task_id: str) -> bytes:
    """A whole HTTP/1.1 request of GetTask (JSON-RPC), to be sent as it is many times."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    ).encode()
    host = urlsplit(url).netloc
    return (
        f"POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"A2A-Version: 1.0\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


_END_OF_CHUNKED = b"\r\n0\r\n\r\n"


async def _connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    return await asyncio.open_connection(parts.hostname, parts.port, limit=1 << 20)


@dataclass
class StreamFigures:
    events: int
    seconds: float
    first_event_s: list[float]
    failures: int

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds


async def streams(url: str, *, concurrency: int, seconds: float, text: str = "hi") -> StreamFigures:
    """`concurrency` workers, each on one keep-alive connection, sending SendStreamingMessage and
    reading each stream to its end for `seconds`: events received and each first event's wait."""
    figures = StreamFigures(0, seconds, [], 0)
    stop = time.monotonic() + seconds

    async def worker() -> None:
        reader, writer = await _connect(url)
        try:
            while time.monotonic() < stop:
                began = time.monotonic()
                writer.write(_request(url, rpc_body("SendStreamingMessage", send_params(text))))
                received, first = b"", None
                while not received.endswith(_END_OF_CHUNKED):
                    chunk = await reader.read(1 << 16)
                    if not chunk:  # a refusal (503) that closed the connection: count, reconnect
                        break
                    received += chunk
                    if first is None and b"data:" in received:
                        first = time.monotonic() - began
                events = received.count(b"\ndata:")  # each event starts a line
                if (
                    first is None
                    or b"COMPLETED" not in received
                    or not received.startswith(b"HTTP/1.1 200")
                ):
                    figures.failures += 1
                    if not received.endswith(_END_OF_CHUNKED):
                        writer.close()
                        reader, writer = await _connect(url)
                    continue
                figures.first_event_s.append(first)
                figures.events += events
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return figures


async def calls(url: str, *, method: str, count: int, concurrency: int) -> None:
    """`count` requests of `method` (SendMessage or SendStreamingMessage), `concurrency` at a
    time on keep-alive connections, each read to its end; RuntimeError at the first that does
    not complete (for a fixed amount of work, where wrk gives a fixed time)."""

    async def worker(calls: int) -> None:
        reader, writer = await _connect(url)
        try:
            for _ in range(calls):
                writer.write(_request(url, rpc_body(method, send_params())))
                head = await reader.readuntil(b"\r\n\r\n")
                if b"transfer-encoding: chunked" in head.lower():
                    body = await reader.readuntil(_END_OF_CHUNKED)
                else:
                    length = re.search(rb"(?i)content-length: *(\d+)", head)
                    body = await reader.readexactly(int(length.group(1)) if length else 0)
                if not head.startswith(b"HTTP/1.1 200") or b"COMPLETED" not in body:
                    raise RuntimeError(f"{method} did not complete: {(head + body)[:300]!r}")
        finally:
            writer.close()

    share, extra = divmod(count, concurrency)
    await asyncio.gather(*(worker(share + (n < extra)) for n in range(concurrency)))


async def hold_idle_streams(
    url: str,
    *,
    count: int,
    task_id: str | None,
    opened: asyncio.Event,
    release: asyncio.Event,
    opening: int = 200,
) -> int:
    """Open `count` idle streams, wait for each one's first event, set `opened`, hold them until
    `release`. With a `task_id`, SubscribeToTask streams on that task (which stays working);
    without, SendStreamingMessage streams, each on a task of its own (turns that stay working),
    `opening` at a time, as a load balancer's clients would arrive. Returns the streams that
    failed."""
    failures = 0
    ready = 0
    all_ready = asyncio.Event()
    gate = asyncio.Semaphore(opening if task_id is None else count)

    def body() -> bytes:
        if task_id is not None:
            return rpc_body("SubscribeToTask", {"id": task_id})
        return rpc_body("SendStreamingMessage", send_params())  # a fresh message id each

    async def one() -> None:
        nonlocal failures, ready
        async with gate:
            try:
                reader, writer = await _connect(url)
            except OSError:
                failures += 1
                writer = None
            if writer is not None:
                try:
                    writer.write(_request(url, body()))
                    received = b""
                    while b"data:" not in received:
                        chunk = await asyncio.wait_for(reader.read(1 << 16), 60)
                        if not chunk:
                            raise ConnectionError("closed")
                        received += chunk
                    if not received.startswith(b"HTTP/1.1 200") or b'"error"' in received:
                        raise ConnectionError(received[:200].decode(errors="replace"))
                except (OSError, ConnectionError, TimeoutError):
                    failures += 1
                    writer.close()
                    writer = None
            ready += 1
            if ready == count:
                all_ready.set()
        await release.wait()
        if writer is not None:
            writer.close()

    holders = [asyncio.create_task(one()) for _ in range(count)]
    await all_ready.wait()
    opened.set()
    await asyncio.gather(*holders)
    return failures


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of its own on a free loopback port, keeping nothing on disk."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(100):
                if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                                  text=True).stdout.strip() == "PONG":  # fmt: skip
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)
