"""Issue 16's bench, one command: our `a2a-server` (the scripted model, in memory, on Redis, on
PostgreSQL and on SQLite) beside the official `a2a-sdk` server with an executor that emits the
same events (bench/reference_server.py; on its InMemoryTaskStore, and with `--references database`
on its DatabaseTaskStore on the same PostgreSQL), in the same run, driven by the same load
generators (wrk for request/response, bench/loadgen.py's asyncio client for streams). Prints
metric, each server's figure, and the ratios; each figure the median of --runs runs, each scenario
run on every server in turn (the servers side by side), and each ratio the median of the runs' own
ratios.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/side_by_side.py [--seconds 5]
        [--runs 3] [--idle 1000 10000] [--quick] [--stores memory redis postgres sqlite]
        [--references memory database] [--load-only] [--scenarios send16 stream16 ...]

Needs wrk (`apt-get install wrk`), redis-server on PATH (a private one on a free port) and, for
postgres and the SDK's database store, the PostgreSQL of tests/databases.py (127.0.0.1:5432, or
A2A_TEST_POSTGRES): every server started gets a fresh database of its own, dropped after it (a
fresh SQLite file likewise, in a temporary folder).
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
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import databases  # noqa: E402  (fresh PostgreSQL databases, dropped after)

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


SCENARIOS = ["send1", "send16", "send64", "stream1", "stream16", "stream32", "gettask"]


def load_scenarios(
    seconds: float, only: list[str] = SCENARIOS
) -> list[Callable[[str], dict[str, float]]]:
    """The load scenarios (those named in `only`), each a measure of one server (its URL) for
    `seconds`: run one after the other on every server, so that the figures compared were taken
    a few seconds apart."""
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

    named = {
        **{f"send{c}": send_message(c) for c in (1, 16, 64)},
        **{f"stream{c}": stream(c) for c in (1, 16, 32)},
        "gettask": get_task,
    }
    return [named[name] for name in SCENARIOS if name in only]


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


@dataclass(frozen=True)
class Target:
    """A server of the bench: its command and environment; `store` says what each start of it
    gets fresh (memory: nothing; redis: a key prefix; postgres, database: a new database, dropped
    after; sqlite: a new file)."""

    command: list[str]
    env: dict[str, str]
    store: str
    ours: bool = True
    extra: dict[str, str] = field(default_factory=dict)


@contextmanager
def fresh_store(target: Target, label: str) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(extra arguments, extra environment) for one start of `target`, its store fresh."""
    if target.store == "redis":
        yield [], {"REDIS_KEY_PREFIX": f"bench-{label}"}
    elif target.store in ("postgres", "database"):
        url = asyncio.run(databases.create_database())
        try:
            if target.store == "postgres":
                yield [], {"DATABASE_URL": url}
            else:
                yield (
                    ["--database-url", url.replace("postgresql://", "postgresql+asyncpg://", 1)],
                    {},
                )
        finally:
            asyncio.run(databases.drop_database(url))
    elif target.store == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as folder:
            yield [], {"DATABASE_URL": f"sqlite:///{folder}/a2a.db"}  # sqlite:////abs/path
    else:
        yield [], {}


@contextmanager
def start(target: Target, env: dict[str, str], label: str) -> Iterator[tuple[str, int, float]]:
    with fresh_store(target, label) as (args, store_env):
        with server([*target.command, *args], {**target.env, **env, **store_env}) as started:
            yield started


# Our stores beside memory, and each reference beside the store of ours it is compared with.
REFERENCE_OF = {"reference": "memory", "reference (database)": "postgres"}
BARS = {
    "SendMessage c=16 req/s": 0.35,
    "stream c=16 events/s": 0.35,
    "stream c=32 events/s": 0.35,
}
SDK_BARS = {"SendMessage c=16 req/s": 10.0, "stream c=16 events/s": 10.0,
            "stream c=32 events/s": 10.0}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--history", type=int, nargs="+", default=[10, 1000, 10000])
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s, 1000 idle streams")
    parser.add_argument("--stores", nargs="+", default=["memory", "redis", "postgres", "sqlite"],
                        choices=["memory", "redis", "postgres", "sqlite"])  # fmt: skip
    parser.add_argument("--references", nargs="*", default=["memory"],
                        choices=["memory", "database"],
                        help="the SDK's server on its InMemoryTaskStore and/or its "
                        "DatabaseTaskStore (PostgreSQL)")  # fmt: skip
    only_load = "only the load scenarios (no idle streams, history, Redis costs)"
    parser.add_argument("--load-only", action="store_true", help=only_load)
    parser.add_argument("--scenarios", nargs="+", default=SCENARIOS, choices=SCENARIOS)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.idle, args.history = 1, 2, [1000], [10, 1000]
    scripted = {"SCRIPTED_CHUNKS": str(CHUNKS), "SCRIPTED_DELAY_MS": "0"}
    idle = {"SCRIPTED_CHUNKS": "1", "SCRIPTED_DELAY_MS": "3600000"}  # a turn that stays working
    ours = [str(BIN / "a2a-server")]
    reference = [sys.executable, str(ROOT / "bench" / "reference_server.py")]
    with loadgen.private_redis() as redis_url:
        # A lease's renewal and the orphan sweep stay out of the measured windows, as on Redis.
        durable = {"LEASE_TTL_S": "600"}
        model = {**scripted, "LLM_MODEL": "scripted"}
        stores = {
            "memory": Target(ours, model, "memory"),
            "redis": Target(ours, {**model, "REDIS_URL": redis_url, **durable}, "redis"),
            "postgres": Target(ours, {**model, **durable}, "postgres"),
            "sqlite": Target(ours, {**model, **durable}, "sqlite"),
        }
        targets = {name: stores[name] for name in args.stores}
        if "memory" in args.references:
            targets["reference"] = Target(reference, scripted, "memory", ours=False)
        if "database" in args.references:
            targets["reference (database)"] = Target(reference, scripted, "database", ours=False)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for run in range(args.runs):
            figures = load_run(targets, run, args)
            for name, target in targets.items():
                if not args.load_only and target.store != "database":
                    env = {**OUR_LIMITS, **idle}
                    with start(target, env, f"{run}-{name}-idle") as (url, pid, _):
                        figures[name] |= measure_idle_streams(url, pid, args.idle, bare=False)
                    with start(target, {**env, **MANY_TURNS}, f"{run}-{name}-many") as (
                        url, pid, _,
                    ):  # fmt: skip
                        figures[name] |= measure_idle_streams(
                            url, pid, args.idle, bare=False, many_tasks=True
                        )
                runs[name].append(figures[name])
                print(f"run {run + 1} {name}: {json.dumps(figures[name])}", file=sys.stderr)
            if not args.load_only:
                bare = [sys.executable, str(ROOT / "bench" / "bare_asgi.py")]
                with bare_server(bare) as (url, pid):
                    runs.setdefault("bare ASGI", []).append(
                        measure_idle_streams(url, pid, args.idle, bare=True)
                    )
    result = {name: median_of(figures) for name, figures in runs.items() if figures}
    ratios: dict[str, dict[str, float]] = {}
    for name in targets:
        if targets[name].ours and name != "memory" and "memory" in targets:
            ratios[f"{name} / memory"] = paired_ratios(runs[name], runs["memory"])
    for name, mine in REFERENCE_OF.items():
        if name in targets and mine in targets:
            ratios[f"{mine} / SDK {targets[name].store}"] = paired_ratios(runs[mine], runs[name])
    if not args.load_only and "redis" in targets:
        result["redis costs"] = redis_costs()
    print_table(result, ratios)
    print_bars(ratios, runs, targets)
    print(json.dumps(result | {"ratios": ratios, "runs": runs}))


def load_run(
    targets: dict[str, Target], run: int, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """One run of the load scenarios: the servers started one after the other (each startup
    timed alone), then every scenario on each server in turn, the order rotating from run to
    run. A scenario's figures for ours and for the reference are taken seconds apart, not
    minutes: the machine's speed, which drifts by a quarter over minutes here, moves both."""
    figures: dict[str, dict[str, float]] = {}
    urls: dict[str, str] = {}
    with ExitStack() as servers:
        for name, target in targets.items():
            url, _, startup_s = servers.enter_context(start(target, {}, f"{run}-{name}"))
            urls[name], figures[name] = url, {"startup to first answer, s": startup_s}
        names = list(targets)
        order = names[run % len(names) :] + names[: run % len(names)]
        for scenario in load_scenarios(args.seconds, args.scenarios):
            for name in order:
                figures[name] |= scenario(urls[name])
        if not args.load_only:
            for name in names:
                if targets[name].ours:
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


def print_bars(
    ratios: dict[str, dict[str, float]],
    runs: dict[str, list[dict[str, float]]],
    targets: dict[str, Target],
) -> None:
    """Issue 51's bars: each store at least 0.35x memory on sends (c=16) and streams; ours on
    PostgreSQL at least 10x the SDK's DatabaseTaskStore on the same PostgreSQL. Each run's own
    ratio, then their median."""
    print()
    print("| ratio | metric | bar | per run | median | met |")
    print("|---|---|---|---|---|---|")
    for label, table in ratios.items():
        store, _, base = label.partition(" / ")
        bars = SDK_BARS if base.startswith("SDK database") else BARS if base == "memory" else {}
        other = "memory" if base == "memory" else next(
            (n for n, t in targets.items() if not t.ours and f"SDK {t.store}" == base), None
        )  # fmt: skip
        for metric, bar in bars.items():
            if metric not in table or other is None:
                continue
            each = [m[metric] / t[metric] for m, t in zip(runs[store], runs[other], strict=True)
                    if t.get(metric)]  # fmt: skip
            shown = ", ".join(f"{r:.2f}" for r in each)
            met = "yes" if table[metric] >= bar else "**no**"
            print(f"| {label} | {metric} | {bar:g}x | {shown} | {table[metric]:.2f} | {met} |")


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


def print_table(result: dict[str, dict[str, float]], ratios: dict[str, dict[str, float]]) -> None:
    """Medians of the runs; each ratio is the median of each run's ratio (not the medians')."""
    servers = [name for name in result if name not in ("bare ASGI", "redis costs")]
    names = {"memory": "ours (memory)", "redis": "ours (redis)", "postgres": "ours (postgres)",
             "sqlite": "ours (sqlite)", "reference": "SDK (memory)",
             "reference (database)": "SDK (DatabaseTaskStore)"}  # fmt: skip
    print(f"| metric | {' | '.join(names[n] for n in servers)} | {' | '.join(ratios)} |")
    print(f"|---|{'---|' * (len(servers) + len(ratios))}")
    metrics = list(dict.fromkeys(m for n in servers for m in result[n]))
    for metric in metrics:
        cells = [fmt(result[n].get(metric)) for n in servers]
        cells += [f"{r[metric]:.2f}" if metric in r else "" for r in ratios.values()]
        print(f"| {metric} | {' | '.join(cells)} |")
    blank = " | " * (len(servers) + len(ratios) - 1)
    for metric, value in result.get("bare ASGI", {}).items():
        print(f"| {metric} (bare ASGI) | {fmt(value)}{blank}|")
    for metric, value in result.get("redis costs", {}).items():
        print(f"| {metric} (redis) | {fmt(value)}{blank}|")


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


if __name__ == "__main__":
    main()
