"""A webhook receiver on 127.0.0.1 for the push-notification tests: it records every request
(path, headers, JSON body) and answers each path as told: 200, a number of 500s first, or a hang.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


class WebhookReceiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.failures_left: dict[str, int] = {}
        self.hanging: set[str] = set()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.received.append(Received(self.path, headers, body))
                if self.path in receiver.hanging:
                    receiver.release.wait(30)
                failures = receiver.failures_left.get(self.path, 0)
                if failures:
                    receiver.failures_left[self.path] = failures - 1
                    self.send_response(500)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def bodies(self, path: str) -> list[Any]:
        return [item.body for item in self.received if item.path == path]

    def wait_for(self, path: str, predicate: Any, timeout: float = 15.0) -> list[Received]:
        """Wait until the requests to `path` satisfy `predicate(list of Received)`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = [item for item in self.received if item.path == path]
            if predicate(got):
                return got
            time.sleep(0.05)
        got = [item for item in self.received if item.path == path]
        raise AssertionError(f"webhook {path}: condition not met in {timeout}s; got {got!r}")
