"""A loopback TCP proxy in front of Redis that counts what its clients send: commands (parsed
from the RESP they write), round trips (request bursts per connection) and bytes each way. Used by
bench/redis_commands.py to count what a turn costs the Redis backend."""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass, field

from loadgen import free_port


@dataclass
class Counters:
    commands: collections.Counter[str] = field(default_factory=collections.Counter)
    round_trips: int = 0
    bytes_up: int = 0
    bytes_down: int = 0

    def copy(self) -> Counters:
        return Counters(collections.Counter(self.commands), self.round_trips, self.bytes_up,
                        self.bytes_down)  # fmt: skip

    def __sub__(self, other: Counters) -> Counters:
        c = collections.Counter(self.commands)
        c.subtract(other.commands)
        return Counters(
            +c,
            self.round_trips - other.round_trips,
            self.bytes_up - other.bytes_up,
            self.bytes_down - other.bytes_down,
        )


class _RespRequests:
    """Incremental parser of RESP requests (arrays of bulk strings); yields command names."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[str]:
        self.buf += data
        names = []
        while True:
            parsed = self._one()
            if parsed is None:
                return names
            names.append(parsed)

    def _one(self) -> str | None:
        buf = self.buf
        if not buf:
            return None
        if buf[:1] != b"*":  # inline command (redis-py never sends these)
            end = buf.find(b"\r\n")
            if end < 0:
                return None
            self.buf = buf[end + 2 :]
            return buf[:end].split(b" ", 1)[0].decode(errors="replace").upper()
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        n = int(buf[1:end])
        pos = end + 2
        first = None
        for _ in range(n):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                return None
            size = int(buf[pos + 1 : end])
            start = end + 2
            if len(buf) < start + size + 2:
                return None
            if first is None:
                first = buf[start : start + size]
            pos = start + size + 2
        self.buf = buf[pos:]
        return (first or b"").decode(errors="replace").upper()


class CountingProxy:
    """A loopback TCP proxy in front of Redis that counts what clients send."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.counters = Counters()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> CountingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(5)
        return self

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        parser = _RespRequests()
        state = {"answered": True}

        async def up() -> None:
            while data := await cr.read(65536):
                names = parser.feed(data)
                with self._lock:
                    if state["answered"]:
                        self.counters.round_trips += 1
                        state["answered"] = False
                    self.counters.bytes_up += len(data)
                    self.counters.commands.update(names)
                sw.write(data)
                await sw.drain()
            sw.close()

        async def down() -> None:
            while data := await sr.read(65536):
                with self._lock:
                    state["answered"] = True
                    self.counters.bytes_down += len(data)
                cw.write(data)
                await cw.drain()
            cw.close()

        await asyncio.gather(up(), down(), return_exceptions=True)

    def snapshot(self) -> Counters:
        with self._lock:
            return self.counters.copy()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
