"""Store interfaces. Every method takes the owner: it is part of every key (structural scoping)."""

from __future__ import annotations

import builtins
import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from stores.chunks import ChunkSink, WriteRetry
from stores.codec import dump_task
from stores.errors import (
    InvalidPageToken,
    LeaseLost,
    PositionConflict,
    StateConflict,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TaskGone,
    TaskUnreadable,
    TaskVoided,
)
from stores.models import ChatMessage, JournalEntry, PushConfig, Task, TaskBytes, TaskRecord
from stores.pages import TaskPage, TaskQuery
from stores.rate_limit import RateLimit, RateLimiter
from stores.writes import ContextFence, Fence, JournalWrite

__all__ = [  # the errors and write values live in their own modules; imported from here too
    "ANONYMOUS",
    "DEFAULT_TASK_TTL_S",
    "CheckpointStore",
    "ChunkSink",
    "ClaimHolder",
    "ContextFence",
    "Fence",
    "InvalidPageToken",
    "JournalWrite",
    "LeaseLost",
    "LeaseStatus",
    "LeaseStore",
    "MessageStore",
    "PositionConflict",
    "PushConfigStore",
    "StateConflict",
    "StoreError",
    "StoreFull",
    "StoreSet",
    "StoreUnavailable",
    "TaskGone",
    "TaskPage",
    "TaskQuery",
    "TaskRef",
    "TaskStore",
    "TaskUnreadable",
    "TaskVoided",
    "WriteRetry",
]

ANONYMOUS = "anonymous"
"""The owner of every resource until authentication exists."""

DEFAULT_TASK_TTL_S = 7 * 24 * 3600
"""How long a task (and what belongs to it) is kept after it was last written: a week."""


@dataclass(frozen=True, slots=True)
class ClaimHolder:
    """The task that holds a context's claim, as `MessageStore.claim` found it."""

    task_id: str
    fenced: bool
    """Its claim carries its lease's fence: it was claimed by a server that fences its task's
    creation too, so `TaskStore.void` stops that creation. (A claim without one comes from a
    server of an earlier version, beside this one in a rolling deploy: its creation checks no
    void, so only its lease says whether it may still come.)"""


class TaskStore(ABC):
    """Task snapshots, their per-task event journal, and the indexes that list them.

    The journal is the single source of events: a task's events are numbered 1, 2, 3, ... (the
    position, also the task's generation counter), and a snapshot records the position it reflects.
    So a reader that takes a snapshot and then reads the journal after its position sees every
    event exactly once: no gap, no duplicate.

    Generations (A2A 1.1) are this numbering, nothing stored beside it: a task's generation is
    its last journal position (every journal event is one mutation of the task), the `Task` of
    a record is at `record.position`, an event's generation is its position. So every backend
    must keep positions consecutive per task, never reused (a trimmed journal drops old
    entries, not numbers), and the same on every replica; `JournalWrite.if_position` compares
    against the last position in the publish's atomic step.
    """

    @abstractmethod
    async def create(self, task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        """Store a new task; its journal starts with the task itself at position 1. The record
        holds `task` itself and the stored form the store keeps of it (`stored`).

        With a `fence` (the creator's lease), checked in the same atomic step as the write: the
        task is created only if the lease still has that holder and epoch and the task was not
        voided; else TaskVoided (`void` gave it up) or LeaseLost, and nothing is written."""

    @abstractmethod
    async def void(self, task_id: str, *, owner: str, by: str) -> bool:
        """Make sure a task that does not exist never will: True if it did not (a fenced
        `create` of it is refused from now on, with TaskVoided naming `by`), False if it exists.
        In one atomic step, so a creation lands before it (False) or is refused after it."""

    @abstractmethod
    async def get(self, task_id: str, *, owner: str) -> TaskRecord | None:
        """Return the task, or None if it does not exist or is not the owner's (TaskUnreadable
        if it exists but cannot be loaded)."""

    async def get_bytes(self, task_id: str, *, owner: str) -> TaskBytes | None:
        """`get` as stored: loaded (so checked), unless a backend overrides this to hand it over."""
        if (record := await self.get(task_id, owner=owner)) is None:
            return None
        return TaskBytes(record.stored or dump_task(record.task), record.position)

    @abstractmethod
    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        """The owner's tasks, newest status first, one page at a time.

        A task that cannot be loaded is left out of the page (and logged), never failing the list.
        """

    @abstractmethod
    async def publish(self, task_id: str, write: JournalWrite, *, owner: str) -> int:
        """Append `write.event` (with what goes with it, see `JournalWrite`) to the journal in
        one atomic step and return its position. Raises TaskGone if the task does not exist;
        LeaseLost, PositionConflict, StateConflict (in that order of checks) when the write's
        fence, `if_position` or `if_state` refuse it, writing nothing."""

    @abstractmethod
    async def publish_chunks(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        event_id: str | None = None,
        fence: Fence | None = None,
    ) -> int:
        """Append several events in their stored form (a streamed answer's chunks: no snapshot),
        in order and in one atomic step: they take consecutive positions, or none is written.
        Returns the last one's position. `event_id` names the whole batch (a retry appends
        nothing and returns that position); `fence` as for `publish`. Raises TaskGone if the task
        does not exist.
        """

    @abstractmethod
    def chunk_sink(
        self, task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        """Where a running turn's streamed answer chunks go (`stores.chunks`): written as suits
        this store, with `publish_chunks`' guarantees (in order, fenced); `retry` is how the
        turn retries a write while the store is unavailable."""

    @abstractmethod
    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> builtins.list[JournalEntry]:
        """Journal entries after `after`, waiting up to `timeout_s` for the first one to arrive.

        For a task that does not exist the answer is [] (possibly after the wait): a reader checks
        the task itself between reads.
        """


class MessageStore(ABC):
    """The conversation of each context, in the model's terms, and its one-turn-at-a-time claim."""

    @abstractmethod
    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        """The most recent `limit` messages (or fewer), oldest first. Reads only that window."""

    @abstractmethod
    async def append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        fence: ContextFence | None = None,
    ) -> bool:
        """Append messages as one unit: all of them or none, and at most once per `unit_id`.

        Returns False when that unit was already appended (a turn resumed after a crash commits
        again what it may have committed before): history never holds a message twice. With a
        `fence`, only while the claim names its task under its fence (see ContextFence), checked
        in the same atomic step; else LeaseLost and nothing is written.
        """

    async def window_then_append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        limit: int,
        fence: ContextFence | None = None,
    ) -> list[ChatMessage]:
        """`window(limit)` as it is before `append(messages, unit_id)`, then that append: a
        turn's start (its history, then its user message). A store may do both in one step."""
        window = await self.window(context_id, owner=owner, limit=limit)
        await self.append(context_id, messages, owner=owner, unit_id=unit_id, fence=fence)
        return window

    @abstractmethod
    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        """Make `task_id` the context's running task, under its lease's `fence`: None if it now
        holds the claim (it was free, or already this task's: then the claim takes the fence,
        so that the task's earlier fences write no more), else the task that holds it.

        Raises LeaseLost if the claim is this task's under a later fence (this fence is stale).
        """

    @abstractmethod
    async def replace_claim(
        self,
        context_id: str,
        stale_holder: str,
        task_id: str,
        *,
        owner: str,
        fence: Fence | None = None,
    ) -> bool:
        """Make `task_id` the context's running task (under `fence`) only if `stale_holder`
        still holds the claim (compare-and-set): of requests that found the same stale holder,
        one wins."""

    @abstractmethod
    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        """Give up the claim, if `task_id` holds it (with a `fence`: under that fence or an
        earlier one, so a turn whose lease was taken over cannot free its successor's context).
        Whether it was given up."""


class CheckpointStore(ABC):
    """The saved state of a running turn, so another process can resume it (JSON text)."""

    @abstractmethod
    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        """Replace the task's checkpoint (with a `fence`: only while it holds, else LeaseLost)."""

    @abstractmethod
    async def load(self, task_id: str, *, owner: str) -> str | None:
        """The task's last checkpoint, or None."""

    @abstractmethod
    async def delete(self, task_id: str, *, owner: str) -> None:
        """Forget the checkpoint (the turn ended)."""


class PushConfigStore(ABC):
    """The push-notification configs of each task (by config id), and how far delivery has got
    in the task's journal (the delivery cursor: a replica taking a task over goes on from it)."""

    @abstractmethod
    async def put(self, config: PushConfig, *, owner: str) -> None:
        """Create or replace the config (`config.task_id`, `config.id`)."""

    @abstractmethod
    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None: ...

    @abstractmethod
    async def list(self, task_id: str, *, owner: str) -> builtins.list[PushConfig]:
        """The task's configs, oldest first."""

    @abstractmethod
    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        """Forget the config; whether there was one."""

    @abstractmethod
    async def cursor(self, task_id: str, *, owner: str) -> int:
        """The last journal position delivered (0: none)."""

    @abstractmethod
    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        """Record delivery up to `position`; the cursor never moves back."""


class LeaseStatus(enum.Enum):
    HELD = "held"
    LOST = "lost"  # expired and taken by another holder, or released
    CANCEL_REQUESTED = "cancel_requested"


@dataclass(frozen=True, slots=True)
class TaskRef:
    owner: str
    task_id: str


class LeaseStore(ABC):
    """Which process runs which turn, for how long, and requests to cancel a turn.

    A holder renews its lease well before it expires; a lease that expires marks a turn whose
    process died, and `expired` lets another process find it and take it over. Each acquire
    gives the lease a new, larger epoch: the fence that the holder's writes carry.
    """

    @abstractmethod
    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        """Take the lease if it is free or expired (or already ours): its epoch, or 0 if another
        holder has it. Taking it from no holder or another holder gives a larger epoch."""

    @abstractmethod
    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        """Extend our lease; says whether we still hold it and whether a cancel was requested."""

    async def renew_many(
        self, held: builtins.list[tuple[TaskRef, str]], *, ttl_s: float
    ) -> builtins.list[LeaseStatus]:
        """`renew` for each (task, holder), in order (a backend may do them in one round trip)."""
        return [
            await self.renew(ref.task_id, owner=ref.owner, holder=holder, ttl_s=ttl_s)
            for ref, holder in held
        ]

    @abstractmethod
    async def is_held(self, task_id: str, *, owner: str) -> bool:
        """Whether some holder has the task's lease and it has not expired."""

    @abstractmethod
    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        """Give the lease up (the turn ended here, or is handed over)."""

    @abstractmethod
    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        """Let our lease expire now (this process is stopping): another process takes the turn
        over at its next look for expired leases, instead of after the lease's full TTL."""

    async def heartbeat(self, process: str, *, ttl_s: float) -> list[str]:
        """Say that `process` is alive for `ttl_s` more, and learn which processes stopped saying
        so (they died without leaving). Each lapsed process is returned to one caller only, who
        hands its leases over (`hand_over_process`). A store that serves one process has no
        others to learn of."""
        return []

    async def hand_over_process(self, process: str) -> int:
        """Let every lease held by `process` (holders `<process>/<nonce>`) expire now, as
        `hand_over` would; the number of leases. For a process known to be gone."""
        return 0

    async def leave(self, process: str) -> None:
        """`process` stops here, on purpose: it no longer heartbeats (no one should hand over
        its leases for it; it hands them over itself)."""
        return None

    @abstractmethod
    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        """Flag the task for cancellation and notify whichever process holds its lease."""

    @abstractmethod
    def cancel_requests(self) -> AsyncIterator[TaskRef]:
        """Notifications of cancel requests, for as long as the caller listens."""

    @abstractmethod
    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        """Tasks whose lease expired without being released (their process died)."""


class StoreSet(Protocol):
    """The stores of one backend, with its health check and shutdown."""

    @property
    def tasks(self) -> TaskStore: ...

    @property
    def messages(self) -> MessageStore: ...

    @property
    def checkpoints(self) -> CheckpointStore: ...

    @property
    def leases(self) -> LeaseStore: ...

    @property
    def pushes(self) -> PushConfigStore: ...

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        """Per-key token buckets on this backend (Redis: shared by every replica)."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the backend answers."""

    async def aclose(self) -> None:
        """Close connections."""
