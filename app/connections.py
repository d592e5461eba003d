"""Connection limits of the HTTP server: a deadline on request headers.

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) and caps concurrent
connections (`limit_concurrency`: 503 beyond) and the size of incomplete headers
(`h11_max_incomplete_event_size`: 400 beyond), but a connection that sends half a request line and
then nothing stays open for ever: enough of them exhaust the file descriptors. This protocol closes
a connection whose request line and headers are not complete within `header_timeout_s` of the
connection (or of the first byte of a keep-alive connection's next request).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s: ClassVar[float] = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm()  # the first byte of the next request on a keep-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the request line and headers are in

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def with_header_timeout(timeout_s: float) -> type[HeaderDeadlineProtocol]:
    """The protocol class uvicorn instantiates per connection, with this deadline."""
    return type(
        "HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": timeout_s}
    )
