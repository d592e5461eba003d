"""Side by side: our `a2a-server` (scripted model; in memory and on Redis) and the official
`a2a-sdk` server (bench/reference_server.py, the same events), driven by the same async load
generator in this process, in the same run. Prints metric, ours, reference, ratio (medians of
--runs runs). A first cut of issue 16's bench: no wrk yet, and the load generator shares the
machine's cores with the servers, so absolute figures are low; the ratios are what to read.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/side_by_side.py \
        [--seconds 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEADERS = {"A2A-Version": "1.0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(command: list[str], env: dict[str, str], port: int) -> Iterator[str]:
    base = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        command, env={**base, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/.well-known/agent-card.json", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{command} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def send_body(method: str, **params: object) -> dict[str, object]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message, **params}}


async def closed_loop(url: str, concurrency: int, seconds: float, one) -> tuple[float, list[float]]:
    """`concurrency` workers each repeating `one(client)` for `seconds`: (count/s, latencies)."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60, headers=HEADERS) as c:
        stop = time.monotonic() + seconds

        async def worker() -> int:
            done = 0
            while time.monotonic() < stop:
                done += await one(c, latencies)
            return done

        counts = await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sum(counts) / seconds, latencies


async def one_send(client: httpx.AsyncClient, latencies: list[float]) -> int:
    began = time.monotonic()
    reply = (await client.post("/", json=send_body("SendMessage"))).json()
    state = reply.get("result", {}).get("task", {}).get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":  # e.g. refused at the admission limit: not counted
        return 0
    latencies.append(time.monotonic() - began)
    return 1


async def one_stream(client: httpx.AsyncClient, latencies: list[float]) -> int:
    """A streamed send read to its end: latencies hold the first event's; returns events."""
    began, events = time.monotonic(), 0
    async with client.stream("POST", "/", json=send_body("SendStreamingMessage")) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                if events == 0:
                    latencies.append(time.monotonic() - began)
                events += 1
    return events


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


async def measure(url: str, seconds: float) -> dict[str, float]:
    figures: dict[str, float] = {}
    for concurrency in (1, 16, 64):
        rate, latencies = await closed_loop(url, concurrency, seconds, one_send)
        figures[f"SendMessage c={concurrency} req/s"] = rate
        figures[f"SendMessage c={concurrency} p99 ms"] = percentile(latencies, 0.99) * 1000
    for concurrency in (1, 32):
        rate, latencies = await closed_loop(url, concurrency, seconds, one_stream)
        figures[f"stream c={concurrency} events/s"] = rate
        figures[f"stream c={concurrency} first event p50 ms"] = percentile(latencies, 0.5) * 1000
        figures[f"stream c={concurrency} first event p99 ms"] = percentile(latencies, 0.99) * 1000
    async with httpx.AsyncClient(base_url=url, headers=HEADERS) as client:
        reply = (await client.post("/", json=send_body("SendMessage"))).json()
    task_id = reply["result"]["task"]["id"]

    async def one_get(client: httpx.AsyncClient, latencies: list[float]) -> int:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        assert "result" in (await client.post("/", json=body)).json()
        return 1

    figures["GetTask c=16 req/s"], _ = await closed_loop(url, 16, seconds, one_get)
    return figures


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    scripted = {"SCRIPTED_CHUNKS": "20", "SCRIPTED_DELAY_MS": "0"}
    ours_env = {**scripted, "LLM_MODEL": "scripted", "LOG_LEVEL": "warning"}
    targets = {
        "ours (memory)": ([str(BIN / "a2a-server")], ours_env),
        "ours (redis)": (
            [str(BIN / "a2a-server")],
            {
                **ours_env,
                "REDIS_URL": args.redis_url,
                "REDIS_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:6]}",
            },
        ),
        "reference": ([sys.executable, str(ROOT / "bench" / "reference_server.py")], scripted),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for _ in range(args.runs):  # interleaved: each run measures every target once
        for name, (command, env) in targets.items():
            port = free_port()
            flags = ["--port", str(port)]
            with server([*command, *flags], env, port) as url:
                runs[name].append(asyncio.run(measure(url, args.seconds)))
    result = {name: median_of(figures) for name, figures in runs.items()}
    ours, redis, reference = result["ours (memory)"], result["ours (redis)"], result["reference"]
    print("| metric | ours (memory) | ours (redis) | reference | ratio (memory / reference) |")
    print("|---|---|---|---|---|")
    for metric in ours:
        ratio = ours[metric] / reference[metric] if reference[metric] else float("nan")
        cells = [f"{figures[metric]:.0f}" for figures in (ours, redis, reference)]
        print(f"| {metric} | {' | '.join(cells)} | {ratio:.2f} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
