"""The floor for idle-stream memory: a bare ASGI app under the same uvicorn that answers every
POST with an SSE stream (one event, then nothing until the client leaves). What a stream costs
here is what the server, Python and the kernel's socket cost; anything above it is ours.

    .venv/bin/python bench/bare_asgi.py --port 9200
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

_FIRST_EVENT = b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    await send({"type": "http.response.body", "body": _FIRST_EVENT, "more_body": True})
    while (await receive())["type"] != "http.disconnect":
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9200)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
