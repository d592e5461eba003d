"""A fake model whose replies wait at a gate the test opens: turns stay running as long as needed.

The chaos tests must know, without timing anything, that a turn is still running while the rest of
a burst arrives (to count refusals against a limit, to have exactly one turn hold a conversation,
to stop a server in the middle of a turn). `GatedLLM` is the suite's `FakeLLMServer` (same script
queue, same "echo: <last user text>" fallback, same recorded requests) with one addition: a request
whose last user message contains the marker of a closed gate is recorded at once (so the test can
count the turns that reached the model) and answered only when the gate opens, or dropped if the
server under test hangs up first.

    with llm.gate(marker) as gate:
        ...                      # fire the burst; llm.waiting(marker) = turns held at the model
        gate.open()              # (also opened on leaving the block, whatever happens)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.fakes.fake_llm import FakeLLMServer, Step, last_user_text


class Gate:
    """Opened once, from any thread; waiters live on the fake server's event loop."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self._lock = threading.Lock()
        self._open = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open

    def open(self) -> None:
        with self._lock:
            self._open = True
            waiters, self._waiters = self._waiters, []
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    async def wait(self, disconnected: asyncio.Event) -> bool:
        """True once the gate is open; False if the client went away first."""
        event = asyncio.Event()
        with self._lock:
            if self._open:
                return True
            self._waiters.append((asyncio.get_running_loop(), event))
        opened = asyncio.ensure_future(event.wait())
        gone = asyncio.ensure_future(disconnected.wait())
        try:
            await asyncio.wait({opened, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
            gone.cancel()
        return event.is_set()


class GatedLLM(FakeLLMServer):
    """`FakeLLMServer` plus gates keyed on a marker in the last user message."""

    def __init__(self) -> None:
        super().__init__()
        self._gates: dict[str, Gate] = {}
        self._gates_lock = threading.Lock()

    @contextmanager
    def gate(self, marker: str) -> Iterator[Gate]:
        """Hold every model call for `marker` until `open()` (or the end of the block)."""
        g = Gate(marker)
        with self._gates_lock:
            self._gates[marker] = g
        try:
            yield g
        finally:
            g.open()
            with self._gates_lock:
                self._gates.pop(marker, None)

    def waiting(self, marker: str) -> int:
        """Model calls received for `marker` so far (held at its gate while it is closed)."""
        return len(self.records_for(marker))

    def _gate_for(self, user_text: str) -> Gate | None:
        with self._gates_lock:
            return next((g for m, g in self._gates.items() if m in user_text), None)

    async def _respond(
        self, body: dict[str, Any], step: Step, send: Any, disconnected: asyncio.Event
    ) -> None:
        gate = self._gate_for(last_user_text(body))
        if gate is not None and not await gate.wait(disconnected):
            return
        await super()._respond(body, step, send, disconnected)
