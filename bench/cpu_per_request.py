"""Server CPU per request and rates of two checkouts of ours, side by side in the same run.

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/cpu_per_request.py \
        --checkouts /tmp/before /work/main [--rounds 3] [--seconds 6] \
        [--scenarios gettask send16 stream32]

Each checkout's `a2a-server` (the shared venv's, with PYTHONPATH = the checkout) runs as shipped
(`LLM_MODEL=scripted`, 20 chunks, no delay, one worker, in memory), one server at a time, the
checkouts alternating within each round, so that the figures compared were taken seconds apart.
Each scenario's window is bracketed by the server's own CPU time (`/proc/PID/stat` utime + stime):
CPU per request (per streamed turn for streams) is that over the requests answered in it, a
measure the other work on a shared machine moves far less than it moves the rates. Scenarios:
`gettask` (wrk, c=16, GetTask of one completed task), `send16` (wrk, SendMessage c=16),
`stream32` (the asyncio client of loadgen.streams, c=32: it shares the cores with the server).
Prints each round's figures, then the medians and the medians of each round's ratios to the
first checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import loadgen  # this script's own folder is first on sys.path

BIN = Path(sys.executable).parent
SCENARIOS = ("gettask", "send16", "stream32")


def server(checkout: str) -> AbstractContextManager[tuple[str, int]]:
    env = {
        **os.environ,
        "PYTHONPATH": checkout,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": "20",
        "SCRIPTED_DELAY_MS": "0",
    }
    return loadgen.served([str(BIN / "a2a-server"), "--port", "{port}"], env=env, cwd=checkout)


def send(url: str, method: str, params: dict[str, object]) -> dict[str, object]:
    body = loadgen.rpc_body(method, params)
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    reply = httpx.post(url, content=body, headers=headers, timeout=60).json()
    return reply["result"]  # type: ignore[no-any-return]


def measure(scenario: str, url: str, pid: int, seconds: float) -> tuple[float, float]:
    """(requests or turns per second, server CPU ms per request or turn) over one window."""
    run: Callable[[], float]
    if scenario == "gettask":
        task_id = send(url, "SendMessage", loadgen.send_params())["task"]["id"]  # type: ignore[index]

        def run() -> float:
            rate = loadgen.wrk(url, method="GetTask", params={"id": task_id}, expect=task_id,
                               concurrency=16, seconds=seconds)  # fmt: skip
            assert rate.failures == 0, rate
            return rate.per_s * seconds
    elif scenario == "send16":

        def run() -> float:
            rate = loadgen.wrk(url, method="SendMessage", params=loadgen.send_params(),
                               expect="TASK_STATE_COMPLETED", concurrency=16,
                               seconds=seconds)  # fmt: skip
            assert rate.failures == 0, rate
            return rate.per_s * seconds
    else:

        def run() -> float:
            figures = asyncio.run(loadgen.streams(url, concurrency=32, seconds=seconds))
            assert figures.failures == 0, figures
            return float(len(figures.first_event_s))

    run()  # a warm-up window first: imports, caches, the collector's first passes
    began_cpu, began = loadgen.cpu_seconds(pid), time.monotonic()
    done = run()
    elapsed, cpu = time.monotonic() - began, loadgen.cpu_seconds(pid) - began_cpu
    return done / elapsed, cpu / done * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkouts", nargs="+", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6)
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    args = parser.parse_args()
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_ in range(args.rounds):
        order = args.checkouts if round_ % 2 == 0 else list(reversed(args.checkouts))
        for scenario in args.scenarios:
            for checkout in order:
                with server(checkout) as (url, pid):
                    rate, cpu_ms = measure(scenario, url, pid, args.seconds)
                figures.setdefault((scenario, checkout), []).append((rate, cpu_ms))
                print(f"round {round_} {scenario:9} {checkout:24} {rate:9.1f}/s "
                      f"{cpu_ms:7.3f} ms CPU each", flush=True)  # fmt: skip
    first = args.checkouts[0]
    summary: dict[str, object] = {}
    for scenario in args.scenarios:
        for checkout in args.checkouts:
            runs = figures[(scenario, checkout)]
            base = figures[(scenario, first)]
            rate_ratio = statistics.median(r[0] / b[0] for r, b in zip(runs, base, strict=True))
            cpu_ratio = statistics.median(r[1] / b[1] for r, b in zip(runs, base, strict=True))
            line = (f"{scenario:9} {checkout:24} rate {statistics.median(r[0] for r in runs):9.1f}"
                    f"/s CPU {statistics.median(r[1] for r in runs):7.3f} ms | / first: rate "
                    f"{rate_ratio:.3f}x CPU {cpu_ratio:.3f}x")  # fmt: skip
            print(line)
            summary[f"{scenario} {checkout}"] = runs
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
