"""A uvicorn server run on a thread of the test process, on real sockets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def running(server: uvicorn.Server) -> Iterator[uvicorn.Server]:
    """`server` serving until the block ends (then told to exit, and waited for)."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(15)
    assert not thread.is_alive(), "the server did not stop"
