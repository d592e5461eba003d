"""Where a running turn's streamed answer chunks go: a `ChunkSink`, which each task store provides
(`TaskStore.chunk_sink`), so that how chunks are written is the store's business, not the turn's.

    turn --send(chunk)--> ChunkSink --> the task's journal, in the order sent
         --take()------> the chunks no write has taken yet: they go in the turn's next publish
         --written()---> every chunk sent is in the journal (or what writing them raised)

In memory a write costs nothing to wait for, so the sink writes at once (`stores.memory.tasks`);
against a store a write waits for (a network round trip), `WritingBehind` writes behind the
turn, in batches.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence

from stores.ids import new_event_id

WriteRetry = Callable[[Callable[[], Awaitable[int]]], Awaitable[int]]
"""How a turn retries a write while the store is unavailable (the caller's policy: a turn waits
for the store to come back rather than fail)."""

ChunkBatchWrite = Callable[[Sequence[bytes], str], Awaitable[int]]
"""Write a batch of chunks (stored events) in one atomic step under an event id."""

MAX_UNWRITTEN_CHUNKS = 256
"""Chunks a turn may run ahead of the store by before it waits for the write under way."""


class ChunkSink(ABC):
    """One turn's answer chunks (their stored form) on their way to the task's journal."""

    __slots__ = ()

    @abstractmethod
    async def send(self, chunk: bytes) -> None:
        """Queue a chunk after those sent before. May wait (a store far behind) and raises what
        writing earlier chunks raised (LeaseLost, say): the turn stops."""

    @abstractmethod
    def take(self) -> list[bytes]:
        """The chunks sent that no write has taken yet, handed to the caller: its next publish
        writes them before its event, in the same step (`JournalWrite.chunks`)."""

    @abstractmethod
    async def written(self) -> None:
        """Wait until every chunk sent (and not taken) is in the journal; raises what writing
        them raised."""

    @abstractmethod
    async def stop(self) -> None:
        """The turn stopped without ending (shutdown, a lost lease): chunks not yet written are
        left, as a crash would leave them (the next holder resumes from the checkpoint)."""


class WritingBehind(ChunkSink):
    """Chunks written behind the turn: those that come while a write is out go together in the
    next one (a model that streams faster than the store writes costs one write per burst, not
    one per chunk; a slow one, one per chunk). The turn's other writes wait for them
    (`written`), so the journal keeps the turn's order."""

    __slots__ = ("_retry", "_unwritten", "_write", "_writer")

    def __init__(self, write: ChunkBatchWrite, *, retry: WriteRetry) -> None:
        self._write = write
        self._retry = retry
        self._unwritten: list[bytes] = []
        self._writer: asyncio.Task[None] | None = None

    async def send(self, chunk: bytes) -> None:
        self._unwritten.append(chunk)
        writer = self._writer
        if writer is None:
            self._writer = asyncio.create_task(self._write_all())
        elif writer.done() or len(self._unwritten) >= MAX_UNWRITTEN_CHUNKS:
            await self.written()  # its error, or back-pressure from a slow store

    def take(self) -> list[bytes]:
        chunks, self._unwritten = self._unwritten, []
        return chunks

    async def written(self) -> None:
        writer = self._writer
        if writer is None:
            return
        try:
            await writer
        except asyncio.CancelledError:
            # The turn itself cancelled while it waited (the write went with it: the chunks are
            # dropped, as a canceled turn's next ones would be), or the write alone was stopped.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            if writer.done() and self._writer is writer:
                self._writer = None

    async def stop(self) -> None:
        writer, self._writer = self._writer, None
        self._unwritten = []
        if writer is None:
            return
        if not writer.done():
            writer.cancel()
            await asyncio.wait([writer])
        if not writer.cancelled():
            writer.exception()  # seen: a lost lease, say, is the turn's end already

    async def _write_all(self) -> None:
        """Write the chunks sent, in order, each batch in one store call, until none is left."""
        try:
            while self._unwritten:
                batch, self._unwritten = self._unwritten, []
                await self._write_batch(batch)
        except BaseException:
            self._unwritten = []  # the turn stops: `written` raises this to it
            raise
        self._writer = None

    async def _write_batch(self, batch: list[bytes]) -> None:
        event_id = new_event_id()  # the batch's, the same for every retry
        await self._retry(lambda: self._write(batch, event_id))
