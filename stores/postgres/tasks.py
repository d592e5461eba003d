"""PostgresTaskStore: task snapshots, their journals, and reads woken by LISTEN/NOTIFY.

    publish --one statement: a2a_publish()--> lease row FOR SHARE (fenced), task row FOR UPDATE,
            |                    INSERT journal rows (positions row.position + 1...),
            |                    UPDATE the task row [snapshot]; once committed,
            |                    pg_notify('a2a_journal', task) (stores.postgres.announcements)
            v
    journal (owner, task_id, position) --SELECT position > after--> readers on any replica,
            woken by the notification (stores.postgres.notifications)

The task row is the journal's counter: locking it orders every write of a task, so positions are
contiguous (1, 2, 3, ...) and a write sees the previous one's `last_event_id` (a retry returns
the position it got). The checks come in the Redis script's order: the task exists, the event id
is not a retry, the fence holds, the state is the expected one; a refused write writes nothing.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Sequence

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ChunkSink,
    Fence,
    JournalWrite,
    LeaseLost,
    PositionConflict,
    StateConflict,
    TaskGone,
    TaskPage,
    TaskQuery,
    TaskStore,
    TaskUnreadable,
    WriteRetry,
)
from stores.chunks import WritingBehind
from stores.codec import dump_event, dump_task, load_task, snapshot_event, stored_entry
from stores.models import JournalEntry, Task, TaskRecord, TaskState
from stores.postgres.announcements import Announcements
from stores.postgres.database import Database
from stores.postgres.fences import fence_args, refuse_creation
from stores.postgres.listing import list_tasks, status_ms, status_us
from stores.postgres.notifications import Notifications, task_payload

# The writes are functions of the database (stores.postgres.write_functions): one statement.
_CREATE = (
    "SELECT outcome, voided_by FROM a2a_create_task($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)
_PUBLISH = (
    "SELECT outcome, task_position FROM a2a_publish("
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
)

_READ = """
SELECT position, event FROM journal
WHERE owner = $1 AND task_id = $2 AND position > $3
  AND EXISTS (SELECT 1 FROM tasks WHERE owner = $1 AND task_id = $2 AND expires_at > now())
ORDER BY position
"""

_TRIM_EVERY = 512  # positions between two trims of a long journal to its last `journal_max`


class PostgresTaskStore(TaskStore):
    """Tasks and journals in PostgreSQL; a task's rows expire `ttl_s` after its last write."""

    def __init__(
        self,
        database: Database,
        notifications: Notifications,
        *,
        ttl_s: float = DEFAULT_TASK_TTL_S,
        journal_max: int = 10_000,
    ) -> None:
        self._db = database
        self._notifications = notifications
        self.announcements = Announcements(database, close_timeout_s=database.command_timeout_s)
        self._ttl_s = float(ttl_s)
        self._journal_max = journal_max

    async def create(self, task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        stored = dump_task(task)
        moment = task.status.timestamp
        async with self._db.connection() as connection:
            refused = await connection.fetchrow(
                _CREATE,
                owner,
                task.id,
                task.context_id,
                task.status.state.value,
                status_ms(moment),
                status_us(moment),
                stored,
                self._ttl_s,
                snapshot_event(stored),
                *fence_args(fence),
            )
        if fence is not None and refused["outcome"] != "ok":
            refuse_creation(refused["outcome"], task.id, fence, refused["voided_by"])
        return TaskRecord(task=task, owner=owner, position=1, stored=stored)

    async def void(self, task_id: str, *, owner: str, by: str) -> bool:
        """The lease row is locked before the task is looked for: a fenced creation holds it
        (FOR SHARE) until it commits, so it is seen, or it finds the void."""
        async with self._db.transaction() as connection:
            await connection.execute(
                "INSERT INTO leases (owner, task_id, expires_at)"
                " VALUES ($1, $2, now() + make_interval(secs => $3)) ON CONFLICT DO NOTHING",
                owner,
                task_id,
                self._ttl_s,
            )
            await connection.execute(
                "SELECT 1 FROM leases WHERE owner = $1 AND task_id = $2 FOR UPDATE", owner, task_id
            )
            if await connection.fetchval(
                "SELECT EXISTS (SELECT 1 FROM tasks"
                " WHERE owner = $1 AND task_id = $2 AND expires_at > now())",
                owner,
                task_id,
            ):
                return False
            await connection.execute(
                "UPDATE leases SET"
                " voided_by = CASE WHEN expires_at <= now() THEN $3"
                " ELSE coalesce(voided_by, $3) END,"
                " expires_at = greatest(expires_at, now() + make_interval(secs => $4))"
                " WHERE owner = $1 AND task_id = $2",
                owner,
                task_id,
                by,
                self._ttl_s,
            )
        return True

    async def get(self, task_id: str, *, owner: str) -> TaskRecord | None:
        async with self._db.connection() as connection:
            row = await connection.fetchrow(
                "SELECT snapshot, snapshot_position FROM tasks"
                " WHERE owner = $1 AND task_id = $2 AND expires_at > now()",
                owner,
                task_id,
            )
        if row is None:
            return None
        stored: bytes = row["snapshot"]
        try:
            task = load_task(stored)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise TaskUnreadable(task_id) from exc
        return TaskRecord(task=task, owner=owner, position=row["snapshot_position"], stored=stored)

    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        async with self._db.connection() as connection:
            return await list_tasks(connection, query, owner=owner)

    async def publish(self, task_id: str, write: JournalWrite, *, owner: str) -> int:
        events = [*write.chunks, dump_event(write.event)]
        snapshot = write.snapshot
        if snapshot is None:
            return await self._append(
                owner,
                task_id,
                events,
                event_id=write.event_id,
                fence=write.fence,
                if_position=write.if_position,
            )
        stored = write.snapshot_stored
        moment = snapshot.status.timestamp
        fields = (
            stored if stored is not None else dump_task(snapshot),
            snapshot.context_id,
            snapshot.status.state.value,
            status_ms(moment),
            status_us(moment),
        )
        return await self._append(
            owner,
            task_id,
            events,
            event_id=write.event_id,
            fence=write.fence,
            snapshot=fields,
            if_position=write.if_position,
            if_state=write.if_state,
        )

    async def publish_chunks(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        event_id: str | None = None,
        fence: Fence | None = None,
    ) -> int:
        return await self._append(owner, task_id, list(events), event_id=event_id, fence=fence)

    def chunk_sink(
        self, task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        """Chunks written behind the turn, in batches: each write waits for a transaction."""

        def write(batch: Sequence[bytes], event_id: str) -> Awaitable[int]:
            return self.publish_chunks(task_id, batch, owner=owner, event_id=event_id, fence=fence)

        return WritingBehind(write, retry=retry)

    async def _append(
        self,
        owner: str,
        task_id: str,
        events: builtins.list[bytes],
        *,
        event_id: str | None,
        fence: Fence | None,
        snapshot: tuple[bytes, str, str, int, int] | None = None,
        if_position: int | None = None,
        if_state: TaskState | None = None,
    ) -> int:
        async with self._db.connection() as connection:
            row = await connection.fetchrow(
                _PUBLISH,
                owner,
                task_id,
                events,
                *fence_args(fence),
                event_id,
                self._ttl_s,
                if_position,
                if_state.value if if_state is not None else None,
                self._journal_max,
                _TRIM_EVERY,
                *(snapshot if snapshot is not None else (None,) * 5),
            )
        outcome, position = row["outcome"], row["task_position"]
        if outcome in ("ok", "retry"):
            # A retry is journaled once, at the position it got, and announced again: its first
            # call may have committed and lost its reply, and with it its announcement.
            self.announcements.announce(task_payload(owner, task_id))
            return int(position)
        if outcome == "gone":
            raise TaskGone(f"task {task_id!r} does not exist (or expired)")
        if outcome == "lease":
            assert fence is not None
            raise LeaseLost(task_id, fence)
        if outcome == "position":
            assert if_position is not None
            raise PositionConflict(task_id, expected=if_position, current=int(position))
        raise StateConflict(f"task {task_id!r} is no longer in state {if_state}")

    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> builtins.list[JournalEntry]:  # `list` is the method above, in this class body
        """Read; if there is nothing yet, wait for the task's notification and read again. The
        waiter is registered (and the connection listening) before each read that may wait."""
        entries = await self._read(owner, task_id, after)
        if entries or timeout_s <= 0:
            return entries
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (remaining := deadline - loop.time()) > 0:
            with self._notifications.waiting(owner, task_id) as woken:
                await self._notifications.listening()
                entries = await self._read(owner, task_id, after)
                if entries:
                    return entries
                try:
                    await asyncio.wait_for(woken, remaining)
                except TimeoutError:
                    return []
        return []

    async def _read(self, owner: str, task_id: str, after: int) -> builtins.list[JournalEntry]:
        async with self._db.connection() as connection:
            rows = await connection.fetch(_READ, owner, task_id, max(after, 0))
        return [stored_entry(row["position"], row["event"]) for row in rows]
