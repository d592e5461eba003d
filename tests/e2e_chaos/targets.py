"""The servers under attack (`Target`), their logs, and reads that check what they hold.

A target is one in-memory server, or replicas sharing one Redis (then `view` reads Redis
directly). Checks are made through the wire (ListTasks, GetTask) wherever a client could make them,
and through Redis only for what no client can see (leases, journals, conversations).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.harness import A2A_HEADERS, INTERRUPTED_STATES, TERMINAL_STATES, ServerProcess
from tests.e2e_chaos.redis_view import RedisView
from tests.e2e_redis.support import REDIS_URL, Cluster, connect, delete_prefix

LIMIT_TURNS = 40
LIMIT_STREAMS = 150
# Every request of the suite comes from one principal (anonymous): the per-principal limits are
# set to the replica's, so the limits under test are the replica's own.
LIMITS_ENV = {
    "A2A_MAX_RUNNING_TURNS": str(LIMIT_TURNS),
    "A2A_MAX_STREAMS": str(LIMIT_STREAMS),
    "A2A_MAX_TURNS_PER_PRINCIPAL": str(LIMIT_TURNS),
    "A2A_MAX_STREAMS_PER_PRINCIPAL": str(LIMIT_STREAMS),
}
SETTLED_STATES = TERMINAL_STATES | INTERRUPTED_STATES


def new_prefix(name: str) -> str:
    return f"a2a-chaos-{name}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def memory_server(llm_url: str, env: dict[str, str] | None = None) -> Iterator[Target]:
    """One in-memory server, stopped afterwards."""
    server = ServerProcess(llm_url, env=env).start()
    try:
        yield Target("memory", [server])
    finally:
        server.cleanup()


@contextlib.contextmanager
def redis_replicas(
    llm_url: str,
    workdir: Path,
    *,
    name: str,
    env: dict[str, str] | None = None,
    replicas: int = 2,
    redis_url: str = REDIS_URL,
) -> Iterator[tuple[Target, Cluster]]:
    """Replicas sharing one Redis under a prefix of their own; afterwards every replica is
    resumed (a test may leave one SIGSTOPped), stopped, and the prefix's keys deleted."""
    prefix = new_prefix(name)
    client = connect(redis_url)
    cluster = Cluster(
        llm_url, redis_url=redis_url, prefix=prefix, tool_log=workdir / "tools.log", extra_env=env
    )
    try:
        cluster.spawn(replicas)
        yield Target("redis", cluster.servers, RedisView(client, prefix)), cluster
    finally:
        for server in cluster.servers:
            if server.proc is not None and server.proc.poll() is None:
                os.kill(server.proc.pid, signal.SIGCONT)
        cluster.close()
        with contextlib.suppress(Exception):  # a test may have killed this Redis
            delete_prefix(client, prefix)
        client.close()


@dataclass
class Target:
    store: str
    servers: list[ServerProcess]
    view: RedisView | None = None
    _marks: dict[Path, int] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def logs(self, limit: int = 3000) -> str:
        return "\n".join(f"===== {s.url} =====\n{s.logs(limit)}" for s in self.servers)

    # --- stderr: no tracebacks -----------------------------------------------------------------

    def mark_logs(self) -> None:
        """Remember where each server's stderr ends now (see `new_tracebacks`)."""
        for s in self.servers:
            self._marks[s.stderr_path] = s.log_mark()

    def new_tracebacks(self) -> list[str]:
        """Tracebacks the servers wrote to stderr since `mark_logs`, with some context."""
        found = []
        for s in self.servers:
            s.settle_log()
            text = s.log_since(self._marks.get(s.stderr_path, 0))
            at = text.find("Traceback")
            if at >= 0:
                found.append(f"{s.url}: {text[max(0, at - 300) : at + 1500]}")
        return found


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1
) -> Any:
    """Poll until `predicate()` is truthy; its value, or AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def wait_async(predicate: Callable[[], Any], within: float, interval: float = 0.05) -> bool:
    """Poll until `predicate()` is truthy or `within` seconds pass; whether it became true."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True


async def gather_within(coros: list[Awaitable[Any]], within: float, what: str) -> list[Any]:
    try:
        async with asyncio.timeout(within):
            return list(await asyncio.gather(*coros))
    except TimeoutError:
        raise AssertionError(f"{what}: requests still unanswered after {within}s") from None


# --- reads over the wire ----------------------------------------------------------------------


def rpc(http: httpx.Client, base: str, method: str, params: Any) -> dict[str, Any]:
    """One JSON-RPC call; the whole response object (the HTTP answer must be clean JSON)."""
    r = http.post(
        base + "/",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers=A2A_HEADERS,
    )
    assert r.status_code == 200 and "Traceback" not in r.text, (
        f"{method} on {base}: HTTP {r.status_code}: {r.text[:500]}"
    )
    body = r.json()
    assert isinstance(body, dict) and ("result" in body) != ("error" in body), body
    return body


def list_all_tasks(
    http: httpx.Client, base: str, context_id: str | None = None, max_pages: int = 30
) -> list[dict[str, Any]]:
    """Every task ListTasks shows (all pages), or AssertionError if a page fails."""
    tasks: list[dict[str, Any]] = []
    token = ""
    for _ in range(max_pages):
        params: dict[str, Any] = {"pageSize": 100}
        if token:
            params["pageToken"] = token
        if context_id:
            params["contextId"] = context_id
        body = rpc(http, base, "ListTasks", params)
        assert "result" in body, f"ListTasks on {base} failed: {body['error']}"
        tasks.extend(body["result"].get("tasks") or [])
        token = body["result"].get("nextPageToken") or ""
        if not token:
            return tasks
    raise AssertionError(f"ListTasks on {base}: more than {max_pages} pages")


def tasks_by_id(
    http: httpx.Client, base: str, keep: Callable[[dict[str, Any]], bool]
) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in list_all_tasks(http, base) if keep(t)}


def wait_settled(
    http: httpx.Client,
    base: str,
    task_ids: set[str],
    keep: Callable[[dict[str, Any]], bool],
    timeout: float,
) -> dict[str, dict[str, Any]]:
    """Poll ListTasks until every task of `task_ids` is terminal or waiting for input (or the
    deadline passes); the last view of the tasks `keep` selects."""
    deadline = time.monotonic() + timeout
    while True:
        seen = tasks_by_id(http, base, keep)
        unsettled = [
            t
            for t in task_ids
            if seen.get(t, {}).get("status", {}).get("state") not in SETTLED_STATES
        ]
        if not unsettled or time.monotonic() > deadline:
            return seen
        time.sleep(0.25)
