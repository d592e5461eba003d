"""A loopback TCP proxy a test can cut: a network partition between a replica and its Redis.

    replica --REDIS_URL=redis://127.0.0.1:<proxy port>--> Blackhole --> redis-server

Flowing, it forwards both ways. `cut()` black-holes it the way a partition does, not the way a
dead server does: every connection stays open and nothing crosses it either way (what was sent
waits in the kernel's buffers, as behind a lost route), and new connections are accepted but
nothing they send is forwarded. The replica learns nothing from its sockets, only that no answer
comes. `heal()` drops every connection that lived through the cut (the replica reconnects, as
after a partition long enough for TCP to give up), or with `resume=True` lets the held bytes
through, late (as after a short partition: what the replica wrote during the cut reaches Redis
after the cut, when someone else may hold its turns). `cut_on(pattern)` cuts at one exact
command: the first that a replica sends with `pattern` in it is held, and everything after it.

Runs its own event loop in a thread, so a test drives it from synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.e2e.harness import free_port


class _Link:
    """One client connection and its connection to Redis."""

    __slots__ = ("client", "upstream")

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            writer.close()


class Blackhole:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.accepted = 0  # connections accepted so far (while cut too)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._links: set[_Link] = set()
        self._flowing: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._trigger: bytes | None = None
        self.tripped = threading.Event()  # set when `cut_on`'s pattern went by

    # --- driven from the test's thread ------------------------------------------------------

    def start(self) -> Blackhole:
        self._thread.start()
        self._call(self._serve())
        return self

    def cut(self) -> None:
        """From now on nothing crosses; connections stay open and new ones are accepted."""
        self._call(self._set_flowing(False))

    def cut_on(self, pattern: bytes) -> None:
        """Cut as the first write of a replica holding `pattern` reaches the proxy: that write
        is held (with all that follows it), the way a partition holds the command under way."""
        self.tripped.clear()
        self._call(self._arm(pattern))

    def heal(self, *, resume: bool = False) -> None:
        """Forward again: the connections held through the cut are dropped (the replica
        reconnects), or with `resume` they carry what was held, and go on."""
        self._call(self._heal(resume))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    @contextlib.contextmanager
    def cut_off(self, *, resume: bool = False) -> Iterator[None]:
        """`with proxy.cut_off(): ...`: cut for the block, healed however it ends."""
        self.cut()
        try:
            yield
        finally:
            self.heal(resume=resume)

    def __enter__(self) -> Blackhole:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    # --- on the proxy's loop ----------------------------------------------------------------

    async def _serve(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _arm(self, pattern: bytes) -> None:
        self._trigger = pattern

    async def _heal(self, resume: bool) -> None:
        if not resume:
            links, self._links = self._links, set()
            for link in links:
                link.close()
        await self._set_flowing(True)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in self._links:
            link.close()
        self._links.clear()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await asyncio.sleep(0.01)  # the transports closed above finish closing

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, upstream=True),
                self._pump(up_reader, writer),
                return_exceptions=True,
            )
        finally:
            self._links.discard(link)
            link.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        """Forward while flowing; while cut, read nothing more (the sender's bytes wait in the
        kernel) and hold what was read until the link flows again or is dropped."""
        assert self._flowing is not None
        while True:
            await self._flowing.wait()
            data = await source.read(65536)
            if not data:
                break
            if upstream and self._trigger is not None and self._trigger in data:
                self._trigger = None
                self._flowing.clear()
                self.tripped.set()
            await self._flowing.wait()
            if sink.is_closing():
                break
            sink.write(data)
            await sink.drain()
        sink.close()
