"""Instructions per request, counted by callgrind: a steady A/B measure on a machine whose
speed moves (CPU time per request moved by 10-15% from one minute to the next on some of ours).

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/instructions.py \
        [--mode send|stream|gettask] [--requests 160] [--concurrency 16]

Needs valgrind on PATH (Debian: `apt-get install valgrind`). The app (`create_app` on its
defaults, the scripted model of 20 chunks, INFO logs to /dev/null, the server's collector
thresholds and its once-per-pass log writes) is driven in process by `--concurrency` callers of
`SendMessage` or `SendStreamingMessage`, with no HTTP server. This script runs itself under
callgrind twice, for N and for 2N requests after the same warm-up, and prints
(I(2N) - I(N)) / N: start-up, imports and warm-up cancel. It counts the app's own work only
(uvicorn, the kernel and the client are not in it). ~2 minutes per run of 160 sends.

With `--served`, `python -m app` itself runs under callgrind (the scripted model, LOG_LEVEL=info
to /dev/null) and an asyncio client outside it sends the requests over `--concurrency`
keep-alive connections: uvicorn, the protocol and the guard are counted too (the client is not).
`--mode gettask` (served only): GetTask of one completed task (made by a SendMessage first).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import httpx
import loadgen  # this script's own folder is first on sys.path

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 320
METHODS = {"send": "SendMessage", "stream": "SendStreamingMessage", "gettask": "GetTask"}


def body(method: str, n: int) -> bytes:
    message = {"messageId": f"m-{n}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    payload = {"jsonrpc": "2.0", "id": n, "method": method, "params": {"message": message}}
    return json.dumps(payload).encode()


async def call(app: Any, method: str, n: int) -> None:
    """One request through the ASGI app, read to the end of its response."""
    reply = await loadgen.asgi_post(app, body(method, n))
    if b"TASK_STATE_COMPLETED" not in reply:
        raise RuntimeError(f"not completed: {reply[:300]!r}")


async def drive(method: str, requests: int, concurrency: int, log: TextIO) -> None:
    from app.cli import COLLECTOR_THRESHOLDS, freeze_when_ready
    from app.main import create_app
    from app.ops.logs import configure_logging, lines_written_per_loop_pass
    from app.settings import Settings

    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    settings = Settings()
    configure_logging(settings, stream=log)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await freeze_when_ready(app.state.model_ready)  # as a2a-server does (create_app does not)
        with lines_written_per_loop_pass(asyncio.get_running_loop()):
            for count in (WARM_UP, requests):
                per_caller = count // concurrency
                await asyncio.gather(
                    *(
                        _caller(app, method, caller * 1_000_000, per_caller)
                        for caller in range(concurrency)
                    )
                )


async def _caller(app: Any, method: str, first: int, count: int) -> None:
    for n in range(first, first + count):
        await call(app, method, n)


def instructions(mode: str, requests: int, concurrency: int) -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--mode",
        mode,
        "--concurrency",
        str(concurrency),
        "--inner",
        str(requests),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": "20",
    }
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    collected = re.search(r"Collected : ([\d,]+)", run.stderr)
    if collected is None:
        raise RuntimeError(f"callgrind printed no count:\n{run.stderr[-2000:]}")
    return int(collected.group(1).replace(",", ""))


def served_instructions(mode: str, requests: int, concurrency: int) -> int:
    """The instructions `python -m app` ran, under callgrind, for WARM_UP then `requests`."""
    method = METHODS[mode]
    port = loadgen.free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LLM_MODEL": "scripted",
        "SCRIPTED_CHUNKS": "20",
        "A2A_PORT": str(port),
        "LOG_LEVEL": "info",
    }
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    # To a file, not a pipe: the server's log lines would fill a pipe nobody reads meanwhile.
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(
            [*command, sys.executable, "-m", "app"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            loadgen.wait_for_port(port, server)  # under valgrind its start takes ~10 s
            task_id = None
            if mode == "gettask":
                asyncio.run(loadgen.calls(url, method="SendMessage", count=1, concurrency=1))
                task_id = _a_task_id(url)
            for count in (WARM_UP, requests):
                if task_id is not None:
                    asyncio.run(_get_tasks(url, task_id, count, concurrency))
                else:
                    asyncio.run(
                        loadgen.calls(url, method=method, count=count, concurrency=concurrency)
                    )
        finally:
            server.send_signal(signal.SIGINT)  # a clean stop: callgrind writes its totals at exit
            server.wait(timeout=300)
        log.seek(0)
        stderr = log.read()
    collected = re.search(r"Collected : ([\d,]+)", stderr)
    if collected is None:
        raise RuntimeError(f"callgrind printed no count:\n{stderr[-2000:]}")
    return int(collected.group(1).replace(",", ""))


def _a_task_id(url: str) -> str:
    body = loadgen.rpc_body("ListTasks", {"pageSize": 1})
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}
    reply = httpx.post(url, content=body, headers=headers, timeout=60).json()
    return str(reply["result"]["tasks"][0]["id"])


async def _get_tasks(url: str, task_id: str, count: int, concurrency: int) -> None:
    """`count` GetTasks of `task_id`, `concurrency` at a time on keep-alive connections."""
    request, port = loadgen.get_task_request(url, task_id), urlsplit(url).port

    async def worker(calls: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(calls):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                body = await reader.readexactly(int(length.group(1)) if length else 0)
                if task_id.encode() not in body:
                    raise RuntimeError(f"GetTask failed: {(head + body)[:300]!r}")
        finally:
            writer.close()

    share, extra = divmod(count, concurrency)
    await asyncio.gather(*(worker(share + (n < extra)) for n in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=tuple(METHODS), default="send")
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--served", action="store_true", help="count a2a-server, uvicorn too")
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)  # the run under callgrind
    args = parser.parse_args()
    method = METHODS[args.mode]
    if args.inner is not None:
        import uvloop

        with open(os.devnull, "w") as log:
            uvloop.run(drive(method, args.inner, args.concurrency, log))
        return
    if args.mode == "gettask" and not args.served:
        parser.error("--mode gettask is counted --served only")
    count = served_instructions if args.served else instructions
    once = count(args.mode, args.requests, args.concurrency)
    twice = count(args.mode, 2 * args.requests, args.concurrency)
    per_request = (twice - once) / args.requests
    where = "served by a2a-server" if args.served else "in process"
    print(
        f"{method}: {per_request:,.0f} instructions per request ({args.requests} requests, {where})"
    )


if __name__ == "__main__":
    main()
