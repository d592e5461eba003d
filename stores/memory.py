"""In-memory stores: one process, nothing survives a restart. The embedded default.

They hand out copies, so a caller that forgets to save sees the same thing every other caller does
(as a2a-python's CopyingTaskStoreAdapter does), and they expire idle tasks and conversations after
the TTL so a long-running process does not grow forever.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import count, islice
from typing import Any, Protocol, TypeVar

from stores.base import (
    CheckpointStore,
    Fence,
    LeaseLost,
    LeaseStatus,
    LeaseStore,
    MessageStore,
    PushConfigStore,
    StateConflict,
    StoreFull,
    TaskGone,
    TaskPage,
    TaskQuery,
    TaskRef,
    TaskStore,
    TaskUnreadable,
)
from stores.codec import (
    dump_event,
    dump_message,
    dump_task,
    load_message,
    load_task,
    snapshot_event,
    stored_entry,
)
from stores.deadlines import CoarseDeadlines
from stores.models import (
    ChatMessage,
    JournalEntry,
    PushConfig,
    Task,
    TaskEvent,
    TaskRecord,
    TaskState,
    event_state,
    utc_now,
)
from stores.paging import decode_cursor, encode_cursor
from stores.rate_limit import InMemoryRateLimiter, RateLimit, RateLimiter

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

    @classmethod
    def first(cls, task: Task, *, journal_max: int) -> _StoredTask:
        """A new task: its journal starts with the task itself at position 1."""
        stored = cls(events=deque(maxlen=journal_max), touched=time.monotonic())
        stored.keep(task, 1)
        stored.events.append(snapshot_event(stored.snapshot))
        stored.heads.append(_HEAD_CODES[("task", stored.state)])
        return stored

    def keep(self, task: Task, position: int, stored: bytes | None = None) -> None:
        self.snapshot = stored if stored is not None else dump_task(task)
        self.snapshot_position = position
        self.state, self.context_id = task.status.state, task.context_id
        self.status_timestamp = task.status.timestamp
        self.timestamp_ms = int(task.status.timestamp.timestamp() * 1000)

    def task(self, task_id: str) -> Task:
        try:
            return load_task(self.snapshot)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise TaskUnreadable(task_id) from exc


class _Touched(Protocol):
    touched: float


TouchedT = TypeVar("TouchedT", bound=_Touched)


def _room_to_make(size: int, limit: int) -> int:
    """How many entries a store at its `limit` drops at once: a hundredth of the limit (so its
    log line comes once per hundredth), or what brings it back under the limit if that is more."""
    return max(size - limit + 1, limit // 100, 1)


class _IdleSweeper:
    """Drops entries idle for longer than the TTL; sweeps at most once a minute."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._next_sweep = 0.0

    def sweep(self, entries: dict[Any, TouchedT]) -> bool:
        """True if it swept (and may have dropped entries)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return False
        self._next_sweep = now + 60
        for key in [key for key, value in entries.items() if now - value.touched > self._ttl_s]:
            del entries[key]
        return True


class InMemoryTaskStore(TaskStore):
    writes_in_process = True

    def __init__(
        self,
        *,
        ttl_s: float = 7 * 24 * 3600,
        journal_max: int = 10_000,
        max_tasks: int = 10_000,
        leases: InMemoryLeaseStore | None = None,
    ) -> None:
        self._sweeper = _IdleSweeper(ttl_s)
        self._journal_max = journal_max
        self._max_tasks = max_tasks
        self._tasks: dict[tuple[str, str], _StoredTask] = {}
        # The tasks that ended, in the order they did: the first to drop when the store is full
        # (finding them by sorting every task took an eighth of a SendMessage's CPU at the limit).
        self._ended: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._leases = leases  # checks fenced writes; without it, fences are not checked
        self._deadlines = CoarseDeadlines(expired=False)

    async def create(self, task: Task, *, owner: str) -> TaskRecord:
        if self._sweeper.sweep(self._tasks):
            for key in [key for key in self._ended if key not in self._tasks]:
                del self._ended[key]
        if len(self._tasks) >= self._max_tasks:
            self._make_room()
        stored = _StoredTask.first(task, journal_max=self._journal_max)
        self._tasks[(owner, task.id)] = stored
        if stored.state.is_terminal:
            self._ended[(owner, task.id)] = None
        return TaskRecord(task=task, owner=owner, position=1, stored=stored.snapshot)

    def _make_room(self) -> None:
        """Drop the tasks that ended longest ago (with their journals): a hundredth of the
        capacity at once, so that the log line comes once per hundredth. StoreFull if every task
        is still active."""
        wanted = _room_to_make(len(self._tasks), self._max_tasks)
        dropped = 0
        while self._ended and dropped < wanted:
            key, _ = self._ended.popitem(last=False)
            if self._tasks.pop(key, None) is not None:
                dropped += 1
                if self._leases is not None:  # its lease goes with it (it lived for the task)
                    self._leases.drop_released(*key)
        if not dropped:
            raise StoreFull(
                f"This server holds its limit of {self._max_tasks} tasks and none has ended;"
                " retry once some have"
            )
        logger.info("dropped %d ended tasks: the store is at its limit", dropped)

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
        for _, task_id, stored in page:
            try:
                tasks.append(stored.task(task_id))
            except TaskUnreadable:  # one unreadable task must not fail the whole list
                logger.warning("task_id=<%s> | left out of a task list: cannot be read", task_id)
        return TaskPage(tasks=tasks, next_page_token=token, total_size=len(matching))

    async def publish(
        self,
        task_id: str,
        event: TaskEvent | bytes,
        *,
        owner: str,
        snapshot: Task | None = None,
        if_state: TaskState | None = None,
        event_id: str | None = None,
        fence: Fence | None = None,
        snapshot_stored: bytes | None = None,
        chunks: Sequence[bytes] = (),
    ) -> int:
        stored = self._writable(task_id, owner=owner, event_id=event_id, fence=fence)
        if stored is None:
            return self._tasks[(owner, task_id)].last_event_position  # a retry: journaled once
        if if_state is not None and stored.state != if_state:
            raise StateConflict(f"task {task_id!r} is no longer in state {if_state}")
        if chunks:
            self._append(stored, chunks, None, "artifact", None)
        kind, state = (None, None) if isinstance(event, bytes) else (event.kind, event_state(event))
        self._append(stored, [dump_event(event)], event_id, kind, state)
        if snapshot is not None:
            stored.keep(snapshot, stored.position, snapshot_stored)
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
        stored = self._writable(task_id, owner=owner, event_id=event_id, fence=fence)
        if stored is None:
            return self._tasks[(owner, task_id)].last_event_position
        self._append(stored, events, event_id, "artifact", None)
        return stored.position

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


@dataclass
class _Conversation:
    messages: list[bytes] = field(default_factory=list)  # stored form, as in Redis
    units: set[str] = field(default_factory=set)
    touched: float = 0.0


class InMemoryMessageStore(MessageStore):
    """Conversations by context, at most `max_conversations` of them (as many as the task store
    keeps tasks, so the store stays bounded under sustained load, not only after the TTL):
    beyond, the ones written to longest ago go, a hundredth of the limit at once, except a
    conversation a turn is running in (its context claimed)."""

    def __init__(self, *, ttl_s: float = 7 * 24 * 3600, max_conversations: int = 10_000) -> None:
        self._sweeper = _IdleSweeper(ttl_s)
        # Least recently written first: a write moves its conversation to the end.
        self._conversations: OrderedDict[tuple[str, str], _Conversation] = OrderedDict()
        self._claims: dict[tuple[str, str], str] = {}
        self._max_conversations = max_conversations

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        conversation = self._conversations.get((owner, context_id))
        if conversation is None or limit <= 0:
            return []
        return [load_message(raw) for raw in conversation.messages[-limit:]]

    async def append(
        self, context_id: str, messages: list[ChatMessage], *, owner: str, unit_id: str
    ) -> bool:
        self._sweeper.sweep(self._conversations)
        key = (owner, context_id)
        conversation = self._conversations.get(key)
        if conversation is None:
            if len(self._conversations) >= self._max_conversations:
                self._make_room()
            conversation = self._conversations[key] = _Conversation()
        else:
            self._conversations.move_to_end(key)
        conversation.touched = time.monotonic()
        if unit_id in conversation.units:
            return False
        conversation.units.add(unit_id)
        conversation.messages.extend(dump_message(message) for message in messages)
        return True

    def _make_room(self) -> None:
        wanted = _room_to_make(len(self._conversations), self._max_conversations)
        dropped = [
            key for key in islice(self._conversations, wanted * 2) if key not in self._claims
        ][:wanted]
        for key in dropped:
            del self._conversations[key]
        if dropped:  # else every one of the oldest is in a running turn: the limit waits
            logger.info(
                "dropped %d conversations written to longest ago: the store is at its limit",
                len(dropped),
            )

    async def claim(self, context_id: str, task_id: str, *, owner: str) -> str | None:
        holder = self._claims.setdefault((owner, context_id), task_id)
        return None if holder == task_id else holder

    async def replace_claim(
        self, context_id: str, stale_holder: str, task_id: str, *, owner: str
    ) -> bool:
        if self._claims.get((owner, context_id)) != stale_holder:
            return False
        self._claims[(owner, context_id)] = task_id
        return True

    async def release(self, context_id: str, task_id: str, *, owner: str) -> None:
        if self._claims.get((owner, context_id)) == task_id:
            del self._claims[(owner, context_id)]


class InMemoryCheckpointStore(CheckpointStore):
    def __init__(self, *, leases: InMemoryLeaseStore | None = None) -> None:
        self._checkpoints: dict[tuple[str, str], str] = {}
        self._leases = leases

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        if fence is not None and self._leases is not None:
            self._leases.check(task_id, owner=owner, fence=fence)
        self._checkpoints[(owner, task_id)] = checkpoint

    async def load(self, task_id: str, *, owner: str) -> str | None:
        return self._checkpoints.get((owner, task_id))

    async def delete(self, task_id: str, *, owner: str) -> None:
        self._checkpoints.pop((owner, task_id), None)


class InMemoryPushConfigStore(PushConfigStore):
    """Configs in their stored JSON form (a copy costs a serialization), for the `max_tasks`
    tasks that got one last (as many as the task store keeps): older tasks' are dropped."""

    def __init__(self, *, max_tasks: int = 10_000) -> None:
        self._configs: OrderedDict[tuple[str, str], dict[str, bytes]] = OrderedDict()
        self._cursors: dict[tuple[str, str], int] = {}
        self._max_tasks = max_tasks

    async def put(self, config: PushConfig, *, owner: str) -> None:
        key = (owner, config.task_id)
        configs = self._configs.setdefault(key, {})
        self._configs.move_to_end(key)
        configs[config.id] = config.model_dump_json(by_alias=True, exclude_none=True).encode()
        while len(self._configs) > self._max_tasks:
            oldest, _ = self._configs.popitem(last=False)
            self._cursors.pop(oldest, None)

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        stored = self._configs.get((owner, task_id), {}).get(config_id)
        return None if stored is None else PushConfig.model_validate_json(stored)

    async def list(self, task_id: str, *, owner: str) -> list[PushConfig]:
        stored = self._configs.get((owner, task_id), {})
        return [PushConfig.model_validate_json(raw) for raw in stored.values()]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        return self._configs.get((owner, task_id), {}).pop(config_id, None) is not None

    async def cursor(self, task_id: str, *, owner: str) -> int:
        return self._cursors.get((owner, task_id), 0)

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        key = (owner, task_id)
        self._cursors[key] = max(self._cursors.get(key, 0), position)


@dataclass
class _Lease:
    holder: str | None  # None: released (the epoch is kept, so epochs only grow)
    expires: float
    epoch: int = 0
    cancel_requested: bool = False
    touched: float = field(default_factory=time.monotonic)


class InMemoryLeaseStore(LeaseStore):
    """Leases within one process: nothing else can take a turn over, but the contract holds."""

    def __init__(self, *, ttl_s: float = 7 * 24 * 3600) -> None:
        # A lease (and so its epoch) lives as long as its task may: idle for at most the TTL.
        self._sweeper = _IdleSweeper(ttl_s)
        self._leases: dict[tuple[str, str], _Lease] = {}
        self._listeners: list[asyncio.Queue[TaskRef]] = []

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        self._sweeper.sweep(self._leases)
        lease = self._leases.get((owner, task_id))
        now = time.monotonic()
        if lease is None:
            lease = self._leases[(owner, task_id)] = _Lease(None, now)
        if lease.holder is not None and lease.holder != holder and lease.expires > now:
            return 0
        if lease.holder is None:
            lease.cancel_requested = False
        if lease.holder != holder:  # taken (free, or from an expired holder): a new epoch
            lease.holder, lease.epoch = holder, lease.epoch + 1
        lease.expires, lease.touched = now + ttl_s, now
        return lease.epoch

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        lease = self._leases.get((owner, task_id))
        if lease is None or lease.holder != holder:
            return LeaseStatus.LOST
        lease.touched = time.monotonic()
        lease.expires = lease.touched + ttl_s
        return LeaseStatus.CANCEL_REQUESTED if lease.cancel_requested else LeaseStatus.HELD

    async def is_held(self, task_id: str, *, owner: str) -> bool:
        lease = self._leases.get((owner, task_id))
        return lease is not None and lease.holder is not None and lease.expires > time.monotonic()

    def check(self, task_id: str, *, owner: str, fence: Fence) -> None:
        """Raise LeaseLost unless the fence's holder still holds the lease at that epoch."""
        lease = self._leases.get((owner, task_id))
        if lease is None or lease.holder != fence.holder or lease.epoch != fence.epoch:
            raise LeaseLost(task_id, fence)

    def drop_released(self, owner: str, task_id: str) -> None:
        """Forget a task's lease unless a turn holds it (the task store dropped the task): its
        epoch goes with it, which fencing does not need (holders never reuse a name)."""
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder is None:
            del self._leases[(owner, task_id)]

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder == holder:
            lease.holder, lease.cancel_requested = None, False

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder == holder:
            lease.expires = time.monotonic()

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder is not None:
            lease.cancel_requested = True
        for listener in self._listeners:
            listener.put_nowait(TaskRef(owner, task_id))

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        queue: asyncio.Queue[TaskRef] = asyncio.Queue()
        self._listeners.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._listeners.remove(queue)

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        now = time.monotonic()
        return [
            TaskRef(owner, task_id)
            for (owner, task_id), lease in self._leases.items()
            if lease.holder is not None and lease.expires <= now
        ][:limit]


@dataclass
class InMemoryStores:
    """The embedded default: all four stores in this process."""

    tasks: InMemoryTaskStore
    messages: InMemoryMessageStore
    checkpoints: InMemoryCheckpointStore
    leases: InMemoryLeaseStore
    pushes: InMemoryPushConfigStore

    @classmethod
    def create(cls, *, ttl_s: float, max_tasks: int = 10_000) -> InMemoryStores:
        leases = InMemoryLeaseStore(ttl_s=ttl_s)  # the task and checkpoint stores check fences
        return cls(
            tasks=InMemoryTaskStore(ttl_s=ttl_s, max_tasks=max_tasks, leases=leases),
            messages=InMemoryMessageStore(ttl_s=ttl_s, max_conversations=max_tasks),
            checkpoints=InMemoryCheckpointStore(leases=leases),
            leases=leases,
            pushes=InMemoryPushConfigStore(max_tasks=max_tasks),
        )

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        return InMemoryRateLimiter(limit)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
