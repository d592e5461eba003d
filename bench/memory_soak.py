"""Issue 44: a replica's memory over tens of thousands of tasks, in memory and on Redis.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/memory_soak.py [--tasks 20000]
        [--clients 8] [--stores memory redis] [--model demo|scripted] [--max-tasks N]

Starts a real `a2a-server` (as a user does: its defaults, INFO logs, the offline demo model or
the scripted one, so no network) once with the in-memory stores (`A2A_MEMORY_MAX_TASKS` bounding
them) and once on the local Redis (127.0.0.1:6379, a key prefix of its own, deleted afterwards),
drives `--tasks` tasks through it with a few concurrent JSON-RPC clients (httpx) and reads the
server's VmRSS after 5%, 25%, 50%, 75% and 100% of them (1,000 ... 20,000 by default): at each
mark the clients pause, the server is left alone `--settle` seconds and is measured as it is (no
collection forced from outside). The mix: blocking sends and streamed sends (read to the end),
new contexts and continued ones (a context takes up to `--context-turns` turns), some sends that
return at once and are polled with GetTask, some with a push config (a webhook in this process),
GetTask and ListTasks between them. Prints the table and RSS(20k)/RSS(5k) per store; exits 1 if
a ratio exceeds `--limit` (1.25) or a request failed.

`--tracemalloc DIR`: the server also traces its allocations (soak_tracemalloc/sitecustomize.py),
writes a snapshot at each mark, and the bench prints the sites that grew most from the second
mark to the last (where the memory went; the RSS figures of such a run are not the product's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MARKS = (0.05, 0.25, 0.5, 0.75, 1.0)
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}
_SCRUB = ("A2A_", "LLM_", "AGENT_", "REDIS_", "SCRIPTED_", "OPENAI_", "LITELLM_", "LOG_", "TASK_")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@contextmanager
def server(env: dict[str, str], log: Path) -> Iterator[tuple[str, int]]:
    """`a2a-server` on a free loopback port (its logs to `log`); yields its URL and pid."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    base |= {"PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [str(BIN / "a2a-server"), "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=base | env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "readyz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@dataclass
class Soak:
    """What the clients share: the mix's random draws, the contexts free to continue, the tasks
    to read back, and the counts."""

    url: str
    webhook: str
    rng: random.Random = field(default_factory=lambda: random.Random(44))
    contexts: deque[tuple[str, int]] = field(default_factory=deque)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=500))
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    list_share: float = 0.03
    continue_share: float = 0.4  # of sends, in a context free to continue (if there is one)
    context_turns: int = 5  # a context takes this many turns at most, then it is left alone

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def _body(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:8], "method": method, "params": params}


async def _call(client: httpx.AsyncClient, soak: Soak, method: str, params: dict[str, object]
                ) -> dict[str, object] | None:  # fmt: skip
    """The call's result; None (and a failure noted) for an error, but "task not found", which
    a task the in-memory store dropped to make room gets."""
    reply = (await client.post(soak.url, json=_body(method, params))).json()
    if "result" in reply:
        return reply["result"]  # type: ignore[no-any-return]
    if reply.get("error", {}).get("code") == -32001:
        soak.count(f"{method} not found")
    else:
        soak.failures.append(f"{method}: {json.dumps(reply)[:300]}")
    return None


async def one_task(client: httpx.AsyncClient, soak: Soak) -> None:
    """One task of the mix, and maybe a GetTask and a ListTasks after it."""
    rng = soak.rng
    message: dict[str, object] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": f"soak message {rng.randrange(10**6)} " + "word " * rng.randrange(4)}],
    }
    context, turns = (None, 0)
    if soak.contexts and rng.random() < soak.continue_share:
        context, turns = soak.contexts.popleft()
        message["contextId"] = context
    params: dict[str, object] = {"message": message}
    configuration: dict[str, object] = {}
    if rng.random() < 0.03:
        configuration["taskPushNotificationConfig"] = {"url": soak.webhook, "token": "soak"}
    params["configuration"] = configuration
    draw = rng.random()
    if draw < 0.25:
        kind, (state, context) = "stream", await _stream(client, soak, params)
    elif draw < 0.30:
        configuration["returnImmediately"] = True
        kind, (state, context) = "send+poll", await _send_and_poll(client, soak, params)
    else:
        kind = "send"
        task = (await _call(client, soak, "SendMessage", params) or {}).get("task") or {}
        state, context = task.get("status", {}).get("state"), task.get("contextId")
        if task:
            soak.recent.append(task["id"])
    soak.count(kind)
    if state != "TASK_STATE_COMPLETED":
        soak.failures.append(f"{kind}: ended {state}")
    if context and turns + 1 < soak.context_turns:
        soak.contexts.append((context, turns + 1))
    if soak.recent and rng.random() < 0.10:
        soak.count("GetTask")
        await _call(client, soak, "GetTask", {"id": rng.choice(soak.recent), "historyLength": 2})
    if rng.random() < soak.list_share:
        soak.count("ListTasks")
        listing: dict[str, object] = {"pageSize": 20}
        if context and rng.random() < 0.5:
            listing["contextId"] = context
        await _call(client, soak, "ListTasks", listing)


async def _stream(client: httpx.AsyncClient, soak: Soak, params: dict[str, object]
                  ) -> tuple[str | None, str | None]:  # fmt: skip
    """SendStreamingMessage read to its end: the last state and the context."""
    state = context = None
    body = _body("SendStreamingMessage", params)
    async with client.stream("POST", soak.url, json=body,
                             headers={"Accept": "text/event-stream"}) as response:  # fmt: skip
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line[5:]).get("result", {})
            found = result.get("task") or result.get("statusUpdate") or {}
            state = found.get("status", {}).get("state", state)
            context = found.get("contextId", context)
            if "task" in result:
                soak.recent.append(result["task"]["id"])
    return state, context


async def _send_and_poll(client: httpx.AsyncClient, soak: Soak, params: dict[str, object]
                         ) -> tuple[str | None, str | None]:  # fmt: skip
    """SendMessage that returns at once, then GetTask until the task ends."""
    result = await _call(client, soak, "SendMessage", params)
    task = (result or {}).get("task") or {}
    while task and task.get("status", {}).get("state") not in TERMINAL:
        await asyncio.sleep(0.02)
        task = await _call(client, soak, "GetTask", {"id": task["id"]}) or {}
    if task:
        soak.recent.append(task["id"])
    return task.get("status", {}).get("state"), task.get("contextId")


async def drive(soak: Soak, tasks: int, clients: int) -> None:
    """`tasks` more tasks through `clients` concurrent clients; returns when all have ended."""
    left = tasks

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one_task(client, soak)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers, trust_env=False) as c:
        await asyncio.gather(*(client_loop(c) for _ in range(clients)))


async def _webhook_sink() -> tuple[asyncio.Server, str]:
    """A webhook that answers every POST with 204 (push deliveries have somewhere to go)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()

    sink = await asyncio.start_server(answer, "127.0.0.1", 0)
    return sink, f"http://127.0.0.1:{sink.sockets[0].getsockname()[1]}/hook"


async def soak_one(store: str, env: dict[str, str], args: argparse.Namespace
                   ) -> list[tuple[int, int, float]]:  # fmt: skip
    """One server: (tasks done, RSS KiB, tasks/s of the stretch before) at each mark."""
    sink, webhook = await _webhook_sink()
    rows: list[tuple[int, int, float]] = []
    marks = [max(1, round(args.tasks * mark)) for mark in MARKS]
    folder = tempfile.TemporaryDirectory()
    with folder, server(env, Path(folder.name) / "server.log") as (url, pid):
        soak = Soak(
            url,
            webhook,
            list_share=args.list_share,
            continue_share=args.continue_share,
            context_turns=args.context_turns,
        )
        done = 0
        for mark in marks:
            began = time.monotonic()
            await drive(soak, mark - done, args.clients)
            rate = (mark - done) / (time.monotonic() - began)
            done = mark
            await asyncio.sleep(args.settle)
            if args.tracemalloc:
                os.kill(pid, signal.SIGUSR1)  # the snapshot is written before the next mark
                await asyncio.sleep(5)
            rows.append((done, rss_kib(pid), rate))
            print(f"{store}: {done} tasks, RSS {rows[-1][1] / 1024:.1f} MiB, {rate:.0f} tasks/s,"
                  f" failures {len(soak.failures)}", file=sys.stderr, flush=True)  # fmt: skip
        print(f"{store}: {json.dumps(soak.counts)}", file=sys.stderr)
        if soak.failures:
            print(f"{store}: {len(soak.failures)} failures, e.g. {soak.failures[:3]}",
                  file=sys.stderr)  # fmt: skip
            args.failed = True
    sink.close()
    return rows


def delete_keys(redis_url: str, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])
    client.close()
    return len(keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--stores", nargs="+", default=["memory", "redis"])
    parser.add_argument("--model", choices=["demo", "scripted"], default="scripted")
    parser.add_argument(
        "--max-tasks", type=int, default=None, help="A2A_MEMORY_MAX_TASKS (unset: the default)"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--limit", type=float, default=1.25)
    parser.add_argument("--list-share", type=float, default=0.03, help="of tasks, ListTasks after")
    parser.add_argument("--continue-share", type=float, default=0.4, help="of sends")
    parser.add_argument("--context-turns", type=int, default=5, help="turns a context takes")
    parser.add_argument("--tracemalloc", type=Path, help="a folder for the server's snapshots")
    args = parser.parse_args()
    args.failed = False
    # Stopped from outside: the server is still stopped and the Redis keys still deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    common = {"A2A_PUSH_ALLOWED_HOSTS": "127.0.0.1"}
    if args.model == "scripted":
        common |= {"LLM_MODEL": "scripted", "SCRIPTED_CHUNKS": "20"}
    results: dict[str, list[tuple[int, int, float]]] = {}
    for store in args.stores:
        env = dict(common)
        if args.tracemalloc:
            folder = args.tracemalloc / store
            folder.mkdir(parents=True, exist_ok=True)
            env |= {"PYTHONPATH": f"{ROOT / 'bench' / 'soak_tracemalloc'}:{ROOT}",
                    "SOAK_TRACEMALLOC_DIR": str(folder)}  # fmt: skip
        if store == "memory":
            if args.max_tasks is not None:
                env["A2A_MEMORY_MAX_TASKS"] = str(args.max_tasks)
            results[store] = asyncio.run(soak_one(store, env, args))
        else:
            prefix = f"soak-{uuid.uuid4().hex[:8]}"
            env |= {"REDIS_URL": args.redis_url, "REDIS_KEY_PREFIX": prefix}
            try:
                results[store] = asyncio.run(soak_one(store, env, args))
            finally:
                print(f"redis: deleted {delete_keys(args.redis_url, prefix)} keys of {prefix!r}",
                      file=sys.stderr)  # fmt: skip
        if args.tracemalloc:
            print_growth(args.tracemalloc / store)
    print_table(results, args)


def print_growth(folder: Path, top: int = 15) -> None:
    import tracemalloc

    snapshots = sorted(folder.glob("snapshot-*.pickle"))
    if len(snapshots) < 2:
        return
    first, last = (tracemalloc.Snapshot.load(str(path)) for path in (snapshots[1], snapshots[-1]))
    print(f"growth {snapshots[1].name} -> {snapshots[-1].name}:")
    for stat in last.compare_to(first, "lineno")[:top]:
        print(f"  {stat}")


def print_table(results: dict[str, list[tuple[int, int, float]]], args: argparse.Namespace) -> None:
    stores = list(results)
    print(
        f"\nmodel {args.model}, {args.clients} clients,"
        f" A2A_MEMORY_MAX_TASKS={args.max_tasks or 'default'},"
        f" continued {args.continue_share:.0%} (up to {args.context_turns} turns a context)\n"
    )
    print("| tasks | " + " | ".join(f"{s} RSS MiB | {s} tasks/s" for s in stores) + " |")
    print("|---:|" + "---:|---:|" * len(stores))
    for i, (done, *_rest) in enumerate(results[stores[0]]):
        cells = " | ".join(f"{results[s][i][1] / 1024:.1f} | {results[s][i][2]:.0f}"
                           for s in stores)  # fmt: skip
        print(f"| {done:,} | {cells} |")
    over = False
    for store, rows in results.items():
        ratio = rows[-1][1] / rows[1][1]
        over |= ratio > args.limit
        print(f"{store}: RSS({rows[-1][0]:,}) / RSS({rows[1][0]:,}) = {ratio:.3f}"
              f" ({'over' if ratio > args.limit else 'within'} {args.limit})")  # fmt: skip
    sys.exit(1 if over or args.failed else 0)


if __name__ == "__main__":
    main()
