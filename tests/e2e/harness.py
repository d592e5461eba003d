"""Helpers for the end-to-end tests: the real server as a subprocess, and a JSON-RPC/SSE client.

Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
A2A_HEADERS = {"A2A-Version": "1.0"}
TERMINAL_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}
INTERRUPTED_STATES = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}

# ErrorInfo.reason per A2A error code (spec 1.0 section 5.4 / 10.6).
A2A_ERROR_REASONS = {
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
}
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"

# Variables that would make the server under test depend on the developer's shell.
_SCRUB_PREFIXES = ("A2A_", "LLM_", "AGENT_", "OPENAI_", "ANTHROPIC_", "LITELLM_")
_SCRUB = {
    "REDIS_URL",
    "DATABASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
}


# A server is given its port before it binds it, so the port must stay free in between: ports are
# handed out from 10000-19999, below Linux's default ephemeral range (32768-60999: no connection,
# no bind to port 0 takes one meanwhile), and each test process (a pytest-xdist worker) has a share
# of its own, so two never pick the same one. A Redis cluster node's bus port (+10000) falls in
# 20000-29999, again in a share of its worker's own.
_PORTS_FROM, _PORTS_TO = 10_000, 20_000


def _port_share() -> range:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = (_PORTS_TO - _PORTS_FROM) // workers
    return range(_PORTS_FROM + worker * size, _PORTS_FROM + (worker + 1) * size)


_PORT_SHARE = _port_share()
# Round the share from a random place: a run right after another does not meet its lingering ports.
_PORTS = itertools.islice(itertools.cycle(_PORT_SHARE), random.randrange(len(_PORT_SHARE)), None)


def free_port() -> int:
    """A loopback port nothing is bound to now, from this test process's share."""
    for port in itertools.islice(_PORTS, len(_PORT_SHARE)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or still lingering from a closed connection
            return port
    raise RuntimeError(f"no free port left in {_PORT_SHARE}")


def new_id(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------------
# Server subprocess
# ---------------------------------------------------------------------------------------------


def server_command(port: int, host: str = "127.0.0.1") -> list[str]:
    args = ["--host", host, "--port", str(port)]
    for candidate in (Path(sys.executable).parent / "a2a-server", ROOT / ".venv/bin/a2a-server"):
        if candidate.exists():
            return [str(candidate), *args]
    return [sys.executable, "-m", "app", *args]


class ServerProcess:
    """``a2a-server`` on a free loopback port, wired to a fake LLM; in-memory stores."""

    def __init__(
        self,
        llm_base_url: str,
        env: dict[str, str] | None = None,
        start_timeout: float | None = None,
        wait_ready: bool = True,
        bind_host: str = "127.0.0.1",
    ) -> None:
        self.llm_base_url = llm_base_url
        self.bind_host = bind_host  # the server is always reached at 127.0.0.1
        self.wait_ready = wait_ready
        self.extra_env = dict(env or {})
        self.start_timeout = start_timeout or float(os.environ.get("E2E_SERVER_START_TIMEOUT", 30))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._logdir = tempfile.TemporaryDirectory(prefix="a2a-e2e-")
        self.stdout_path = Path(self._logdir.name) / "stdout.log"
        self.stderr_path = Path(self._logdir.name) / "stderr.log"

    def environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in _SCRUB and not k.startswith(_SCRUB_PREFIXES)
        }
        env.update(
            {
                "LLM_MODEL": "openai/fake-model",
                "LLM_API_BASE": self.llm_base_url,
                "LLM_API_KEY": "sk-test",
                "AGENT_TOOLS": "tests.e2e.tools_module:add,tests.e2e.tools_module:slow_echo",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "PYTHONPATH": os.pathsep.join(
                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
                ),
                "PYTHONUNBUFFERED": "1",
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self) -> ServerProcess:
        cmd = server_command(self.port, self.bind_host)
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        last_exc: Exception | None = None
        with httpx.Client(trust_env=False, timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    self._fail(
                        f"server exited with code {self.proc.returncode} during startup", cmd
                    )
                try:
                    r = client.get(self.url + "/healthz")
                    if r.status_code == 200:
                        if not self.wait_ready:
                            return self
                        # When the server has /readyz (model adapter loaded), wait for it too, so
                        # timing-sensitive tests do not pay for the slow LiteLLM import.
                        ready = client.get(self.url + "/readyz")
                        if ready.status_code in (200, 404, 405):
                            return self
                        r = ready
                    last_exc = RuntimeError(
                        f"{r.request.url.path} answered {r.status_code}: {r.text[:200]}"
                    )
                except httpx.HTTPError as exc:
                    last_exc = exc
                time.sleep(0.1)
        self._fail(f"server not healthy after {self.start_timeout}s (last: {last_exc!r})", cmd)
        raise AssertionError("unreachable")

    def _fail(self, why: str, cmd: list[str]) -> None:
        self.stop()
        raise RuntimeError(
            f"{why}\ncommand: {' '.join(cmd)}\n--- server stderr (tail) ---\n{self.logs()}"
        )

    def log_mark(self) -> int:
        """Where the server's stderr ends now: pass it to `log_since`."""
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    def settle_log(self) -> None:
        """One round trip to the running server. It writes its log lines once per pass of its
        event loop, so a line logged before an answer may reach the file just after it; every
        line logged before this call is in the file once it returns (a check that a line is
        *not* there reads after this; one that waits for a line polls instead)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(f"{self.url}/healthz", timeout=5, trust_env=False)

    def log_since(self, mark: int) -> str:
        """What the server wrote to stderr after `log_mark` returned `mark`."""
        try:
            with self.stderr_path.open("rb") as log:
                log.seek(mark)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def logs(self, limit: int | None = 6000) -> str:
        """The server's output, the last `limit` characters of each stream (None: all of it; a
        startup line is far back on a slow machine, behind the readiness polls' access lines)."""
        out = []
        for p in (self.stderr_path, self.stdout_path):
            with contextlib.suppress(OSError):
                data = p.read_text(errors="replace")
                if data:
                    out.append(f"[{p.name}]\n{data[-limit:] if limit else data}")
        return "\n".join(out) or "<no output>"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f is not None and not f.closed:
                f.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[ServerProcess]:
        """Started, then cleaned up however the block ends (a module's server fixture)."""
        self.start()
        try:
            yield self
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        self.stop()
        self._logdir.cleanup()


# ---------------------------------------------------------------------------------------------
# JSON-RPC + SSE client
# ---------------------------------------------------------------------------------------------


def _assert_no_traceback(text: str, where: str) -> None:
    assert "Traceback" not in text, (
        f"{where}: response body leaks a Python traceback:\n{text[:3000]}"
    )


@dataclass
class SSEEvent:
    id: str | None
    event: str | None
    data: Any
    raw: str


def event_id_key(event_id: str | None) -> tuple[int, ...]:
    """Order key for SSE ids: the integers in it (works for '7', '1700000000-3', 'evt-12')."""
    if event_id is None:
        raise AssertionError("SSE event without an id: line")
    nums = re.findall(r"\d+", event_id)
    if not nums:
        raise AssertionError(f"SSE event id {event_id!r} has no ordering number")
    return tuple(int(n) for n in nums)


class SSEStream:
    """An open streaming response (or a plain JSON error answering a streaming request)."""

    def __init__(self, response: httpx.Response, request_id: Any) -> None:
        self.response = response
        self.request_id = request_id
        self.received: list[SSEEvent] = []

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def content_type(self) -> str:
        return self.response.headers.get("content-type", "")

    @property
    def is_sse(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    def json(self) -> Any:
        """For non-SSE answers (e.g. a JSON-RPC error before the stream starts)."""
        body = self.response.read().decode(errors="replace")
        _assert_no_traceback(body, "streaming request")
        return json.loads(body)

    def sse_events(self) -> Iterator[SSEEvent]:
        """Every ``data:`` line as one parsed JSON document, with the event's id."""
        assert self.is_sse, (
            f"expected text/event-stream, got {self.status_code} {self.content_type!r}: "
            f"{self.response.read()[:2000]!r}"
        )
        ev_id: str | None = None
        ev_name: str | None = None
        datas: list[str] = []
        for line in self.response.iter_lines():
            _assert_no_traceback(line, "SSE stream")
            if line == "":
                for d in datas:
                    ev = SSEEvent(ev_id, ev_name, _loads(d), d)
                    self.received.append(ev)
                    yield ev
                ev_id, ev_name, datas = None, None, []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "id":
                ev_id = value
            elif name == "event":
                ev_name = value
            elif name == "data":
                datas.append(value)
        for d in datas:  # stream ended without the trailing blank line
            ev = SSEEvent(ev_id, ev_name, _loads(d), d)
            self.received.append(ev)
            yield ev

    def __iter__(self) -> Iterator[tuple[str | None, Any]]:
        for ev in self.sse_events():
            yield ev.id, ev.data

    def close(self) -> None:
        self.response.close()


def _loads(d: str) -> Any:
    try:
        return json.loads(d)
    except ValueError as exc:
        raise AssertionError(f"SSE data line is not one complete JSON document: {d!r}") from exc


class RpcClient:
    """JSON-RPC 2.0 over HTTP POST to the server's A2A endpoint (``/``)."""

    def __init__(self, base_url: str, endpoint: str = "/", timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoint_url = self.base_url + endpoint
        self.http = httpx.Client(trust_env=False, timeout=httpx.Timeout(timeout, connect=5))
        self._ids = iter(range(1, 1 << 30))

    def close(self) -> None:
        self.http.close()

    def next_id(self) -> int:
        return next(self._ids)

    # ---- raw ---------------------------------------------------------------------------------

    def post_raw(
        self,
        body: bytes | str | Any,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        h = {**A2A_HEADERS, **(headers or {})}
        if isinstance(body, (bytes, str)):
            content = body.encode() if isinstance(body, str) else body
            h.setdefault("Content-Type", "application/json")
            r = self.http.post(self.endpoint_url, content=content, headers=h)
        else:
            r = self.http.post(self.endpoint_url, json=body, headers=h)
        _assert_no_traceback(r.text, "JSON-RPC POST")
        return r

    def get(self, path: str) -> httpx.Response:
        r = self.http.get(self.base_url + path, headers=A2A_HEADERS)
        _assert_no_traceback(r.text, f"GET {path}")
        return r

    # ---- JSON-RPC ----------------------------------------------------------------------------

    def call(
        self, method: str, params: Any = None, id: Any = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Send one request; return the whole JSON-RPC response object (HTTP 200 asserted)."""
        rid = self.next_id() if id is None else id
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            payload["params"] = params
        r = self.post_raw(payload, headers=headers)
        assert r.status_code == 200, (
            f"{method}: HTTP {r.status_code} (JSON-RPC wants 200): {r.text}"
        )
        assert r.headers.get("content-type", "").startswith("application/json"), (
            f"{method}: content-type {r.headers.get('content-type')!r}: {r.text[:500]}"
        )
        body = r.json()
        assert isinstance(body, dict), f"{method}: response is not an object: {body!r}"
        assert body.get("jsonrpc") == "2.0", f"{method}: bad jsonrpc member: {body!r}"
        assert body.get("id") == rid, f"{method}: response id {body.get('id')!r} != {rid!r}"
        assert ("result" in body) != ("error" in body), f"{method}: need result xor error: {body}"
        return body

    def result(self, method: str, params: Any = None, **kw: Any) -> Any:
        body = self.call(method, params, **kw)
        assert "error" not in body, f"{method}({params!r}) failed: {body['error']!r}"
        return body["result"]

    def error(self, method: str, params: Any = None, **kw: Any) -> dict[str, Any]:
        body = self.call(method, params, **kw)
        assert "error" in body, f"{method}({params!r}) unexpectedly succeeded: {body!r}"
        check_error_object(body["error"])
        return body["error"]

    @contextlib.contextmanager
    def stream(
        self, method: str, params: Any = None, id: Any = None, read_timeout: float = 20.0
    ) -> Iterator[SSEStream]:
        rid = self.next_id() if id is None else id
        payload = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        with self.http.stream(
            "POST",
            self.endpoint_url,
            json=payload,
            headers={**A2A_HEADERS, "Accept": "text/event-stream"},
            timeout=httpx.Timeout(read_timeout, connect=5),
        ) as resp:
            s = SSEStream(resp, rid)
            try:
                yield s
            finally:
                s.close()

    def stream_all(self, method: str, params: Any = None, **kw: Any) -> list[SSEEvent]:
        """Open a stream, read it until the server closes it, return every event."""
        with self.stream(method, params, **kw) as s:
            assert s.status_code == 200, f"{method}: HTTP {s.status_code}"
            return list(s.sse_events())

    # ---- A2A conveniences ----------------------------------------------------------------------

    def send(
        self,
        text: str,
        *,
        context_id: str | None = None,
        task_id: str | None = None,
        configuration: dict[str, Any] | None = None,
        **message_fields: Any,
    ) -> dict[str, Any]:
        """SendMessage; returns the Task from ``{"task": ...}``."""
        res = self.result(
            "SendMessage",
            send_params(
                text,
                context_id=context_id,
                task_id=task_id,
                configuration=configuration,
                **message_fields,
            ),
        )
        assert isinstance(res, dict) and "task" in res, f"SendMessage result is not {{task}}: {res}"
        return res["task"]

    def get_task(self, task_id: str, **params: Any) -> dict[str, Any]:
        return self.result("GetTask", {"id": task_id, **params})

    def wait_for_state(
        self,
        task_id: str,
        states: Iterable[str] | str = TERMINAL_STATES,
        timeout: float = 15.0,
        interval: float = 0.1,
    ) -> dict[str, Any]:
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        task = self.get_task(task_id)
        while task["status"]["state"] not in wanted:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"task {task_id} still {task['status']['state']} after {timeout}s "
                    f"(wanted {sorted(wanted)}): {task}"
                )
            time.sleep(interval)
            task = self.get_task(task_id)
        return task


def user_message(
    text: str,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
    message_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "messageId": message_id or new_id("msg-"),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if context_id is not None:
        m["contextId"] = context_id
    if task_id is not None:
        m["taskId"] = task_id
    m.update(extra)
    return m


def send_params(
    text: str,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
    configuration: dict[str, Any] | None = None,
    **message_fields: Any,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": user_message(text, context_id=context_id, task_id=task_id, **message_fields)
    }
    if configuration is not None:
        params["configuration"] = configuration
    return params


def check_error_object(err: Any) -> None:
    """JSON-RPC error object: only code/message/data; A2A codes carry a google.rpc.ErrorInfo."""
    assert isinstance(err, dict), f"error is not an object: {err!r}"
    extra = set(err) - {"code", "message", "data"}
    assert not extra, f"error object has members beyond code/message/data: {sorted(extra)}: {err}"
    assert isinstance(err.get("code"), int), f"error.code must be an integer: {err}"
    assert isinstance(err.get("message"), str) and err["message"], f"error.message empty: {err}"
    code = err["code"]
    if code in A2A_ERROR_REASONS:
        data = err.get("data")
        assert isinstance(data, list), f"A2A error {code}: data must be an array: {err}"
        infos = [d for d in data if isinstance(d, dict) and d.get("@type") == ERROR_INFO_TYPE]
        assert infos, f"A2A error {code}: data has no {ERROR_INFO_TYPE}: {err}"
        assert infos[0].get("reason") == A2A_ERROR_REASONS[code], (
            f"A2A error {code}: ErrorInfo.reason {infos[0].get('reason')!r} != "
            f"{A2A_ERROR_REASONS[code]!r}: {err}"
        )


def assert_error(err: dict[str, Any], code: int) -> None:
    assert err["code"] == code, f"expected error code {code}, got {err['code']}: {err}"


# ---------------------------------------------------------------------------------------------
# Stream checks shared by several modules
# ---------------------------------------------------------------------------------------------


def stream_results(events: list[SSEEvent], request_id: Any) -> list[dict[str, Any]]:
    """Check the JSON-RPC envelope, schema and id ordering of SSE events; return the results."""
    from tests.e2e.wire import assert_valid

    assert events, "stream produced no events"
    results = []
    for n, ev in enumerate(events):
        d = ev.data
        assert isinstance(d, dict), f"event {n}: data is not an object: {ev.raw}"
        assert set(d) == {"jsonrpc", "id", "result"}, (
            f"event {n}: expected exactly jsonrpc/id/result members, got {sorted(d)}: {ev.raw}"
        )
        assert d["jsonrpc"] == "2.0", f"event {n}: {ev.raw}"
        assert d["id"] == request_id, f"event {n}: id {d['id']!r} != request id {request_id!r}"
        assert_valid("stream_response", d["result"])
        results.append(d["result"])
    keys = [event_id_key(ev.id) for ev in events]
    for n in range(1, len(keys)):
        assert keys[n] > keys[n - 1], (
            f"SSE ids not strictly increasing at event {n}: {[ev.id for ev in events]}"
        )
    return results


def kind_of(result: dict[str, Any]) -> str:
    (k,) = result.keys()
    return k


def state_of(result: dict[str, Any]) -> str | None:
    k = kind_of(result)
    if k == "task":
        return result["task"]["status"]["state"]
    if k == "statusUpdate":
        return result["statusUpdate"]["status"]["state"]
    return None


def describe(results: list[dict[str, Any]]) -> str:
    """Compact one-line-per-event description for assertion messages."""
    out = []
    for r in results:
        k = kind_of(r)
        if k == "artifactUpdate":
            a = r[k]
            out.append(
                f"artifactUpdate(append={a.get('append')}, last={a.get('lastChunk')}, "
                f"text={''.join(p.get('text', '') for p in a['artifact']['parts'])!r})"
            )
        elif k in ("task", "statusUpdate"):
            st = r[k]["status"]
            msg = st.get("message")
            txt = "".join(p.get("text", "") for p in (msg or {}).get("parts", []))
            out.append(f"{k}({st['state']}{', msg=' + repr(txt) if msg else ''})")
        else:
            out.append(k)
    return "\n  ".join(["events:", *out])
