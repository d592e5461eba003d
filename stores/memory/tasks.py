"""The in-memory task store: snapshots, journals (their stored form) and the waits on them."""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import count, islice

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ChunkSink,
    Fence,
    JournalWrite,
    PositionConflict,
    StateConflict,
    StoreFull,
    TaskGone,
    TaskPage,
    TaskQuery,
    TaskStore,
    TaskUnreadable,
    WriteRetry,
)
from stores.codec import dump_event, dump_task, load_task, snapshot_event, stored_entry
from stores.deadlines import CoarseDeadlines
from stores.memory.leases import InMemoryLeaseStore
from stores.memory.support import MAX_TASKS, IdleSweeper, TaskDependent, room_to_make
from stores.models import (
    JournalEntry,
    Task,
    TaskBytes,
    TaskRecord,
    TaskState,
    event_state,
    utc_now,
)
from stores.paging import decode_cursor, encode_cursor

logger = logging.getLogger(__name__)


# A journal entry's head (kind, state) as one byte: its index here; 0, unknown (parse the JSON).
_HEADS: list[tuple[str | None, TaskState | None]] = [
    (None, None),
    ("artifact", None),
    ("message", None),
    *((kind, state) for kind in ("status", "task") for state in TaskState),
]
_HEAD_CODES = {head: code for code, head in enumerate(_HEADS)}


@dataclass
class _StoredTask:
    """A task as the store keeps it: its snapshot and journal in their stored (JSON) form, so
    nothing a caller holds is shared with the store, plus the few fields lists filter on."""

    # The journal: its events (the last one at `position`) and, a byte each, their heads: the
    # kind and state of those the store wrote itself, so a reader need not look for them in the
    # JSON (`_HEADS`; 0 for an event given as bytes). Not a tuple per entry: those were most of
    # the objects the collector had to walk, ~24 a turn; bytes and a bytearray it never walks.
    events: deque[bytes]
    heads: bytearray = field(default_factory=bytearray)
    snapshot: bytes = b""
    snapshot_position: int = 0  # of the entry the snapshot reflects
    state: TaskState = TaskState.UNSPECIFIED
    context_id: str = ""
    timestamp_ms: int = 0
    status_timestamp: datetime = field(default_factory=utc_now)
    position: int = 1  # of the last journal entry
    touched: float = 0.0
    # The reads waiting for the next entry (True when it came, False at their deadline).
    readers: set[asyncio.Future[bool]] | None = None
    last_event_id: str = ""  # so a retried publish is not journaled twice
    last_event_position: int = 0
    # The snapshot as last known to load (written from a task, or read back): one changed behind
    # the store's back is loaded once before it is handed out.
    loadable: bytes | None = None

    @classmethod
    def first(cls, task: Task, *, journal_max: int) -> _StoredTask:
        """A new task: its journal starts with the task itself at position 1."""
        stored = cls(events=deque(maxlen=journal_max), touched=time.monotonic())
        stored.keep(task, 1)
        stored.events.append(snapshot_event(stored.snapshot))
        stored.heads.append(_HEAD_CODES[("task", stored.state)])
        return stored

    def keep(self, task: Task, position: int, stored: bytes | None = None) -> None:
        self.snapshot = self.loadable = stored if stored is not None else dump_task(task)
        self.snapshot_position = position
        self.state, self.context_id = task.status.state, task.context_id
        self.status_timestamp = task.status.timestamp
        self.timestamp_ms = int(task.status.timestamp.timestamp() * 1000)

    def task(self, task_id: str) -> Task:
        snapshot = self.snapshot
        try:
            task = load_task(snapshot)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise TaskUnreadable(task_id) from exc
        self.loadable = snapshot
        return task


class InMemoryTaskStore(TaskStore):
    def __init__(
        self,
        *,
        ttl_s: float = DEFAULT_TASK_TTL_S,
        journal_max: int = 10_000,
        max_tasks: int = MAX_TASKS,
        leases: InMemoryLeaseStore | None = None,
        dependents: Iterable[TaskDependent] = (),
    ) -> None:
        self._sweeper = IdleSweeper(ttl_s)
        self._journal_max = journal_max
        self._max_tasks = max_tasks
        self._tasks: dict[tuple[str, str], _StoredTask] = {}
        # The tasks that ended, in the order they did: the first to drop when the store is full
        # (kept in order, not found by sorting every task at the limit: that showed in profiles).
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._leases = leases  # checks fenced writes; without it, fences are not checked
        # What other stores keep per task (its lease, checkpoint, push configs): told when a task
        # is dropped (to make room, or idle past the TTL), so that it goes with the task.
        self._dependents = tuple(dependents)
        self._deadlines = CoarseDeadlines(expired=False)

    async def create(self, task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        if fence is not None and self._leases is not None:
            self._leases.check_creation(task.id, owner=owner, fence=fence)
        for key, expired in self._sweeper.sweep(self._tasks):
            self._ended.pop(key, None)
            self._forget(key, expired)
        if len(self._tasks) >= self._max_tasks:
            self._make_room()
        stored = _StoredTask.first(task, journal_max=self._journal_max)
        self._tasks[(owner, task.id)] = stored
        if stored.state.is_terminal:
            self._ended[(owner, task.id)] = None
        return TaskRecord(task=task, owner=owner, position=1, stored=stored.snapshot)

    async def void(self, task_id: str, *, owner: str, by: str) -> bool:
        if (owner, task_id) in self._tasks:
            return False
        if self._leases is not None:
            self._leases.void(task_id, owner=owner, by=by)
        return True

    def _make_room(self) -> None:
        """Drop the tasks that ended longest ago (with their journals): a hundredth of the
        capacity at once, so that the log line comes once per hundredth. StoreFull if every task
        is still active."""
        wanted = room_to_make(len(self._tasks), self._max_tasks)
        dropped = 0
        while self._ended and dropped < wanted:
            key, _ = self._ended.popitem(last=False)
            stored = self._tasks.pop(key, None)
            if stored is not None:
                dropped += 1
                self._forget(key, stored)
        if not dropped:
            raise StoreFull(
                f"This server holds its limit of {self._max_tasks} tasks and none has ended;"
                " retry once some have"
            )
        logger.info("dropped %d ended tasks: the store is at its limit", dropped)

    def _forget(self, key: tuple[str, str], stored: _StoredTask) -> None:
        owner, task_id = key
        for dependent in self._dependents:
            dependent.forget_task(owner, task_id, stored.context_id)

    async def get(self, task_id: str, *, owner: str) -> TaskRecord | None:
        stored = self._tasks.get((owner, task_id))
        if stored is None:
            return None
        return TaskRecord(
            task=stored.task(task_id),
            owner=owner,
            position=stored.snapshot_position,
            stored=stored.snapshot,
        )

    async def get_bytes(self, task_id: str, *, owner: str) -> TaskBytes | None:
        # Handed over as stored (bytes share nothing), not loaded into a task to be dumped again.
        stored = self._tasks.get((owner, task_id))
        if stored is None:
            return None
        if stored.loadable is not stored.snapshot:
            stored.task(task_id)  # TaskUnreadable if it is not
        return TaskBytes(stored.snapshot, stored.snapshot_position)

    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        matching = [
            (stored.timestamp_ms, task_id, stored)
            for (task_owner, task_id), stored in self._tasks.items()
            if task_owner == owner
            and (query.context_id is None or stored.context_id == query.context_id)
            and (query.state is None or stored.state == query.state)
            and (query.status_after is None or stored.status_timestamp >= query.status_after)
        ]
        matching.sort(key=lambda row: (row[0], row[1]), reverse=True)
        start = 0
        if query.page_token:
            cursor = decode_cursor(query.page_token)
            start = next(
                (i for i, row in enumerate(matching) if (row[0], row[1]) < cursor),
                len(matching),
            )
        page = matching[start : start + query.page_size]
        more = start + query.page_size < len(matching)
        token = encode_cursor(page[-1][0], page[-1][1]) if more and page else ""
        tasks: builtins.list[Task] = []
        positions: builtins.list[int] = []
        for _, task_id, stored in page:
            try:
                tasks.append(stored.task(task_id))
            except TaskUnreadable:  # one unreadable task must not fail the whole list
                logger.warning("task_id=<%s> | left out of a task list: cannot be read", task_id)
                continue
            positions.append(stored.snapshot_position)
        return TaskPage(
            tasks=tasks, next_page_token=token, total_size=len(matching), positions=positions
        )

    async def publish(self, task_id: str, write: JournalWrite, *, owner: str) -> int:
        event_id = write.event_id
        stored = self._writable(task_id, owner=owner, event_id=event_id, fence=write.fence)
        if stored is None:
            return self._tasks[(owner, task_id)].last_event_position  # a retry: journaled once
        if write.if_position is not None and stored.position != write.if_position:
            raise PositionConflict(task_id, expected=write.if_position, current=stored.position)
        if write.if_state is not None and stored.state != write.if_state:
            raise StateConflict(f"task {task_id!r} is no longer in state {write.if_state}")
        if write.chunks:
            self._append(stored, write.chunks, None, "artifact", None)
        event = write.event
        kind, state = (None, None) if isinstance(event, bytes) else (event.kind, event_state(event))
        self._append(stored, [dump_event(event)], event_id, kind, state)
        if write.snapshot is not None:
            stored.keep(write.snapshot, stored.position, write.snapshot_stored)
            if stored.state.is_terminal:
                self._ended[(owner, task_id)] = None  # a terminal state is the last one
        return stored.position

    async def publish_chunks(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        event_id: str | None = None,
        fence: Fence | None = None,
    ) -> int:
        return self.publish_chunks_now(task_id, events, owner=owner, fence=fence, event_id=event_id)

    def publish_chunks_now(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        fence: Fence | None = None,
        event_id: str | None = None,
    ) -> int:
        """`publish_chunks`, done before it returns (what this store's chunk sink writes with)."""
        stored = self._writable(task_id, owner=owner, event_id=event_id, fence=fence)
        if stored is None:
            return self._tasks[(owner, task_id)].last_event_position
        self._append(stored, events, event_id, "artifact", None)
        return stored.position

    def chunk_sink(
        self, task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        """Chunks written at once: there is nothing to wait for (`retry` has nothing to do)."""
        return _WritingAtOnce(self, task_id, owner=owner, fence=fence)

    def _writable(
        self, task_id: str, *, owner: str, event_id: str | None, fence: Fence | None
    ) -> _StoredTask | None:
        """The task a write goes to; None if `event_id` was its last write (a retry)."""
        stored = self._tasks.get((owner, task_id))
        if stored is None:
            raise TaskGone(f"task {task_id!r} does not exist (or expired)")
        if event_id and stored.last_event_id == event_id:
            return None
        if fence is not None and self._leases is not None:
            self._leases.check(task_id, owner=owner, fence=fence)
        return stored

    @staticmethod
    def _append(
        stored: _StoredTask,
        events: Sequence[bytes],
        event_id: str | None,
        kind: str | None,
        state: TaskState | None,
    ) -> None:
        stored.events.extend(events)
        stored.heads += bytes((_HEAD_CODES.get((kind, state), 0),)) * len(events)
        if len(stored.heads) > len(stored.events):  # the deque dropped its oldest
            del stored.heads[: len(stored.heads) - len(stored.events)]
        stored.position += len(events)
        if event_id:
            stored.last_event_id, stored.last_event_position = event_id, stored.position
        stored.touched = time.monotonic()
        readers, stored.readers = stored.readers, None
        for reader in readers or ():
            if not reader.done():
                reader.set_result(True)

    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> builtins.list[JournalEntry]:
        stored = self._tasks.get((owner, task_id))
        if stored is None:
            return []
        if stored.position <= after and timeout_s > 0:
            # Wait for the next entry: a future and a shared deadline, no task nor timer of its
            # own, and no frame beyond this one (every idle stream waits here).
            reader: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            if stored.readers is None:
                stored.readers = set()
            stored.readers.add(reader)
            slot = self._deadlines.add(reader, timeout_s)
            try:
                if not await reader:  # the deadline came first
                    return []
            finally:
                self._deadlines.discard(reader, slot)
                if stored.readers is not None:
                    stored.readers.discard(reader)
        # Positions are consecutive: skip to the first one after `after` in C, not entry by entry
        # (a reader of a long answer reads once per chunk).
        first = stored.position - len(stored.events) + 1
        skip = max(0, after - first + 1)
        return [
            JournalEntry(position=position, stored=raw, kind=_HEADS[head][0], state=_HEADS[head][1])
            if head
            else stored_entry(position, raw)
            for position, raw, head in zip(
                count(first + skip), islice(stored.events, skip, None), stored.heads[skip:]
            )
        ]


class _WritingAtOnce(ChunkSink):
    """A write that waits for nothing needs no task writing behind the turn: the chunks of a
    burst go in one write when the turn's step ends (or before its next event, `written`), and
    by the time a stream's reader wakes the journal holds them all."""

    __slots__ = ("_error", "_fence", "_owner", "_store", "_task_id", "_unwritten")

    def __init__(
        self, store: InMemoryTaskStore, task_id: str, *, owner: str, fence: Fence | None
    ) -> None:
        self._store = store
        self._task_id, self._owner, self._fence = task_id, owner, fence
        self._unwritten: builtins.list[bytes] = []
        self._error: Exception | None = None  # of a write at the step's end, raised at `written`

    async def send(self, chunk: bytes) -> None:
        self._unwritten.append(chunk)
        if self._error is not None:
            await self.written()  # raises it: the turn stops
        elif len(self._unwritten) == 1:
            asyncio.get_running_loop().call_soon(self._write)

    def take(self) -> builtins.list[bytes]:
        return []  # none is left for the caller's write: `written` writes them first, at once

    async def written(self) -> None:
        self._write()
        error, self._error = self._error, None
        if error is not None:
            raise error

    async def stop(self) -> None:
        self._unwritten = []

    def _write(self) -> None:
        """Write the chunks sent; what it raises is kept for the turn's next `written` (this
        also runs as a callback, where it would be lost)."""
        batch, self._unwritten = self._unwritten, []
        if not batch or self._error is not None:
            return  # after an error the turn stops at its next event: nothing more is written
        try:
            self._store.publish_chunks_now(
                self._task_id, batch, owner=self._owner, fence=self._fence
            )
        except Exception as exc:  # whatever it is, the turn raises it
            self._error = exc
