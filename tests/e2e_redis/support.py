"""Helpers for the multi-replica Redis end-to-end tests.

* `Cluster`: two (or more) real `a2a-server` processes on free loopback ports sharing one Redis
  (REDIS_URL) under one key prefix, wired to one in-process fake model.
* `open_sse` / `BackgroundStream` / `stream_in_background`: SSE requests with arbitrary headers
  (``Last-Event-ID``), over JSON-RPC or REST, read in the foreground or in a thread;
  `BlockingSend`: a SendMessage in a thread.
* leases: `lease_holder`, `wait_for_holder` (which replica runs a task's turn), `wait_until`.
* `RedisServer`: a private `redis-server` on a free loopback port (stop / start again, freeze /
  thaw).
* stream checks: contiguous ids, the answer rebuilt with the A2A ``append`` semantics.

Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import redis

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from tests.e2e.harness import (
    A2A_HEADERS,
    ROOT,
    RpcClient,
    ServerProcess,
    SSEEvent,
    SSEStream,
    free_port,
    kind_of,
)

REDIS_URL = os.environ.get("A2A_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TOOLS = "tests.e2e_redis.tools_redis:slow_tool,tests.e2e.tools_module:add"


# ---------------------------------------------------------------------------------------------
# Redis
# ---------------------------------------------------------------------------------------------


def connect(url: str = REDIS_URL) -> Any:
    """A client of one Redis, or of a cluster (`redis+cluster://`: every command routed)."""
    if "+cluster://" in url:
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(*host.split(":")) for host in url.split("://", 1)[1].split(",")]
        client: Any = RedisCluster(startup_nodes=nodes, socket_timeout=5)
    else:
        client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    client.ping()
    return client


def keys_with_prefix(client: redis.Redis, prefix: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000))


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])
    return len(keys)


class RedisServer:
    """A private redis-server on a free loopback port; AOF in a temp dir when `persistent`."""

    def __init__(self, *, persistent: bool = True) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not on PATH")
        self.port = free_port()
        self.persistent = persistent
        self._dir = tempfile.TemporaryDirectory(prefix="a2a-e2e-redis-")
        self.dir = Path(self._dir.name)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "redis.log"

    def command(self) -> list[str]:
        cmd = [
            self.binary or "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--dir", str(self.dir),
            "--logfile", str(self.log_path),
        ]  # fmt: skip
        if self.persistent:
            cmd += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            cmd += ["--appendonly", "no"]
        return cmd

    def start(self, timeout: float = 10.0) -> RedisServer:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                c = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)  # its password too
                if c.ping():
                    # loading the AOF answers LOADING errors until done: wait for a real reply
                    c.dbsize()
                    c.close()
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.logs()}")
            time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP: connections stay open and connects still succeed, but nothing is answered
        (a hung Redis, the hardest outage to notice)."""
        assert self.proc is not None and self.proc.poll() is None, "redis-server is not running"
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: the frozen server goes on where it stopped."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM: the AOF is flushed)."""
        if self.proc is not None and self.proc.poll() is None:
            self.thaw()  # a frozen server would not act on the SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def logs(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return "<no redis log>"

    def cleanup(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        """Started; stopped and removed at the end: `with RedisServer() as redis: ...`."""
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.cleanup()


# ---------------------------------------------------------------------------------------------
# Replicas
# ---------------------------------------------------------------------------------------------


class Cluster:
    """Replicas A and B of the server: same Redis, same prefix, same fake model. Or, with a
    `database_url` instead (tests/e2e_postgres), the same PostgreSQL database."""

    def __init__(
        self,
        llm_base_url: str,
        *,
        redis_url: str | None = None,
        prefix: str = "",
        database_url: str | None = None,
        tool_log: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        assert (redis_url is None) != (database_url is None), "a Redis or a database"
        self.llm_base_url = llm_base_url
        self.redis_url = redis_url
        self.database_url = database_url
        self.prefix = prefix
        self.tool_log = tool_log
        stores = (
            {"DATABASE_URL": database_url}
            if database_url is not None
            else {"REDIS_URL": redis_url or "", "REDIS_KEY_PREFIX": prefix}
        )
        self.env = {
            **stores,
            "AGENT_TOOLS": TOOLS,
            "E2E_REDIS_TOOL_LOG": str(tool_log),
            "LOG_LEVEL": "info",
            **(extra_env or {}),
        }
        self.servers: list[ServerProcess] = []
        self.clients: list[RpcClient] = []

    def spawn(self, count: int = 1) -> list[ServerProcess]:
        """Start `count` more replicas (in parallel); return them."""
        procs = [ServerProcess(self.llm_base_url, env=self.env) for _ in range(count)]
        self.servers.extend(procs)
        with ThreadPoolExecutor(max_workers=count) as pool:
            list(pool.map(lambda p: p.start(), procs))
            list(pool.map(wait_ready, procs))
        return procs

    def client(self, server: ServerProcess, timeout: float = 30.0) -> RpcClient:
        c = RpcClient(server.url, timeout=timeout)
        self.clients.append(c)
        return c

    def logs(self, limit: int = 3000) -> str:
        out = []
        for n, s in enumerate(self.servers):
            pid = s.proc.pid if s.proc else None
            out.append(f"===== replica #{n} {s.url} pid={pid} =====\n{s.logs(limit)}")
        return "\n".join(out)

    def __enter__(self) -> Cluster:
        """`with Cluster(...) as cluster:`: its replicas and clients are stopped at the end."""
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start_task(self, server: ServerProcess, text: str) -> dict[str, Any]:
        """A task started on `server` without waiting for its turn (`returnImmediately`)."""
        return self.client(server).send(text, configuration={"returnImmediately": True})

    def close(self) -> None:
        for c in self.clients:
            c.close()
        # Stop all replicas together: none should take over another's turn during teardown.
        with ThreadPoolExecutor(max_workers=max(1, len(self.servers))) as pool:
            list(pool.map(lambda s: s.stop(), self.servers))
        for s in self.servers:
            s.cleanup()

    def tool_runs(self, tag: str) -> tuple[list[str], list[str]]:
        """(pids that started `slow_tool` with this tag, pids that finished it)."""
        try:
            lines = self.tool_log.read_text().splitlines()
        except FileNotFoundError:
            return [], []
        starts = [ln.split()[2] for ln in lines if ln.startswith("start ") and ln.split()[1] == tag]
        ends = [ln.split()[2] for ln in lines if ln.startswith("end ") and ln.split()[1] == tag]
        return starts, ends


def wait_ready(server: ServerProcess, timeout: float = 60.0) -> None:
    """Until /readyz says 200: Redis answers and the model adapter (LiteLLM) is loaded, so the
    first turn does not spend seconds importing it (timing-sensitive tests depend on this)."""
    deadline = time.monotonic() + timeout
    last = None
    with httpx.Client(trust_env=False, timeout=2) as http:
        while time.monotonic() < deadline:
            try:
                r = http.get(server.url + "/readyz")
                if r.status_code == 200:
                    return
                last = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.1)
    raise AssertionError(f"{server.url} not ready after {timeout}s ({last})\n{server.logs()}")


def lease_holder(redis_client: Any, prefix: str, task_id: str) -> str | None:
    """Who holds the (anonymous) task's turn lease, as Redis has it: `<name>-<pid>-<n>`."""
    raw = redis_client.hget(RedisKeys(prefix).lease(ANONYMOUS, task_id), "holder")
    return raw.decode() if raw is not None else None


def wait_for_holder(
    redis_client: Any, prefix: str, task_id: str, server: ServerProcess, timeout: float
) -> float:
    """Until `server`'s process holds the task's lease; the moment it was seen (monotonic)."""
    assert server.proc is not None
    deadline = time.monotonic() + timeout
    while True:
        holder = lease_holder(redis_client, prefix, task_id)
        if holder is not None and f"-{server.proc.pid}-" in holder:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"lease of {task_id} held by {holder!r}, not pid {server.proc.pid}, after {timeout}s"
            )
        time.sleep(0.05)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Until `predicate()` holds; the moment it did (monotonic)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic()


def kill9(server: ServerProcess) -> None:
    """SIGKILL the replica (no shutdown code runs) and reap it."""
    assert server.proc is not None and server.proc.poll() is None, "replica is not running"
    os.killpg(server.proc.pid, signal.SIGKILL)  # own session: the group is just this server
    server.proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------------
# SSE with headers, in the foreground or in a thread
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def open_sse(
    base_url: str,
    path: str,
    body: Any,
    *,
    headers: dict[str, str] | None = None,
    request_id: Any = None,
    read_timeout: float = 20.0,
) -> Iterator[SSEStream]:
    """POST `body` to `path` asking for SSE (JSON-RPC at "/", or a REST route)."""
    h = {**A2A_HEADERS, "Accept": "text/event-stream", **(headers or {})}
    with (
        httpx.Client(trust_env=False) as http,
        http.stream(
            "POST",
            base_url.rstrip("/") + path,
            json=body,
            headers=h,
            timeout=httpx.Timeout(read_timeout, connect=5),
        ) as resp,
    ):
        s = SSEStream(resp, request_id)
        try:
            yield s
        finally:
            s.close()


def rpc_body(method: str, params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


class BackgroundStream:
    """Reads one SSE stream to its end in a thread; the test waits on what it has seen."""

    def __init__(self, opener: Callable[[], contextlib.AbstractContextManager[SSEStream]]) -> None:
        self._opener = opener
        self.events: list[SSEEvent] = []
        self.error: BaseException | None = None
        self.status_code: int | None = None
        self.is_sse: bool | None = None
        self.body: bytes | None = None
        self.done = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> BackgroundStream:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with self._opener() as s:
                self.status_code, self.is_sse = s.status_code, s.is_sse
                if not s.is_sse:
                    self.body = s.response.read()
                    return
                for ev in s.sse_events():
                    with self._cond:
                        self.events.append(ev)
                        self._cond.notify_all()
        except BaseException as exc:  # reported by join()/wait_for()
            self.error = exc
        finally:
            self.done.set()
            with self._cond:
                self._cond.notify_all()

    def snapshot(self) -> list[SSEEvent]:
        with self._cond:
            return list(self.events)

    def wait_for(
        self, predicate: Callable[[SSEEvent], bool], timeout: float, what: str
    ) -> SSEEvent:
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for ev in self.events[seen:]:
                    if predicate(ev):
                        return ev
                seen = len(self.events)
                if self.done.is_set():
                    raise AssertionError(
                        f"stream ended (error={self.error!r}, HTTP {self.status_code},"
                        f" body={self.body!r}) before {what}; saw {describe_events(self.events)}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no {what} within {timeout}s; saw {describe_events(self.events)}"
                    )
                self._cond.wait(left)

    def join(self, timeout: float) -> list[SSEEvent]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), (
            f"stream still open after {timeout}s; saw {describe_events(self.snapshot())}"
        )
        if self.error is not None:
            raise AssertionError(f"stream reader failed: {self.error!r}") from self.error
        assert self.is_sse, f"not an SSE answer: HTTP {self.status_code}: {self.body!r}"
        return self.snapshot()


def stream_in_background(
    url: str, method: str, params: Any, request_id: str, *, read_timeout: float = 20.0
) -> BackgroundStream:
    """A JSON-RPC stream (`SendStreamingMessage`, `SubscribeToTask`) read in a thread, started."""
    body = rpc_body(method, params, request_id)
    return BackgroundStream(
        lambda: open_sse(url, "/", body, request_id=request_id, read_timeout=read_timeout)
    ).start()


class BlockingSend(threading.Thread):
    """One blocking SendMessage in a thread; keeps the response (or the error)."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(trust_env=False, timeout=30) as http:
                self.response = http.post(self.url, json=self.body, headers=A2A_HEADERS)
        except BaseException as exc:
            self.error = exc

    def task(self) -> dict[str, Any]:
        self.join(30)
        assert self.error is None and self.response is not None, f"no answer: {self.error!r}"
        r = self.response
        assert r.status_code == 200, f"HTTP {r.status_code}: {r.text[:500]}"
        assert r.headers["content-type"].startswith("application/json"), r.text[:500]
        body = r.json()
        if "jsonrpc" in body:
            assert "result" in body, body
            body = body["result"]
        return body["task"]


# ---------------------------------------------------------------------------------------------
# Stream checks
# ---------------------------------------------------------------------------------------------


def result_of(ev: SSEEvent) -> dict[str, Any]:
    """The StreamResponse of an event: JSON-RPC `result`, or the REST event's data itself."""
    d = ev.data
    if isinstance(d, dict) and "jsonrpc" in d:
        assert "result" in d, f"error event in stream: {ev.raw}"
        return d["result"]
    assert isinstance(d, dict) and len(d) == 1, f"unexpected REST event: {ev.raw}"
    return d


def state_of_event(ev: SSEEvent) -> str | None:
    r = result_of(ev)
    k = kind_of(r)
    if k in ("task", "statusUpdate"):
        return r[k]["status"]["state"]
    return None


def status_text(ev: SSEEvent) -> str:
    r = result_of(ev)
    k = kind_of(r)
    if k not in ("task", "statusUpdate"):
        return ""
    msg = r[k]["status"].get("message") or {}
    return "".join(p.get("text", "") for p in msg.get("parts", []))


def ids(events: list[SSEEvent]) -> list[int]:
    out = []
    for ev in events:
        assert ev.id is not None and ev.id.isdigit(), f"SSE event without a numeric id: {ev.raw}"
        out.append(int(ev.id))
    return out


def assert_contiguous(numbers: list[int], what: str) -> None:
    assert numbers, f"{what}: no events"
    want = list(range(numbers[0], numbers[0] + len(numbers)))
    assert numbers == want, f"{what}: ids not contiguous/unique: {numbers}"


def rebuild_answer(events: list[SSEEvent], start: str = "") -> str:
    """The answer artifact as a client builds it: append=false replaces, append=true extends."""
    text = start
    for ev in events:
        r = result_of(ev)
        if kind_of(r) != "artifactUpdate":
            continue
        a = r["artifactUpdate"]
        piece = "".join(p.get("text", "") for p in a["artifact"]["parts"])
        text = text + piece if a.get("append") else piece
    return text


def chunk_texts(events: list[SSEEvent]) -> list[str]:
    out = []
    for ev in events:
        r = result_of(ev)
        if kind_of(r) == "artifactUpdate":
            out.append("".join(p.get("text", "") for p in r["artifactUpdate"]["artifact"]["parts"]))
    return out


def describe_events(events: list[SSEEvent]) -> str:
    lines = []
    for ev in events:
        try:
            r = result_of(ev)
        except AssertionError:
            lines.append(f"[{ev.id}] {ev.raw[:200]}")
            continue
        k = kind_of(r)
        if k == "artifactUpdate":
            a = r[k]
            t = "".join(p.get("text", "") for p in a["artifact"]["parts"])
            lines.append(
                f"[{ev.id}] artifact(append={a.get('append')}, last={a.get('lastChunk')}, {t!r})"
            )
        elif k in ("task", "statusUpdate"):
            lines.append(f"[{ev.id}] {k}({r[k]['status']['state']}, {status_text(ev)!r})")
        else:
            lines.append(f"[{ev.id}] {k}")
    return "\n  " + "\n  ".join(lines)


def task_text(task: dict[str, Any]) -> str:
    return "".join(
        p.get("text", "") for a in task.get("artifacts") or [] for p in a.get("parts") or []
    )


__all__ = [
    "REDIS_URL",
    "ROOT",
    "BackgroundStream",
    "BlockingSend",
    "Cluster",
    "RedisServer",
    "assert_contiguous",
    "chunk_texts",
    "connect",
    "delete_prefix",
    "describe_events",
    "ids",
    "keys_with_prefix",
    "kill9",
    "lease_holder",
    "open_sse",
    "rebuild_answer",
    "result_of",
    "rpc_body",
    "state_of_event",
    "status_text",
    "stream_in_background",
    "task_text",
    "wait_for_holder",
    "wait_until",
]
