"""Connection limits of the HTTP server, and how it starts a request's task: a deadline on
request headers, a cap on their size, and each request's task started as app.http.request_task
starts it.

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) and caps concurrent
connections (`limit_concurrency`: 503 beyond), but a connection that sends half a request line and
then nothing stays open for ever: enough of them exhaust the file descriptors. These protocols
close a connection whose request line and headers are not complete within `header_timeout_s` of
the connection (or of the first byte of a keep-alive connection's next request), and answer 400
to headers larger than `max_header_bytes`.

Two parsers: httptools (C, llhttp), the one served when installed (it is a runtime dependency:
h11's pure-Python parsing and writing was a large share of a GetTask's time), and h11, the
fallback, whose own `h11_max_incomplete_event_size` caps the headers.

uvicorn internals, fenced here: written against uvicorn 0.54.0 (httptools 0.9.0, h11 0.16.0).
The protocols subclass uvicorn's and use their attributes (`conn`, `cycle`, `tasks`,
`send_400_response`). On httptools, `RequestTaskProtocol` also overrides the private
`HttpToolsProtocol._start_asgi_task` and replaces a cycle's `transport` (`HeadWithBody`); both
are looked up at import (`request_tasks_available`). Without them the header limits run on
uvicorn's own request tasks and writes, and a stream watches `receive()` for its client leaving.
It also replaces a cycle's `access_logger`, when it has uvicorn's (`AccessLogUnlessLogged`);
without it, the same line is dropped by a filter after its record is made.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import platform
import resource
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.http import request_task
from app.ops.logs import is_logged_by_a_binding

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
except ImportError:  # httptools is not installed: h11 serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)


def request_task_hooks_present() -> bool:
    """Whether uvicorn's httptools protocol starts a request's task as 0.54 does: by the private
    `_start_asgi_task(cycle, app)`, from a cycle made with a `transport` and run by `run_asgi`."""
    if HttpToolsProtocol is None:
        return False
    start = getattr(HttpToolsProtocol, "_start_asgi_task", None)
    if not callable(start) or not callable(getattr(RequestResponseCycle, "run_asgi", None)):
        return False
    try:
        arguments = inspect.signature(start).parameters
        cycle_arguments = inspect.signature(RequestResponseCycle).parameters
    except (TypeError, ValueError):
        return False
    return list(arguments) == ["self", "cycle", "app"] and "transport" in cycle_arguments


_REQUEST_TASKS = request_task_hooks_present()


def request_tasks_available() -> bool:
    """Whether the server's protocol starts each request's task itself (app.http.request_task)."""
    return _REQUEST_TASKS


class _HeaderDeadline:
    """The timer that closes a connection whose request line and headers do not come in time.
    Mixed into both protocols: each says when it is `_waiting_for_headers`."""

    # Slots, not more keys in uvicorn's attribute dict: those grew it to its next size on every
    # connection.
    __slots__ = ("_header_timer",)
    _header_timer: asyncio.TimerHandle | None
    header_timeout_s: ClassVar[float] = 10.0
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _waiting_for_headers(self) -> bool:
        raise NotImplementedError

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


class HeaderDeadlineProtocol(_HeaderDeadline, H11Protocol):
    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer = None

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

    def _waiting_for_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE


if HttpToolsProtocol is not None:

    class FastHeaderDeadlineProtocol(_HeaderDeadline, HttpToolsProtocol):
        """httptools with the header deadline and the header size cap (llhttp has no cap)."""

        max_header_bytes: ClassVar[int] = 16384

        __slots__ = ("_awaiting_headers", "_header_bytes")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer = None
            self._awaiting_headers = True
            self._header_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._awaiting_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            # Every byte so far belongs to headers still incomplete: they are too large.
            if (
                self._awaiting_headers
                and self._header_bytes > self.max_header_bytes
                and not self.transport.is_closing()
            ):
                self.send_400_response("Request headers are too large.")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()  # the first byte of the next request on a keep-alive connection

        def on_headers_complete(self) -> None:
            self._awaiting_headers = False
            self._disarm()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._awaiting_headers, self._header_bytes = True, 0

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _waiting_for_headers(self) -> bool:
            return self._awaiting_headers

    class RequestTaskProtocol(FastHeaderDeadlineProtocol):
        """The header limits, each request's task started by app.http.request_task (its first
        step taken in the read that brought the request; its stream told when the client
        leaves), and a response's head written with its body's first part (`HeadWithBody`)."""

        __slots__ = ("_first_step", "_task")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # A request task just started, whose first step is taken at the end of a read once
            # its body is in: its cycle and the task.
            self._first_step: tuple[Any, asyncio.Task[None]] | None = None
            self._task: asyncio.Task[None] | None = None  # the latest request's, while it runs

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._take_first_step()

        def _start_asgi_task(self, cycle: Any, app: Any) -> None:
            """uvicorn's start of a request's task: its first step is taken at the end of a read
            that has brought the whole request, unless the task's own came first (a pipelined
            request starts at the end of the one before, inside that one's task; its body may
            come in later reads)."""
            context = contextvars.Context() if self.config.reset_contextvars else None
            task = request_task.start(self.loop, cycle.run_asgi(app), context)
            task.add_done_callback(self._task_done)
            self.tasks.add(task)
            self._task = task
            self._first_step = (cycle, task)

        def _task_done(self, task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            if self._task is task:
                self._task = None

        def _take_first_step(self) -> None:
            first = self._first_step
            if first is None or first[0].more_body:  # none, or its body is still coming
                return
            self._first_step = None
            if not self.transport.is_closing():
                request_task.take_first_step(self.loop, first[1])  # unless already taken

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.transport is self.transport:
                cycle.transport = HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]
                if getattr(cycle, "access_logger", None) is _ACCESS_LOGGER:
                    cycle.access_logger = _ACCESS_LOG_UNLESS_LOGGED  # type: ignore[assignment]

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            if self._task is not None and self.cycle is not None and self.cycle.disconnected:
                request_task.client_gone(self._task)  # its response had not ended


_ACCESS_LOGGER = logging.getLogger("uvicorn.access")


class AccessLogUnlessLogged:
    """uvicorn's access logger as a request's cycle calls it: a request that a binding logs
    itself (`app.ops.logs.logged_by_a_binding`) gets no access line, and no record is made for
    it only for the access log's filter to drop it (most of a record's cost: the caller's
    lookup, the record, the handlers' walk; bench/RESULTS.md, issue 53)."""

    __slots__ = ()

    def info(self, msg: str, *args: object) -> None:
        if not is_logged_by_a_binding():
            _ACCESS_LOGGER.info(msg, *args, stacklevel=2)  # the line is still uvicorn's


_ACCESS_LOG_UNLESS_LOGGED = AccessLogUnlessLogged()


class HeadWithBody:
    """The transport as one response sees it: its head goes out with the first part of its
    body, in one write.

    uvicorn writes a response's head as soon as the app starts the response, and each body part
    as it comes: a blocking reply or a stream's first event went out in two writes, two system
    calls (which also wake the client twice) where one does. The head is
    held until the next write, which an app nearly always makes in the same step (a reply's body,
    a stream's first event); should it not, the head goes out alone at the loop's next pass.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100 "):
            # A response's head (not an interim 100 Continue, which the client waits for).
            self._held = data
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._flush()
        self._transport.close()


def with_limits(timeout_s: float, max_header_bytes: int) -> type[asyncio.Protocol]:
    """The protocol class uvicorn instantiates per connection, with these limits: httptools when
    installed (starting request tasks itself when uvicorn's hooks are there), else h11 (whose
    cap uvicorn sets from `h11_max_incomplete_event_size`)."""
    if HttpToolsProtocol is not None:
        base: type[FastHeaderDeadlineProtocol] = FastHeaderDeadlineProtocol
        if _REQUEST_TASKS:
            base = RequestTaskProtocol
            if not request_task.first_step_available():
                logger.info(
                    "python_version=<%s> | asyncio's running-task hooks are missing: a request's"
                    " first step is taken at the loop's next pass",
                    platform.python_version(),
                )
        else:
            logger.info(
                "uvicorn_version=<%s> | its request-task hooks are missing: requests are served"
                " on uvicorn's own tasks and writes",
                uvicorn.__version__,
            )
        return type(
            base.__name__,
            (base,),
            {"header_timeout_s": timeout_s, "max_header_bytes": max_header_bytes},
        )
    return type(
        "HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": timeout_s}
    )


# Descriptors a replica holds beside its HTTP connections: Redis pools, log files, MCP servers.
SPARE_DESCRIPTORS = 256


def raise_open_files_limit(max_connections: int) -> None:
    """Let the process hold `max_connections` sockets: raise the soft limit on open files (often
    1024 by default, which refused connections with "too many open files" long before
    A2A_MAX_CONNECTIONS) up to what that needs, within the hard limit; warn when the hard limit
    itself is too low."""
    needed = max_connections + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # a cap below the hard limit (macOS: kern.maxfilesperproc)
            target = soft
    if target < needed:
        logger.warning(
            "open_files_limit=<%d>, max_connections=<%d> | the open-files limit allows about %d"
            " connections; raise it (ulimit -n, the container's nofile) or lower"
            " A2A_MAX_CONNECTIONS",
            target,
            max_connections,
            max(target - SPARE_DESCRIPTORS, 0),
        )
