"""Issues 16 and 53's bench, one command: our `a2a-server` (the scripted model, in memory, on
Redis, on PostgreSQL and on SQLite) beside the official SDKs' servers, each with an executor that
emits the same 23 events a task (bench/sdk_servers.py): the Python SDK's (bench/reference_server.py,
on its InMemoryTaskStore, and with `--references database` on its DatabaseTaskStore on the same
PostgreSQL), the JavaScript SDK's (`js`: bench/js_reference/) and the Go SDK's (`go` on both
cores, `go1` pinned to one: a server built by the developer, `--go-server-cmd`), in the same run,
driven by the same load generators (wrk for request/response, bench/loadgen.py's asyncio client
for streams). Prints metric, each server's figure, and the ratios; each figure the median of
--runs runs, each scenario run on every server in turn (the servers side by side), and each ratio
the median of the runs' own ratios.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/side_by_side.py [--seconds 5]
        [--runs 3] [--idle 1000 10000] [--quick] [--stores memory redis postgres sqlite]
        [--references memory database js go go1] [--go-server-cmd '/path/server --port {port}']
        [--load-only] [--scenarios send16 stream16 ... cpu]

Needs wrk (`apt-get install wrk`), redis-server on PATH (a private one on a free port) and, for
postgres and the SDK's database store, the PostgreSQL of tests/databases.py (127.0.0.1:5432, or
A2A_TEST_POSTGRES): every server started gets a fresh database of its own, dropped after it (a
fresh SQLite file likewise, in a temporary folder). `js` needs node and npm (`npm ci` on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
import sdk_servers
import side_by_side_report as report
from side_by_side_probes import (
    bare_server,
    measure_history,
    measure_idle_streams,
    redis_costs,
    send,
)

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


@contextmanager
def server(command: list[str], env: dict[str, str]) -> Iterator[tuple[str, int, float]]:
    """Start a server (`{port}` in its command, or `--port N` after it); yield (url, pid, seconds
    from spawn to its first answered SendMessage)."""
    port = loadgen.free_port()
    base = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    began = time.monotonic()
    if any("{port}" in part for part in command):
        argv = [part.replace("{port}", str(port)) for part in command]
    else:
        argv = [*command, "--port", str(port)]
    proc = subprocess.Popen(
        argv, env={**base, **env},
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


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


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


def references(args: argparse.Namespace, scripted: dict[str, str]) -> dict[str, Target]:
    """The official SDKs' servers named in --references, each with the same executor."""
    python = [sys.executable, str(ROOT / "bench" / "reference_server.py")]
    found: dict[str, Target] = {}
    if "memory" in args.references:
        found["reference"] = Target(python, scripted, "memory", ours=False)
    if "database" in args.references:
        found["reference (database)"] = Target(python, scripted, "database", ours=False)
    if "js" in args.references:
        found["reference (js)"] = Target(sdk_servers.js_command(), scripted, "memory", ours=False)
    if {"go", "go1"} & set(args.references):
        if not args.go_server_cmd:
            raise SystemExit("--references go/go1 need --go-server-cmd (bench/README.md)")
        both, one = sdk_servers.go_commands(args.go_server_cmd)
        if "go" in args.references:
            found["reference (go)"] = Target(both, scripted, "memory", ours=False)
        if "go1" in args.references:
            found["reference (go, 1 core)"] = Target(one, scripted, "memory", ours=False)
    return found


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
                        choices=["memory", "database", "js", "go", "go1"],
                        help="the Python SDK's server on its InMemoryTaskStore and/or its "
                        "DatabaseTaskStore (PostgreSQL), the JS SDK's, the Go SDK's on both "
                        "cores and/or pinned to core 0")  # fmt: skip
    parser.add_argument("--go-server-cmd", help="the a2a-go server: '/path/server --port {port}'")
    only_load = "only the load scenarios (no idle streams, history, Redis costs)"
    parser.add_argument("--load-only", action="store_true", help=only_load)
    parser.add_argument("--scenarios", nargs="+", default=[*SCENARIOS, "cpu"],
                        choices=[*SCENARIOS, "cpu"])  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.idle, args.history = 1, 2, [1000], [10, 1000]
    scripted = {"SCRIPTED_CHUNKS": str(CHUNKS), "SCRIPTED_DELAY_MS": "0"}
    idle = {"SCRIPTED_CHUNKS": "1", "SCRIPTED_DELAY_MS": "3600000"}  # a turn that stays working
    ours = [str(BIN / "a2a-server")]
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
        targets = {name: stores[name] for name in args.stores} | references(args, scripted)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for run in range(args.runs):
            # The machine may be shared: each run's load goes beside its figures.
            began = time.strftime("%H:%M:%S", time.gmtime())
            load = " ".join(f"{figure:.2f}" for figure in os.getloadavg())
            figures = load_run(targets, run, args)
            ended = time.strftime("%H:%M:%S", time.gmtime())
            print(f"run {run + 1}: {began}-{ended} UTC, load average at its start {load}, "
                  f"at its end {' '.join(f'{f:.2f}' for f in os.getloadavg())}",
                  file=sys.stderr)  # fmt: skip
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
    result = {name: report.median_of(figures) for name, figures in runs.items() if figures}
    ours_names = {name for name, target in targets.items() if target.ours}
    compared = report.pairs(list(targets), ours_names)
    ratios = {label: report.paired_ratios(runs[mine], runs[theirs])
              for label, (mine, theirs) in compared.items()}  # fmt: skip
    if not args.load_only and "redis" in targets:
        result["redis costs"] = redis_costs()
    report.print_table(result, ratios)
    report.print_bars(runs, compared)
    print(json.dumps(result | {"ratios": ratios, "runs": runs}))


# Server CPU per request over a fixed amount of work (not over wrk's fixed time, where the
# requests in flight at its end would be counted in the CPU and not in the requests).
CPU_SENDS, CPU_STREAMS, CPU_CONCURRENCY = 400, 100, 16


def server_cpu(url: str, pid: int) -> dict[str, float]:
    """Server CPU time (user + system, every thread) per blocking send and per streamed turn."""
    figures = {}
    for method, count, name in (("SendMessage", CPU_SENDS, "server CPU per send, ms"),
                                ("SendStreamingMessage", CPU_STREAMS,
                                 "server CPU per streamed turn, ms")):  # fmt: skip
        before = sdk_servers.cpu_seconds(pid)
        asyncio.run(loadgen.calls(url, method=method, count=count, concurrency=CPU_CONCURRENCY))
        figures[name] = (sdk_servers.cpu_seconds(pid) - before) / count * 1000
    return figures


def load_run(
    targets: dict[str, Target], run: int, args: argparse.Namespace
) -> dict[str, dict[str, float]]:
    """One run of the load scenarios: the servers started one after the other (each startup
    timed alone), then every scenario on each server in turn, the order rotating from run to
    run. A scenario's figures for ours and for the reference are taken seconds apart, not
    minutes: the machine's speed, which drifts by a quarter over minutes here, moves both."""
    figures: dict[str, dict[str, float]] = {}
    urls: dict[str, str] = {}
    pids: dict[str, int] = {}
    with ExitStack() as servers:
        for name, target in targets.items():
            url, pid, startup_s = servers.enter_context(start(target, {}, f"{run}-{name}"))
            urls[name], pids[name] = url, pid
            figures[name] = {"startup to first answer, s": startup_s}
        names = list(targets)
        if run == 0:  # the servers compared must stream the same events: check on the wire
            seen = {name: sdk_servers.streamed_events(urls[name]) for name in names}
            if differ := sdk_servers.differences(seen, names[0]):
                raise SystemExit("the servers do not stream the same events:\n" + "\n".join(differ))
            print(f"wire check: the same {len(seen[names[0]])} events from every server",
                  file=sys.stderr)  # fmt: skip
        order = names[run % len(names) :] + names[: run % len(names)]
        for scenario in load_scenarios(args.seconds, args.scenarios):
            for name in order:
                figures[name] |= scenario(urls[name])
        if "cpu" in args.scenarios:
            for name in order:
                figures[name] |= server_cpu(urls[name], pids[name])
        if not args.load_only:
            for name in names:
                if targets[name].ours:
                    figures[name] |= measure_history(urls[name], args.history)
    return figures


if __name__ == "__main__":
    main()
