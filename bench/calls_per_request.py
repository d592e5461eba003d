"""Python calls per request, counted by cProfile: a measure of work that the machine's load does
not move (where callgrind is too slow on a busy machine and no CPU counter is exposed).

    LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python bench/calls_per_request.py \
        --checkout /work/main [--mode send|stream|gettask] [--requests 320] [--concurrency 16]

The checkout's app (`create_app` on its defaults, the scripted model of 20 chunks, INFO logs to
/dev/null) is driven in process through ASGI, as bench/instructions.py drives it (no HTTP
server: uvicorn's protocol is not counted), 320 requests of warm-up first; then `--requests`
more are counted: every Python function call and every call of a C function, per request.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
from typing import Any, TextIO

import loadgen  # this script's own folder is first on sys.path


async def call(app: Any, payload: dict[str, Any]) -> bytes:
    return await loadgen.asgi_post(app, json.dumps(payload).encode())


def payload(method: str, n: int, task_id: str | None) -> dict[str, Any]:
    if method == "GetTask":
        params: dict[str, Any] = {"id": task_id}
    else:
        message = {"messageId": f"m-{n}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        params = {"message": message}
    return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}


async def drive(method: str, requests: int, concurrency: int, log: TextIO) -> int:
    from app.main import create_app
    from app.ops.logs import configure_logging
    from app.settings import Settings

    settings = Settings()
    configure_logging(settings, stream=log)
    app = create_app(settings)
    profile = cProfile.Profile()
    async with app.router.lifespan_context(app):
        first = await call(app, payload("SendMessage", 0, None))
        task_id = json.loads(first)["result"]["task"]["id"]

        async def caller(start: int, count: int) -> None:
            for n in range(start, start + count):
                reply = await call(app, payload(method, n, task_id))
                if b"TASK_STATE_COMPLETED" not in reply:
                    raise RuntimeError(f"not completed: {reply[:300]!r}")

        for count, counted in ((320, False), (requests, True)):
            if counted:
                profile.enable()
            share = count // concurrency
            await asyncio.gather(*(caller(c * 1_000_000 + 1, share) for c in range(concurrency)))
            if counted:
                profile.disable()
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined,no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", required=True)
    methods = {"send": "SendMessage", "stream": "SendStreamingMessage", "gettask": "GetTask"}
    parser.add_argument("--mode", choices=tuple(methods), default="send")
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, args.checkout)
    os.environ.setdefault("LLM_MODEL", "scripted")
    os.environ.setdefault("SCRIPTED_CHUNKS", "20")
    with open(os.devnull, "w") as log:
        calls = asyncio.run(drive(methods[args.mode], args.requests, args.concurrency, log))
    print(f"{methods[args.mode]} {args.checkout}: {calls / args.requests:,.0f} calls per request")


if __name__ == "__main__":
    main()
