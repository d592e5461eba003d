"""Logging of the server process: text or one JSON object per line (LOG_FORMAT), one handler on
the root logger that every library's logger (uvicorn's too) reaches.

JSON lines carry `time`, `level`, `logger` and `message`, plus every `key=<value>` field of the
message as a key of its own (the house log style), so `task_id`, `trace_id`... can be queried.
LiteLLM logs every model call at INFO, twice: its loggers (and httpx's, which logs each request)
stay at WARNING unless LOG_LEVEL=debug.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

from app.settings import Settings

_FIELD = re.compile(r"(\w+)=<([^<>]*)>")
_RESERVED = frozenset({"time", "level", "logger", "message", "exception"})
CHATTY_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "httpx", "httpcore")
"""Libraries that log every call at INFO: quiet unless LOG_LEVEL=debug."""
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


class _SecondsOnce:
    """A record's time rendered with its whole seconds formatted once per second: a formatted
    time per record was a sixth of what a log line cost."""

    def __init__(self, render_seconds: Callable[[int], str], with_millis: str) -> None:
        self._render_seconds = render_seconds
        self._with_millis = with_millis
        self._cached: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = int(created)
        cached_second, rendered = self._cached  # one tuple: threads see a consistent pair
        if second != cached_second:
            rendered = self._render_seconds(second)
            self._cached = (second, rendered)
        return self._with_millis % (rendered, int((created - second) * 1000))


def _local_seconds(second: int) -> str:
    return time.strftime(logging.Formatter.default_time_format, time.localtime(second))


def _utc_seconds(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")


class TextFormatter(logging.Formatter):
    """`<local time>,<ms> LEVEL logger: message` (logging's own default time format)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._time = _SecondsOnce(_local_seconds, "%s,%03d")  # logging's default_msec_format

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._time(record.created)

    def format(self, record: logging.LogRecord) -> str:
        """The base class's result, built directly unless there is a traceback or stack to add
        (its generic path looks up the format's fields in the record's dict on every line)."""
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        record.asctime = self._time(record.created)
        return f"{record.asctime} {record.levelname} {record.name}: {record.message}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def __init__(self) -> None:
        super().__init__()
        self._time = _SecondsOnce(_utc_seconds, "%s.%03d+00:00")

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, object] = {
            "time": self._time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in _FIELD.findall(message):
            if key not in _RESERVED:
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _ServerHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs (so a second call replaces it).

    While the server's event loop runs (`lines_written_per_loop_pass`), the lines logged on its
    thread are written together once the loop's current pass of callbacks is over, instead of a
    system call each (two or more per request: a twentieth of a SendMessage's CPU). A line waits
    at most for the work already queued on the loop. Lines from other threads, or with no loop,
    are written at once, after any still waiting, so the order of lines holds.
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._waiting: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self._loop is None or threading.get_ident() != self._loop_thread:
            self._write_waiting()
            super().emit(record)
            return
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        if not self._waiting:
            self._loop.call_soon(self._write_waiting)
        self._waiting.append(line + self.terminator)

    def flush(self) -> None:
        self._write_waiting()
        super().flush()

    def _write_waiting(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # created in Handler.__init__
            if not self._waiting:
                return
            lines, self._waiting = self._waiting, []
            try:
                self.stream.write("".join(lines))
                self.stream.flush()
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": f"{len(lines)} log lines"}))

    @contextmanager
    def per_loop_pass(self, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
        self._loop, self._loop_thread = loop, threading.get_ident()
        try:
            yield
        finally:
            self.at_once()

    def at_once(self) -> None:
        """From now on every line is written as it is logged; those waiting are written now."""
        self._loop = None
        self._write_waiting()


def configure_logging(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Install the one root handler in the configured format and quiet the chatty libraries."""
    handler = _ServerHandler(stream or sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    # Neither format names the process or thread of a record, and finding them cost every
    # record a system call (getpid). (The logging HOWTO's "Optimization" switches, but for the
    # private one that skips the caller's lookup: that costs well under 1% of a request.)
    logging.logProcesses = logging.logMultiprocessing = logging.logThreads = False
    root = logging.getLogger()
    for old in [each for each in root.handlers if isinstance(each, _ServerHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    level = settings.log_level.upper()
    root.setLevel(level)
    for name in UVICORN_LOGGERS:
        # uvicorn is started without a log config of its own: its lines go through this handler.
        server_logger = logging.getLogger(name)
        server_logger.handlers, server_logger.propagate, server_logger.disabled = [], True, False
        server_logger.setLevel(logging.NOTSET)  # uvicorn sets LOG_LEVEL on it as it starts
    debug = level == "DEBUG"
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)


# uvicorn's one-line warnings about a request it could not even parse: the client's fault, and at
# WARNING a cheap log flood (one line per garbage connection), so they are logged at DEBUG.
_MALFORMED_HTTP = (
    "Invalid HTTP request received.",
    "Unsupported upgrade request.",
    "No supported WebSocket library detected.",
)


class _MalformedHttpAtDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.getMessage().startswith(_MALFORMED_HTTP):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def log_malformed_http_at_debug() -> None:
    """Install (once) the filter that moves uvicorn's malformed-request warnings to DEBUG."""
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(each, _MalformedHttpAtDebug) for each in server_log.filters):
        server_log.addFilter(_MalformedHttpAtDebug())


# Set while a request a binding logs itself is served (`Metrics.request`): its line says the A2A
# method, outcome, owner and duration, so uvicorn's access line for it would be a second, poorer
# line per request (and ~10% of a SendMessage's CPU went to the log). Other routes (the card,
# health, metrics, the console) keep uvicorn's access line.
_LOGGED_BY_A_BINDING: ContextVar[bool] = ContextVar("logged_by_a_binding", default=False)


def logged_by_a_binding() -> None:
    """The request being served gets a line of its own: no uvicorn access line for it."""
    _LOGGED_BY_A_BINDING.set(True)


def is_logged_by_a_binding() -> bool:
    """Whether the request being served gets a line of its own (so no uvicorn access line)."""
    return _LOGGED_BY_A_BINDING.get()


class _OneLinePerRequest(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _LOGGED_BY_A_BINDING.get()


def one_line_per_request() -> None:
    """Install (once) the filter that drops uvicorn's access line for a request a binding logs."""
    access_log = logging.getLogger("uvicorn.access")
    if not any(isinstance(each, _OneLinePerRequest) for each in access_log.filters):
        access_log.addFilter(_OneLinePerRequest())


@contextmanager
def lines_written_per_loop_pass(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While this runs on `loop`'s thread, the server's log lines logged there are written once
    per pass of the loop (see `_ServerHandler`); all are written when it ends, or once
    `lines_written_at_once` is called."""
    handler = _server_handler()
    if handler is None:  # logging configured by someone else: theirs as it is
        yield
        return
    with handler.per_loop_pass(loop):
        yield


def lines_written_at_once() -> None:
    """Every log line written as it is logged from now on, those waiting now. For a server about
    to stop: uvicorn re-raises the signal that stopped it once it has shut down, and the default
    action ends the process there, before any code after it runs."""
    handler = _server_handler()
    if handler is not None:
        handler.at_once()


def _server_handler() -> _ServerHandler | None:
    handlers = logging.getLogger().handlers
    return next((each for each in handlers if isinstance(each, _ServerHandler)), None)
