"""`a2a-server` / `python -m app`: serve the agent. Flags override the environment."""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import sys
from types import FrameType

import uvicorn
import uvloop
from fastapi import FastAPI
from pydantic import ValidationError

from agent.hooks import HookLoadError
from agent.runtime.drain import Drain
from agent.tools.base import ToolLoadError
from app.http.auth import AuthConfigurationError
from app.http.connections import raise_open_files_limit, with_limits
from app.http.listener import BurstListener
from app.main import create_app
from app.ops.logs import configure_logging, lines_written_at_once, lines_written_per_loop_pass
from app.settings import Settings

# The server process's collector thresholds (CPython's defaults are 700, 10, 10); an app embedded
# in another process (`create_app`) leaves its host's alone. The server makes almost no cyclic
# garbage (in the bench ~0.2 objects per request reach the collector: reference counting frees the
# rest), so a collector pass mostly walks live objects for nothing. With the defaults a full pass
# came every ~0.4 s under load and walked every stored task (40-110 ms with 10,000 in memory).
# A young pass comes after 50,000 more container objects than were freed: well above what the
# requests in flight hold alive (of the order of 5,000 at 64 sends at once). At 5,000 the young
# passes came every ~40 ms at c=64 and found nothing to free (only live requests, which they
# pushed to the middle generation): 2.5 s of passes in a 90 s A/B, up to 73 ms each, and
# SendMessage c=64 p99 106 ms against 59 ms with these (bench/RESULTS.md). A full pass waits for
# 100 middle ones (and CPython's own rule: a quarter more long-lived objects than at the last).
COLLECTOR_THRESHOLDS = (50_000, 10, 100)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, except that SIGTERM / SIGINT first starts the app's drain.

    The drain must begin before uvicorn stops: blocking sends then answer with their task and
    open streams end at an event boundary, so the connections close by themselves instead of
    being cut when the graceful-shutdown timeout runs out (a plain-text 500, or an incomplete
    chunked response). The signal handler runs between two bytecodes of whatever the loop was
    doing, so it only schedules the drain (and log lines written at once from then on), with
    the one loop call that is safe from there.
    """

    def __init__(self, config: uvicorn.Config, *, drain: Drain) -> None:
        super().__init__(config)
        self._drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        with lines_written_per_loop_pass(self._loop):
            await super().serve(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup; then, on uvloop, its listening sockets are taken over by burst
        listeners (app.http.listener: uvloop accepts one connection per pass of the loop)."""
        await super().startup(sockets)
        loop = asyncio.get_running_loop()
        if not isinstance(loop, uvloop.Loop):
            return  # asyncio's own loop accepts every pending connection at once already
        config = self.config

        def create_protocol() -> asyncio.Protocol:  # as uvicorn's own startup makes them
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=loop,
            )

        listeners = [
            listener
            for server in self.servers
            for listener in BurstListener.take_over(
                server, create_protocol, loop, backlog=config.backlog
            )
        ]
        # uvicorn only closes its servers and waits for them to close: listeners do both.
        self.servers = listeners  # type: ignore[assignment]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._drain.start)
            loop.call_soon_threadsafe(lines_written_at_once)  # the process may end at once
        super().handle_exit(sig, frame)


def server_config(app: FastAPI, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration, with the connection limits: a deadline on request headers, an
    idle timeout, a cap on header size and one on concurrent connections (503 beyond)."""
    return uvicorn.Config(
        app,
        host=settings.a2a_host,
        port=settings.a2a_port,
        log_level=settings.log_level.lower(),
        log_config=None,  # app.ops.logs configured logging (LOG_FORMAT): uvicorn keeps it
        # Connections get three quarters of the grace; the rest is for the lifespan's hand-over
        # of running turns, so the process is gone within A2A_SHUTDOWN_GRACE_S.
        timeout_graceful_shutdown=max(1, int(settings.a2a_shutdown_grace_s * 0.75)),
        http=with_limits(settings.a2a_header_timeout_s, settings.a2a_max_header_bytes),
        timeout_keep_alive=settings.a2a_keep_alive_timeout_s,
        h11_max_incomplete_event_size=settings.a2a_max_header_bytes,
        limit_concurrency=settings.a2a_max_connections,
        # uvicorn's own X-Forwarded-Proto/-For handling (scheme, client address) follows
        # A2A_TRUST_FORWARDED too: off, no peer may set them; on, the proxy in front is trusted.
        proxy_headers=settings.a2a_trust_forwarded,
        forwarded_allow_ips="*" if settings.a2a_trust_forwarded else None,
    )


def serve(app: FastAPI, settings: Settings) -> int:
    """Serve until SIGTERM / SIGINT; 3 if the server could not start (uvicorn's code)."""
    raise_open_files_limit(settings.a2a_max_connections)
    server = DrainingServer(server_config(app, settings), drain=app.state.drain)
    server.run()
    return 0 if server.started else 3


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
    configure_logging(settings)
    try:
        app = create_app(settings)
    except (ToolLoadError, HookLoadError) as exc:
        print(f"a2a-server: {exc}", file=sys.stderr)
        return 2
    except AuthConfigurationError as exc:
        print(f"a2a-server: unsafe configuration: {exc}", file=sys.stderr)
        return 2
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    return serve(app, settings)
