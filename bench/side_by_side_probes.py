"""The side-by-side bench's probes beyond the load scenarios: memory per idle stream, turn start
in long conversations, the Redis backend's commands and round trips (bench/redis_commands.py),
and the one-request helper they share with bench/side_by_side.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen

ROOT = Path(__file__).resolve().parents[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def send(
    url: str,
    params: dict[str, object],
    method: str = "SendMessage",
    client: httpx.Client | None = None,
) -> dict[str, object]:
    """One request; pass a `client` for many (a client of its own costs ~20 ms to make)."""
    body = loadgen.rpc_body(method, params)
    post = client.post if client is not None else httpx.post
    reply = post(url, content=body, headers={"A2A-Version": "1.0",
                 "Content-Type": "application/json"}, timeout=60).json()  # fmt: skip
    if "result" not in reply:
        raise RuntimeError(f"{method} failed: {reply}")
    return reply["result"]


def measure_idle_streams(
    url: str, pid: int, counts: list[int], *, bare: bool, many_tasks: bool = False
) -> dict[str, float]:
    """Memory per idle open stream: RSS growth over `count` streams, per stream, in KiB. The
    streams subscribe to one task that stays working, or (`many_tasks`) each one is a streaming
    send of its own, on a task of its own (the turns stay working)."""
    figures: dict[str, float] = {}
    task_id: str | None = "none"
    if many_tasks:
        task_id = None
    elif not bare:
        started = send(url, loadgen.send_params(configuration={"returnImmediately": True}))
        task_id = started["task"]["id"]  # type: ignore[index]
    label = "idle streams on as many tasks" if many_tasks else "idle streams"
    for count in counts:

        async def hold(count: int = count) -> tuple[int, int, int]:
            opened, release = asyncio.Event(), asyncio.Event()
            before = rss_kib(pid)
            holder = asyncio.create_task(
                loadgen.hold_idle_streams(
                    url, count=count, task_id=task_id, opened=opened, release=release
                )
            )
            await opened.wait()
            await asyncio.sleep(2)  # let the server settle (buffers, lazy allocations)
            after = rss_kib(pid)
            release.set()
            failures = await holder
            await asyncio.sleep(2)
            return before, after, failures

        before, after, failures = asyncio.run(hold())
        figures[f"{label} {count}: KiB per stream"] = (after - before) / count
        figures[f"{label} {count}: failures"] = failures
    return figures


def measure_history(url: str, sizes: list[int], probes: int = 10) -> dict[str, float]:
    """Turn start (to the first answer chunk of a streamed send) in a conversation holding
    `size` messages, for each size: median of `probes`. One conversation per size, probed in
    turn (a round visits every size), so that the machine's speed drifting over the minute this
    takes moves every size alike instead of showing as a cost of the longer history."""
    contexts = {size: f"history-{size}-{time.monotonic_ns()}" for size in sizes}
    with httpx.Client() as client:
        for size, context in contexts.items():
            for _ in range(size // 2):  # each turn adds the user's message and the answer
                send(url, in_context(context), client=client)
    took: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(probes):
        for size, context in contexts.items():
            took[size].append(asyncio.run(first_chunk_s(url, context)))
    return {
        f"turn start, {size} messages of history, ms": statistics.median(took[size]) * 1000
        for size in sizes
    }


def in_context(context: str) -> dict[str, object]:
    params = loadgen.send_params()
    params["message"]["contextId"] = context  # type: ignore[index]
    return params


async def first_chunk_s(url: str, context: str) -> float:
    params = in_context(context)
    reader, writer = await loadgen._connect(url)
    try:
        began = time.monotonic()
        writer.write(loadgen._request(url, loadgen.rpc_body("SendStreamingMessage", params)))
        received, first = b"", None
        while not received.endswith(loadgen._END_OF_CHUNKED):
            chunk = await reader.read(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            received += chunk
            if first is None and b"artifactUpdate" in received:
                first = time.monotonic() - began
        if first is None:
            raise RuntimeError(received[:300])
        return first
    finally:
        writer.close()


def redis_costs() -> dict[str, float]:
    """Redis commands and round trips per turn and per chunk (bench/redis_commands.py)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [sys.executable, str(ROOT / "bench" / "redis_commands.py"), "--chunks", "20", "220",
             "--turns", "3", "--chunk-delay", "0.002", "--json", out.name],
            check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        rows = json.loads(Path(out.name).read_text())
    figures: dict[str, float] = {}
    for mode in ("writer", "stream"):
        short, long = (next(r for r in rows if r["row"] == f"server/{mode}" and r["chunks"] == k)
                       for k in (20, 220))  # fmt: skip
        figures[f"Redis {mode}: commands per turn (20 chunks)"] = short["client"]
        figures[f"Redis {mode}: round trips per turn (20 chunks)"] = short["round_trips"]
        figures[f"Redis {mode}: round trips per extra chunk"] = (
            long["round_trips"] - short["round_trips"]
        ) / 200
        figures[f"Redis {mode}: bytes per extra chunk"] = (
            long["bytes_up"] - short["bytes_up"]
        ) / 200
    return figures


@contextmanager
def bare_server(command: list[str]) -> Iterator[tuple[str, int]]:
    port = loadgen.free_port()
    proc = subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        loadgen.wait_for_port(port, proc, timeout_s=10)
        yield f"http://127.0.0.1:{port}/", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)
