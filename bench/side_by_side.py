"""Issue 16's bench, one command: our `a2a-server` (the scripted model, in memory and on Redis)
beside the official `a2a-sdk` server with an executor that emits the same events
(bench/reference_server.py), in the same run, driven by the same load generators (wrk for
request/response, bench/loadgen.py's asyncio client for streams). Prints metric, ours, reference,
ratio; each figure the median of --runs runs, each scenario run on every server in turn (the
servers side by side), and each ratio the median of the runs' own ratios.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/side_by_side.py [--seconds 5]
        [--runs 3] [--idle 1000 10000] [--quick]

Needs wrk (`apt-get install wrk`) and redis-server on PATH (a private one on a free port).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHUNKS = 20
# The load scenarios run ours as a user starts it: its defaults (INFO logs, A2A_MAX_RUNNING_TURNS
# 256, A2A_MEMORY_MAX_TASKS 10,000 with ended tasks dropped to make room), only the scripted model
# set. The idle-stream scenarios hold 10,000 streams, the default limit of one replica: for them
# the limits are raised (the reference has none). Streams on 10,000 tasks are 10,000 running
# turns (each waits for its model).
MANY_TURNS = {"A2A_MAX_RUNNING_TURNS": "20000", "A2A_MAX_TURNS_PER_PRINCIPAL": "20000"}
OUR_LIMITS = {
    "A2A_MAX_RUNNING_TURNS": "4096",
    "A2A_MAX_TURNS_PER_PRINCIPAL": "4096",
    "A2A_MAX_STREAMS": "20000",
    "A2A_MAX_STREAMS_PER_PRINCIPAL": "20000",
    "A2A_MAX_CONNECTIONS": "20000",
    "A2A_MEMORY_MAX_TASKS": "1000000",
    "LOG_LEVEL": "warning",
}


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


@contextmanager
def server(command: list[str], env: dict[str, str]) -> Iterator[tuple[str, int, float]]:
    """Start a server; yield (url, pid, seconds from spawn to its first answered SendMessage)."""
    port = loadgen.free_port()
    base = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    began = time.monotonic()
    proc = subprocess.Popen(
        [*command, "--port", str(port)], env={**base, **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = began + 60
        while True:
            try:
                send(url, loadgen.send_params(configuration={"returnImmediately": True}))
                break
            except (httpx.HTTPError, RuntimeError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{command} did not start") from None
                time.sleep(0.02)
        yield url, proc.pid, time.monotonic() - began
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def load_scenarios(seconds: float) -> list[Callable[[str], dict[str, float]]]:
    """The load scenarios, each a measure of one server (its URL) for `seconds`: run one after
    the other on every server, so that the figures compared were taken a few seconds apart."""
    completed = loadgen.send_params()

    def send_message(concurrency: int) -> Callable[[str], dict[str, float]]:
        def measure(url: str) -> dict[str, float]:
            rate = loadgen.wrk(url, method="SendMessage", params=completed,
                               expect="TASK_STATE_COMPLETED", concurrency=concurrency,
                               seconds=seconds)  # fmt: skip
            name = f"SendMessage c={concurrency}"
            return {f"{name} req/s": rate.per_s, f"{name} p50 ms": rate.p50_ms,
                    f"{name} p99 ms": rate.p99_ms, f"{name} failures": rate.failures}  # fmt: skip

        return measure

    def stream(concurrency: int) -> Callable[[str], dict[str, float]]:
        def measure(url: str) -> dict[str, float]:
            streamed = asyncio.run(loadgen.streams(url, concurrency=concurrency, seconds=seconds))
            first = streamed.first_event_s
            name = f"stream c={concurrency}"
            return {
                f"{name} events/s": streamed.events_per_s,
                f"{name} first event p50 ms": percentile(first, 0.5) * 1000,
                f"{name} first event p99 ms": percentile(first, 0.99) * 1000,
                f"{name} failures": streamed.failures,
            }

        return measure

    def get_task(url: str) -> dict[str, float]:
        task_id = send(url, completed)["task"]["id"]  # type: ignore[index]
        rate = loadgen.wrk(url, method="GetTask", params={"id": task_id}, expect=task_id,
                           concurrency=16, seconds=seconds)  # fmt: skip
        return {"GetTask c=16 req/s": rate.per_s, "GetTask c=16 p99 ms": rate.p99_ms}

    return [*(send_message(c) for c in (1, 16, 64)), *(stream(c) for c in (1, 32)), get_task]


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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs if name in run) for name in runs[0]}


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--history", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s, 1000 idle streams")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.idle, args.history = 1, 2, [1000], [10, 1000]
    scripted = {"SCRIPTED_CHUNKS": str(CHUNKS), "SCRIPTED_DELAY_MS": "0"}
    idle = {"SCRIPTED_CHUNKS": "1", "SCRIPTED_DELAY_MS": "3600000"}  # a turn that stays working
    ours = [str(BIN / "a2a-server")]
    reference = [sys.executable, str(ROOT / "bench" / "reference_server.py")]
    runs: dict[str, list[dict[str, float]]] = {"memory": [], "redis": [], "reference": []}
    with loadgen.private_redis() as redis_url:
        on_redis = {"REDIS_URL": redis_url, "LEASE_TTL_S": "600"}
        targets = {
            "memory": (ours, {**scripted, "LLM_MODEL": "scripted"}),
            "redis": (ours, {**scripted, "LLM_MODEL": "scripted", **on_redis}),
            "reference": (reference, scripted),
        }
        for run in range(args.runs):
            figures = load_run(targets, run, args)
            for name, (command, env) in targets.items():
                env = {**env, "REDIS_KEY_PREFIX": f"bench-{run}-{name}-idle"}
                with server(command, {**env, **OUR_LIMITS, **idle}) as (url, pid, _):
                    figures[name] |= measure_idle_streams(url, pid, args.idle, bare=False)
                with server(command, {**env, **OUR_LIMITS, **idle, **MANY_TURNS}) as (url, pid, _):
                    figures[name] |= measure_idle_streams(
                        url, pid, args.idle, bare=False, many_tasks=True
                    )
                runs[name].append(figures[name])
                print(f"run {run + 1} {name}: {json.dumps(figures[name])}", file=sys.stderr)
            bare = [sys.executable, str(ROOT / "bench" / "bare_asgi.py")]
            with bare_server(bare) as (url, pid):
                runs.setdefault("bare ASGI", []).append(
                    measure_idle_streams(url, pid, args.idle, bare=True)
                )
    result = {name: median_of(figures) for name, figures in runs.items() if figures}
    ratios = paired_ratios(runs["memory"], runs["reference"])
    result["redis costs"] = redis_costs()
    print_table(result, ratios)
    print(json.dumps(result | {"ratios": ratios}))


def load_run(
    targets: dict[str, tuple[list[str], dict[str, str]]], run: int, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """One run of the load scenarios: the servers started one after the other (each startup
    timed alone), then every scenario on each server in turn, the order rotating from run to
    run. A scenario's figures for ours and for the reference are taken seconds apart, not
    minutes: the machine's speed, which drifts by a quarter over minutes here, moves both."""
    figures: dict[str, dict[str, float]] = {}
    urls: dict[str, str] = {}
    with ExitStack() as servers:
        for name, (command, env) in targets.items():
            env = {**env, "REDIS_KEY_PREFIX": f"bench-{run}-{name}"}
            url, _, startup_s = servers.enter_context(server(command, env))
            urls[name], figures[name] = url, {"startup to first answer, s": startup_s}
        names = list(targets)
        order = names[run % len(names) :] + names[: run % len(names)]
        for scenario in load_scenarios(args.seconds):
            for name in order:
                figures[name] |= scenario(urls[name])
        for name in names:
            if name != "reference":
                figures[name] |= measure_history(urls[name], args.history)
    return figures


def paired_ratios(
    ours: list[dict[str, float]], reference: list[dict[str, float]]
) -> dict[str, float]:
    """Each metric's ratio ours / reference within each run (figures taken seconds apart), the
    median over the runs."""
    return {
        metric: statistics.median(mine[metric] / theirs[metric] for mine, theirs in pairs)
        for metric in ours[0]
        if (pairs := [(m, t) for m, t in zip(ours, reference, strict=True) if t.get(metric)])
    }


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


def print_table(result: dict[str, dict[str, float]], ratios: dict[str, float]) -> None:
    """Medians of the runs; the ratio is the median of each run's ratio (not the medians')."""
    memory, redis, reference = result["memory"], result["redis"], result["reference"]
    print("| metric | ours (memory) | ours (redis) | reference | memory / reference |")
    print("|---|---|---|---|---|")
    for metric, value in memory.items():
        ref = reference.get(metric)
        ratio = f"{ratios[metric]:.2f}" if metric in ratios else ""
        cells = [fmt(value), fmt(redis.get(metric)), fmt(ref), ratio]
        print(f"| {metric} | {' | '.join(cells)} |")
    for metric, value in result.get("bare ASGI", {}).items():
        print(f"| {metric} (bare ASGI) | | | {fmt(value)} | |")
    for metric, value in result["redis costs"].items():
        print(f"| {metric} | | {fmt(value)} | | |")


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


if __name__ == "__main__":
    main()
