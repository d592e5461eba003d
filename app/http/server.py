"""The server `a2a-server` runs: uvicorn's, with the drain started on SIGTERM / SIGINT, and its
listening sockets accepted in bursts on uvloop (app.http.listener).

uvicorn internals, fenced here: written against uvicorn 0.54.0 (uvloop 0.23.0). After uvicorn's
startup the burst listeners take over the sockets of its `servers` and replace them there
(uvicorn only closes them and waits for them to close at shutdown), and they make each
connection's protocol as uvicorn's startup does (`config.http_protocol_class` with the server's
`server_state` and its lifespan's `state`). Those attributes are looked up at startup
(`listening_servers`): without them uvicorn's own servers accept, one connection per pass of the
loop on uvloop.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

import uvicorn
import uvloop

from agent.runtime.drain import Drain
from app.http.listener import BurstListener
from app.ops.logs import lines_written_at_once, lines_written_per_loop_pass

logger = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, except that SIGTERM / SIGINT first starts the app's drain.

    The drain must begin before uvicorn stops: blocking sends then answer with their task and
    open streams end at an event boundary, so the connections close by themselves instead of
    being cut when the graceful-shutdown timeout runs out (a plain-text 500, or an incomplete
    chunked response). The signal handler runs between two bytecodes of whatever the loop was
    doing, so it only schedules the drain (and log lines written at once from then on), with
    the one loop call that is safe from there.

    `background`, if given, runs on the server's loop while it serves (cancelled when it stops).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        drain: Drain,
        background: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        self._background = background
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = loop = asyncio.get_running_loop()
        job = loop.create_task(self._background()) if self._background is not None else None
        try:
            with lines_written_per_loop_pass(loop):
                await super().serve(sockets)
        finally:
            if job is not None:
                job.cancel()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup; then, on uvloop, its listening sockets are taken over by burst
        listeners (uvloop accepts one connection per pass of the loop)."""
        await super().startup(sockets)
        loop = asyncio.get_running_loop()
        if not isinstance(loop, uvloop.Loop) or self.should_exit:
            return  # asyncio's own loop accepts every pending connection at once already
        servers = listening_servers(self)
        if servers is None:
            logger.info(
                "uvicorn_version=<%s> | its listening servers are not where they were:"
                " connections are accepted by uvloop's own servers",
                uvicorn.__version__,
            )
            return
        config, server_state, app_state = self.config, self.server_state, self.lifespan.state

        def create_protocol() -> asyncio.Protocol:  # as uvicorn's own startup makes them
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=server_state, app_state=app_state
            )

        listeners = [
            listener
            for server in servers
            for listener in BurstListener.take_over(
                server, create_protocol, loop, backlog=config.backlog
            )
        ]
        self.servers = listeners  # type: ignore[assignment]

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._drain.start)
            loop.call_soon_threadsafe(lines_written_at_once)  # the process may end at once
        super().handle_exit(sig, frame)


def listening_servers(server: uvicorn.Server) -> list[asyncio.Server] | None:
    """The servers uvicorn's startup opened, if they are where uvicorn 0.54 keeps them (and the
    state its protocols are made with): None if anything the burst listeners need is missing."""
    servers = getattr(server, "servers", None)
    lifespan = getattr(server, "lifespan", None)
    if (
        not isinstance(servers, list)
        or getattr(server, "server_state", None) is None
        or not hasattr(lifespan, "state")
        or not callable(getattr(server.config, "http_protocol_class", None))
    ):
        return None
    for each in servers:
        if not all(hasattr(each, name) for name in ("sockets", "close", "wait_closed")):
            return None
    return servers
