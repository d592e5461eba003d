"""`a2a-server` / `python -m app`: serve the agent. Flags override the environment."""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn
from pydantic import ValidationError

from agent.hooks import HookLoadError
from agent.tools import ToolLoadError
from app.main import create_app
from app.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="a2a-server", description="Serve an A2A agent.")
    parser.add_argument("--host", help="bind address (A2A_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (A2A_PORT, default 8000)")
    args = parser.parse_args(argv)
    overrides = {
        name: value
        for name, value in (("a2a_host", args.host), ("a2a_port", args.port))
        if value is not None
    }
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        print(f"a2a-server: invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        app = create_app(settings)
    except (ToolLoadError, HookLoadError) as exc:
        print(f"a2a-server: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=settings.a2a_host,
        port=settings.a2a_port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=10,
    )
    return 0
