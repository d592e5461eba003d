"""JournalFollower: the one reader of a task's journal, for every client of it.

    per-task journal (positions 1, 2, 3, ...)
            |  tail(after): read, wait (read_block_s), read ...  until the task ends or pauses
            +--> SSE streams and subscribers   (snapshot_then_tail; None = keep-alive)
            +--> blocking sends                (until_settled: the local turn first, no reads)
            +--> push delivery                 (agent/runtime/push.py, from its stored cursor)

Every open stream is a generator suspended in `tail`, so the details here are what an idle
stream costs: no generator around another, nothing kept that was passed on, no timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable
from typing import Protocol

from agent.runtime.admission import Slots
from agent.runtime.drain import DRAINED, Drain
from agent.runtime.turn import Turn
from stores.base import TaskStore
from stores.codec import snapshot_event, stored_entry
from stores.models import JournalEntry, TaskRecord, TaskSnapshot, TaskState


class LastEntries(list[JournalEntry]):
    """A stream's last entries: the response ends with them, in the same write (no write of
    its own for the end of the body)."""

    __slots__ = ()


def ends_stream(state: TaskState | None, *, at_interrupt: bool) -> bool:
    """Whether an event reporting `state` (None: an artifact update) is a stream's last."""
    return state is not None and (state.is_terminal or (at_interrupt and state.is_interrupted))


class LocalTurns(Protocol):
    """The turns running in this process (the TaskRunner), waited for without reading."""

    async def until_local_turn_ends(self, task_id: str, *, owner: str) -> Turn | None: ...


class JournalFollower:
    def __init__(
        self,
        tasks: TaskStore,
        *,
        read_block_s: float,
        drain: Drain | None = None,
        local: LocalTurns | None = None,
    ) -> None:
        """`read_block_s`: how long a read waits for news (a stream pings after each such wait);
        `drain`: ends the reads that follow it; `local`: this process's turns, if it runs any."""
        self._tasks = tasks
        self._read_block_s = read_block_s
        self._drain = drain
        self._local = local

    @property
    def draining(self) -> bool:
        return self._drain is not None and self._drain.started

    async def until_settled(
        self, task_id: str, *, owner: str, after: int, until_drain: bool = False
    ) -> TaskRecord | None:
        """Wait until the task ends or waits for input (read from the journal, not polled);
        with `until_drain`, or until this server starts draining.

        A turn running in this process is waited for without reading its journal (a blocking
        send would otherwise cost a store read per event); once it is over here, the snapshot it
        recorded last says how it ended (and is returned), or the journal is followed if it went
        on elsewhere.
        None when the wait ended otherwise (drained, or the journal said it settled)."""
        if self._local is not None:
            local_turn = self._local.until_local_turn_ends(task_id, owner=owner)
            drain = self._drain if until_drain else None
            ran_here = await (drain.unless_drained(local_turn) if drain else local_turn)
            if ran_here is DRAINED:
                return None
            if ran_here is not None:
                if ran_here.settled is not None:
                    return ran_here.settled  # as the store took it: not read back
                snapshot = await self._tasks.get(task_id, owner=owner)
                if snapshot is None or ends_stream(snapshot.task.status.state, at_interrupt=True):
                    return snapshot
                after = max(after, snapshot.position)  # it went on elsewhere: follow it from here
        async for _ in self.tail(
            task_id, owner=owner, after=after, at_interrupt=True, until_drain=until_drain
        ):
            pass
        return None

    async def until_past(
        self, record: TaskRecord, generation: int, *, timeout_s: float
    ) -> TaskRecord | None:
        """The task once its snapshot is past `generation` (A2A 1.1's long poll), read from the
        journal's blocking read (woken by a write on any replica), not polled; None after
        `timeout_s`, when this server starts draining, or if the task is gone (the caller
        reads it as it stands).

        The journal may pass `generation` with events that carry no snapshot (answer chunks,
        progress): the wait goes on from them, so the task returned is exactly at its
        generation and a client polling again from it never spins."""
        task_id, owner, drain = record.task.id, record.owner, self._drain
        after = max(generation, record.position)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (left := deadline - loop.time()) > 0:
            read = self._tasks.read(task_id, owner=owner, after=after, timeout_s=left)
            entries = await (drain.unless_drained(read) if drain is not None else read)
            if entries is DRAINED:
                return None
            if entries:
                after = entries[-1].position
            snapshot = await self._tasks.get(task_id, owner=owner)
            if snapshot is None or snapshot.position > generation:
                return snapshot
            if not entries and snapshot.position <= after and loop.time() < deadline - 0.05:
                # the read came back empty early (a store that does not wait for a task it
                # lacks): no tight loop
                await asyncio.sleep(min(0.05, left))
        return None

    def snapshot_then_tail(
        self, record: TaskRecord, *, owner: str, at_interrupt: bool
    ) -> AsyncGenerator[list[JournalEntry] | None, None]:
        """The task as it stands, then its events. The snapshot says the task goes on, so the
        first read may wait (it answers at once if entries came meanwhile): one store call per
        new subscriber, not three."""
        if record.stored is None:
            snapshot = JournalEntry(position=record.position, event=TaskSnapshot(task=record.task))
        else:  # written as it is: not parsed, nor serialized again
            snapshot = stored_entry(record.position, snapshot_event(record.stored))
        return self.tail(
            record.task.id,
            owner=owner,
            after=record.position,
            at_interrupt=at_interrupt,
            wait_first=True,
            first=snapshot,
        )

    async def tail(
        self,
        task_id: str,
        *,
        owner: str,
        after: int,
        at_interrupt: bool,
        until_drain: bool = True,
        wait_first: bool = False,
        first: JournalEntry | None = None,
    ) -> AsyncGenerator[list[JournalEntry] | None, None]:
        """Journal entries after `after` until the task ends (or pauses, with `at_interrupt`),
        after `first` when given (a snapshot: it ends the stream too if its task has ended);
        None after each wait of `read_block_s` that brought nothing (an SSE stream sends a
        keep-alive comment then: no timer of its own per stream).

        Entries come in the lists the store reads them in (up to the stream's last): a stream
        writes what one read brought in one write, not one per event.

        With `until_drain` it also ends, after the entries it has passed on, when this server
        starts draining: a blocked read is given up at once. Unless `wait_first` (the caller knows
        the task was going on at `after`), the first read does not wait: a reader already at the
        end of a task that has ended must not hang.
        """
        # `first` is yielded here, not by a generator around this one: one frame fewer held by
        # every idle stream.
        if first is not None:
            if ends_stream(first.state, at_interrupt=at_interrupt):
                yield LastEntries([first])
                return
            yield [first]
            del first  # an idle stream holds no copy of the task
        drain = self._drain if until_drain else None
        block_s = self._read_block_s if wait_first else 0.0
        while True:
            if drain is not None and drain.started:
                return
            read = self._tasks.read(task_id, owner=owner, after=after, timeout_s=block_s)
            entries = await (drain.unless_drained(read) if drain is not None and block_s else read)
            if entries is DRAINED:
                return
            if not entries:
                if await self._over_meanwhile(
                    task_id, owner=owner, after=after, at_interrupt=at_interrupt
                ):
                    return
                if block_s:
                    yield None  # a whole wait without news: the stream's keep-alive
                block_s = self._read_block_s
                continue
            for n, entry in enumerate(entries):
                if ends_stream(entry.state, at_interrupt=at_interrupt):
                    yield LastEntries(entries[: n + 1])
                    return
            after = entries[-1].position
            yield entries
            del entry, entries  # a reader waiting for more holds nothing it has passed on

    async def _over_meanwhile(
        self, task_id: str, *, owner: str, after: int, at_interrupt: bool
    ) -> bool:
        """Whether a reader at `after` that found nothing new is done: the task expired, or its
        snapshot (no newer than `after`) says it ended."""
        record = await self._tasks.get(task_id, owner=owner)
        if record is None:
            return True  # expired while we waited
        return record.position <= after and ends_stream(
            record.task.status.state, at_interrupt=at_interrupt
        )


class EntryStream:
    """The journal entries of one stream, holding one of `slots` (the owner's) until it is
    closed (the SSE response closes it however it ends). Close it even if it was never
    iterated: an async generator that never started runs no `finally` of its own."""

    __slots__ = ("_entries", "_owner", "_slots")

    def __init__(
        self, entries: AsyncGenerator[list[JournalEntry] | None, None], slots: Slots, owner: str
    ) -> None:
        self._entries = entries
        self._slots: Slots | None = slots
        self._owner = owner

    def __aiter__(self) -> EntryStream:
        return self

    def __anext__(self) -> Awaitable[list[JournalEntry] | None]:
        # The generator's own step, not a coroutine around it: every idle stream waits in it.
        return self._entries.__anext__()

    async def aclose(self) -> None:
        try:
            await self._entries.aclose()
        finally:
            slots, self._slots = self._slots, None
            if slots is not None:
                slots.give_back(self._owner)
