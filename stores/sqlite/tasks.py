"""SQLiteTaskStore: task snapshots (one row each), their journals (a row per entry), list indexes.

    publish(write) --writer: BEGIN IMMEDIATE--> task row (TaskGone), event id (a retry),
        |                                       fence (the lease row), if_state; journal rows at
        |                                       position + 1 ...; the task row moved; COMMIT
        v after commit
    the task's waiters (stores.sqlite.wakeups) --> read again on the reader connection

Each write is one transaction, so it is as atomic as the Redis script it stands for
(stores.redis.scripts): positions are contiguous per task, a fenced write and its check are one
step, and a retried event id journals nothing. The journal is kept whole while its task lives
(rows on disk, not memory); it goes with its task (ON DELETE CASCADE) when the task expires.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

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
from stores.chunks import WritingBehind
from stores.codec import dump_event, dump_task, load_task, snapshot_event, stored_entry
from stores.deadlines import CoarseDeadlines
from stores.models import JournalEntry, Task, TaskRecord, TaskState, event_state
from stores.sqlite.database import Database, Step
from stores.sqlite.expiry import Ttl
from stores.sqlite.fences import check_creation, check_fence
from stores.sqlite.listing import list_page
from stores.sqlite.schema import ENDED
from stores.sqlite.wakeups import Wakeups

logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp_ms(moment: datetime) -> int:
    """As the in-memory store computes it, so every backend orders and pages alike."""
    return int(moment.timestamp() * 1000)


def timestamp_us(moment: datetime) -> int:
    """Exact microseconds since the epoch (for `status_after`, compared at full precision)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


class _Row(NamedTuple):
    id: int
    position: int
    last_event_id: str | None
    last_event_position: int | None
    state: str
    expires_at: int


_ROW = (
    "SELECT id, position, last_event_id, last_event_position, state, expires_at FROM tasks"
    " WHERE owner = ? AND task_id = ? AND expires_at > ?"
)
_JOURNAL = "INSERT INTO journal (task, position, event, kind, state, epoch) VALUES (?,?,?,?,?,?)"


class SQLiteTaskStore(TaskStore):
    """Tasks and journals in the file; a task (and its journal) expires `ttl_s` after it was
    last written. With `max_tasks`, a creation beyond it first deletes the tasks that ended
    longest ago (a hundredth of the limit at once), or is refused (StoreFull) if none has."""

    def __init__(
        self,
        database: Database,
        *,
        ttl_s: float = DEFAULT_TASK_TTL_S,
        max_tasks: int | None = None,
    ) -> None:
        self._database = database
        self._ttl = Ttl.of_seconds(ttl_s)
        self._max_tasks = max_tasks
        self._wakeups = Wakeups()
        self._deadlines = CoarseDeadlines(expired=False)

    def _wake(self, step: Step, owner: str, task_id: str) -> None:
        wakeups, key = self._wakeups, (owner, task_id)
        step.after_commit(lambda: wakeups.wake(key))

    async def create(self, task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        stored = dump_task(task)
        moment = task.status.timestamp

        def create(step: Step) -> None:
            if fence is not None:
                check_creation(step, owner, task.id, fence)
            connection = step.connection
            # A task of that id that expired (or lives: it is created again, as on Redis)
            # goes first, its journal with it.
            connection.execute(
                "DELETE FROM tasks WHERE owner = ? AND task_id = ?", (owner, task.id)
            )
            if self._max_tasks is not None:
                _make_room(step, self._max_tasks)
            row = connection.execute(
                "INSERT INTO tasks (owner, task_id, context_id, state, status_ms, status_us,"
                " snapshot, snapshot_position, position, expires_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 1, 1, ?)",
                (
                    owner,
                    task.id,
                    task.context_id,
                    task.status.state.value,
                    timestamp_ms(moment),
                    timestamp_us(moment),
                    stored,
                    self._ttl.expires(step.now_ms),
                ),
            ).lastrowid
            epoch = fence.epoch if fence is not None else None
            event = snapshot_event(stored)
            connection.execute(_JOURNAL, (row, 1, event, "task", task.status.state.value, epoch))
            self._wake(step, owner, task.id)

        await self._database.write(create)
        return TaskRecord(task=task, owner=owner, position=1, stored=stored)

    async def void(self, task_id: str, *, owner: str, by: str) -> bool:
        def void(step: Step) -> bool:
            connection, now = step.connection, step.now_ms
            if connection.execute(_ROW, (owner, task_id, now)).fetchone() is not None:
                return False
            connection.execute(
                "DELETE FROM leases WHERE owner = ? AND task_id = ? AND expires_at <= ?",
                (owner, task_id, now),
            )
            # The mark lives as long as a task may (its TTL), and the first voider stays.
            connection.execute(
                "INSERT INTO leases (owner, task_id, voided_by, expires_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (owner, task_id) DO UPDATE SET"
                " voided_by = coalesce(voided_by, excluded.voided_by),"
                " expires_at = max(expires_at, excluded.expires_at)",
                (owner, task_id, by, self._ttl.expires(now)),
            )
            return True

        return await self._database.write(void)

    async def get(self, task_id: str, *, owner: str) -> TaskRecord | None:
        def get(step: Step) -> tuple[bytes, int] | None:
            row = step.connection.execute(
                "SELECT snapshot, snapshot_position FROM tasks"
                " WHERE owner = ? AND task_id = ? AND expires_at > ?",
                (owner, task_id, step.now_ms),
            ).fetchone()
            return None if row is None else (bytes(row[0]), int(row[1]))

        found = await self._database.read(get)
        if found is None:
            return None
        stored, position = found
        try:
            task = load_task(stored)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise TaskUnreadable(task_id) from exc
        return TaskRecord(task=task, owner=owner, position=position, stored=stored)

    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        return await self._database.read(lambda step: list_page(step, query, owner))

    async def publish(self, task_id: str, write: JournalWrite, *, owner: str) -> int:
        event = write.event
        kind, state = (None, None) if isinstance(event, bytes) else (event.kind, event_state(event))
        entries: builtins.list[tuple[bytes, str | None, str | None]]
        entries = [(chunk, "artifact", None) for chunk in write.chunks]
        entries.append((dump_event(event), kind, state.value if state is not None else None))
        snapshot = write.snapshot
        stored = write.snapshot_stored
        if snapshot is not None and stored is None:
            stored = dump_task(snapshot)

        def publish(step: Step) -> int:
            row = self._writable(step, owner, task_id, write.event_id, write.fence)
            if isinstance(row, int):
                return row
            if write.if_position is not None and row.position != write.if_position:
                raise PositionConflict(task_id, expected=write.if_position, current=row.position)
            if write.if_state is not None and row.state != write.if_state.value:
                raise StateConflict(f"task {task_id!r} is no longer in state {write.if_state}")
            position = self._append(step, row, entries, write.event_id, write.fence)
            if snapshot is not None:
                moment = snapshot.status.timestamp
                step.connection.execute(
                    "UPDATE tasks SET snapshot = ?, snapshot_position = ?, state = ?,"
                    " status_ms = ?, status_us = ? WHERE id = ?",
                    (
                        stored,
                        position,
                        snapshot.status.state.value,
                        timestamp_ms(moment),
                        timestamp_us(moment),
                        row.id,
                    ),
                )
            self._wake(step, owner, task_id)
            return position

        return await self._database.write(publish)

    async def publish_chunks(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        event_id: str | None = None,
        fence: Fence | None = None,
    ) -> int:
        entries = [(event, "artifact", None) for event in events]

        def publish(step: Step) -> int:
            row = self._writable(step, owner, task_id, event_id, fence)
            if isinstance(row, int):
                return row
            position = self._append(step, row, entries, event_id, fence)
            self._wake(step, owner, task_id)
            return position

        return await self._database.write(publish)

    def chunk_sink(
        self, task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        """Chunks written behind the turn, in batches: each write waits for its commit (a sync
        of the WAL), so chunks that come meanwhile go together in the next one."""

        def write(batch: Sequence[bytes], event_id: str) -> Awaitable[int]:
            return self.publish_chunks(task_id, batch, owner=owner, event_id=event_id, fence=fence)

        return WritingBehind(write, retry=retry)

    def _writable(
        self, step: Step, owner: str, task_id: str, event_id: str | None, fence: Fence | None
    ) -> _Row | int:
        """The task row a write goes to, or the position of its first attempt (a retry of
        the task's last event id: nothing is written again, whoever holds the lease now)."""
        found = step.connection.execute(_ROW, (owner, task_id, step.now_ms)).fetchone()
        if found is None:
            raise TaskGone(f"task {task_id!r} does not exist (or expired)")
        row = _Row(*found)
        if event_id and row.last_event_id == event_id and row.last_event_position is not None:
            return row.last_event_position
        if fence is not None:
            check_fence(step, owner, task_id, fence)
        return row

    def _append(
        self,
        step: Step,
        row: _Row,
        entries: Sequence[tuple[bytes, str | None, str | None]],
        event_id: str | None,
        fence: Fence | None,
    ) -> int:
        """Journal `entries` after the task's last position; the last one's position."""
        epoch = fence.epoch if fence is not None else None
        first = row.position + 1
        step.connection.executemany(
            _JOURNAL,
            [
                (row.id, first + offset, event, kind, state, epoch)
                for offset, (event, kind, state) in enumerate(entries)
            ],
        )
        last = row.position + len(entries)
        sets: builtins.list[str] = ["position = ?"]
        args: builtins.list[object] = [last]
        if event_id:
            sets.append("last_event_id = ?, last_event_position = ?")
            args += [event_id, last]
        if self._ttl.stale(row.expires_at, step.now_ms):
            sets.append("expires_at = ?")
            args.append(self._ttl.expires(step.now_ms))
        step.connection.execute(f"UPDATE tasks SET {', '.join(sets)} WHERE id = ?", (*args, row.id))
        return last

    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> builtins.list[JournalEntry]:
        def entries(step: Step) -> builtins.list[JournalEntry]:
            rows = step.connection.execute(
                "SELECT j.position, j.event, j.kind, j.state FROM tasks t"
                " JOIN journal j ON j.task = t.id"
                " WHERE t.owner = ? AND t.task_id = ? AND t.expires_at > ? AND j.position > ?"
                " ORDER BY j.position",
                (owner, task_id, step.now_ms, after),
            ).fetchall()
            return [_entry(*row) for row in rows]

        found = await self._database.read(entries)
        if found or timeout_s <= 0:
            return found
        # Wait for the task's next commit: registered before reading again, so a publish that
        # commits in between wakes this wait (read again) rather than being missed.
        key = (owner, task_id)
        waiter = self._wakeups.waiter(key)
        slot = self._deadlines.add(waiter, timeout_s)
        try:
            found = await self._database.read(entries)
            if found or not await waiter:
                return found
            return await self._database.read(entries)
        finally:
            self._deadlines.discard(waiter, slot)
            self._wakeups.discard(key, waiter)


def _entry(position: int, event: bytes, kind: str | None, state: str | None) -> JournalEntry:
    """A journal row as an entry: its head as written, or found in the JSON if it was given as
    bytes (as the in-memory store does)."""
    if kind is None:
        return stored_entry(position, bytes(event))
    return JournalEntry(
        position=position,
        stored=bytes(event),
        kind=kind,
        state=TaskState(state) if state is not None else None,
    )


def _make_room(step: Step, max_tasks: int) -> None:
    """At the limit: delete the tasks that ended longest ago (by status time), a hundredth of
    the limit at once; StoreFull if no task has ended."""
    connection, now = step.connection, step.now_ms
    count = connection.execute("SELECT count(*) FROM tasks WHERE expires_at > ?", (now,)).fetchone()
    if int(count[0]) < max_tasks:
        return
    wanted = max(int(count[0]) - max_tasks + 1, max_tasks // 100, 1)
    deleted = connection.execute(
        f"DELETE FROM tasks WHERE id IN (SELECT id FROM tasks INDEXED BY tasks_ended"
        f" WHERE {ENDED} ORDER BY status_ms LIMIT ?)",
        (wanted,),
    ).rowcount
    if not deleted:
        raise StoreFull(
            f"This server holds its limit of {max_tasks} tasks and none has ended;"
            " retry once some have"
        )
    logger.info("dropped %d ended tasks: the store is at its limit", deleted)
