"""Accepting new connections in bursts, not one per pass of the event loop.

libuv (uvloop's core, since 1.45) accepts one connection each time the listening socket polls
readable, and polls once per pass of the loop. Under load a pass runs every callback queued,
so when a client opens many connections at once, the last one waits a pass per connection before
the server reads its first request, and those first requests made the SendMessage tail at high
concurrency (bench/RESULTS.md has the figures).

`BurstListener` takes the listening socket over from uvloop's server and accepts every pending
connection (up to the backlog) each time it polls readable, as asyncio's own loop does; each one
then becomes a transport of uvloop's with the same protocol as before (and TCP_NODELAY, which
`connect_accepted_socket` sets).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable

logger = logging.getLogger(__name__)

# After accept() failed for want of descriptors, how long to stop accepting (asyncio's choice).
RETRY_AFTER_EMFILE_S = 1.0
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class BurstListener:
    """A listening socket served by `loop.add_reader`; does what uvicorn asks of the server it
    replaces (`close`, `wait_closed`)."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        loop: asyncio.AbstractEventLoop,
        *,
        backlog: int,
    ) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._protocol_factory = protocol_factory
        self._loop = loop
        self._backlog = backlog
        self._connecting: set[asyncio.Task[object]] = set()
        self._closed = False
        loop.add_reader(sock.fileno(), self._accept)

    @classmethod
    def take_over(
        cls,
        server: asyncio.Server,
        protocol_factory: Callable[[], asyncio.Protocol],
        loop: asyncio.AbstractEventLoop,
        *,
        backlog: int,
    ) -> list[BurstListener]:
        """Listeners on the sockets `server` listens on; `server` stops accepting (its sockets
        are duplicated first: the listening sockets stay open, with their pending connections)."""
        sockets = [socket.socket(fileno=os.dup(listening.fileno())) for listening in server.sockets]
        server.close()
        return [cls(sock, protocol_factory, loop, backlog=backlog) for sock in sockets]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()

    async def wait_closed(self) -> None:
        if self._connecting:
            await asyncio.wait(self._connecting)

    def _accept(self) -> None:
        for _ in range(self._backlog):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # nothing more pending
            except ConnectionAbortedError:
                continue  # the client gave up while queued
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                # The pending connections wait in the backlog; accepting again at once would
                # spin. (uvicorn's connection cap, A2A_MAX_CONNECTIONS, keeps this rare.)
                logger.error("cannot accept a connection (%s); retrying in 1 s", exc)
                self._loop.remove_reader(self._sock.fileno())
                self._loop.call_later(RETRY_AFTER_EMFILE_S, self._resume)
                return
            connecting = self._loop.create_task(
                self._loop.connect_accepted_socket(self._protocol_factory, conn)
            )
            self._connecting.add(connecting)
            connecting.add_done_callback(self._connected)

    def _connected(self, connecting: asyncio.Task[object]) -> None:
        self._connecting.discard(connecting)
        if not connecting.cancelled() and connecting.exception() is not None:
            logger.debug("an accepted connection failed: %s", connecting.exception())

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept)
