"""SQLiteLeaseStore: which turn runs here and until when, its epoch, and cancel requests.

One row per task: the holder (NULL once released: the row and its epoch stay while the task
may live, so epochs only grow), the lease's expiry (wall-clock ms, so a lease of a crashed
process is found expired after a restart), the epoch, the cancel flag, and the void mark
(`TaskStore.void`). Each method is one transaction, the lease's script on Redis
(stores.redis.scripts: ACQUIRE_LEASE, RENEW_LEASE, ...). The row itself expires the task's TTL
after it was last taken or renewed, or the lease's own TTL if that is longer.

One process serves the file, so cancel requests reach `cancel_requests()` listeners in-process,
after the flag is committed; `heartbeat` has no other process to learn of (the defaults).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from stores.base import DEFAULT_TASK_TTL_S, LeaseStatus, LeaseStore, TaskRef
from stores.sqlite.database import Database, Step
from stores.sqlite.expiry import Ttl

_LEASE = (
    "SELECT holder, lease_expires, epoch, cancel_requested FROM leases"
    " WHERE owner = ? AND task_id = ? AND expires_at > ?"
)


class SQLiteLeaseStore(LeaseStore):
    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._database = database
        self._ttl = Ttl.of_seconds(ttl_s)
        self._listeners: list[asyncio.Queue[TaskRef]] = []

    def _row_expires(self, now_ms: int, lease_ttl_s: float) -> int:
        return now_ms + max(self._ttl.ms, int(lease_ttl_s * 1000))

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        def acquire(step: Step) -> int:
            connection, now = step.connection, step.now_ms
            row = connection.execute(_LEASE, (owner, task_id, now)).fetchone()
            if row is None:
                # An expired row is no lease (as an expired Redis key): its epoch is gone too.
                connection.execute(
                    "DELETE FROM leases WHERE owner = ? AND task_id = ?", (owner, task_id)
                )
                connection.execute(
                    "INSERT INTO leases (owner, task_id, expires_at) VALUES (?, ?, ?)",
                    (owner, task_id, now),
                )
                row = (None, 0, 0, 0)
            held_by, lease_expires, epoch, _ = row
            if held_by is not None and held_by != holder and lease_expires > now:
                return 0
            cancel = "cancel_requested" if held_by is not None else "0"  # a free lease: none
            epoch = epoch if held_by == holder else epoch + 1  # taken: a new epoch
            connection.execute(
                f"UPDATE leases SET holder = ?, lease_expires = ?, epoch = ?,"
                f" cancel_requested = {cancel}, expires_at = ? WHERE owner = ? AND task_id = ?",
                (
                    holder,
                    now + int(ttl_s * 1000),
                    epoch,
                    self._row_expires(now, ttl_s),
                    owner,
                    task_id,
                ),
            )
            return int(epoch)

        return await self._database.write(acquire)

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        return (await self.renew_many([(TaskRef(owner, task_id), holder)], ttl_s=ttl_s))[0]

    async def renew_many(
        self, held: list[tuple[TaskRef, str]], *, ttl_s: float
    ) -> list[LeaseStatus]:
        """Every renewal in one transaction (one sync of the WAL for all of them)."""
        if not held:
            return []

        def renew(step: Step) -> list[LeaseStatus]:
            connection, now = step.connection, step.now_ms
            statuses = []
            for ref, holder in held:
                row = connection.execute(_LEASE, (ref.owner, ref.task_id, now)).fetchone()
                if row is None or row[0] != holder:
                    statuses.append(LeaseStatus.LOST)
                    continue
                connection.execute(
                    "UPDATE leases SET lease_expires = ?, expires_at = ?"
                    " WHERE owner = ? AND task_id = ?",
                    (
                        now + int(ttl_s * 1000),
                        self._row_expires(now, ttl_s),
                        ref.owner,
                        ref.task_id,
                    ),
                )
                statuses.append(LeaseStatus.CANCEL_REQUESTED if row[3] else LeaseStatus.HELD)
            return statuses

        return await self._database.write(renew)

    async def is_held(self, task_id: str, *, owner: str) -> bool:
        def held(step: Step) -> bool:
            row = step.connection.execute(_LEASE, (owner, task_id, step.now_ms)).fetchone()
            return row is not None and row[0] is not None and row[1] > step.now_ms

        return await self._database.read(held)

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        def release(step: Step) -> None:
            step.connection.execute(
                "UPDATE leases SET holder = NULL, cancel_requested = 0"
                " WHERE owner = ? AND task_id = ? AND holder = ? AND expires_at > ?",
                (owner, task_id, holder, step.now_ms),
            )

        await self._database.write(release)

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        def hand_over(step: Step) -> None:
            step.connection.execute(
                "UPDATE leases SET lease_expires = ?"
                " WHERE owner = ? AND task_id = ? AND holder = ? AND expires_at > ?",
                (step.now_ms, owner, task_id, holder, step.now_ms),
            )

        await self._database.write(hand_over)

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        ref = TaskRef(owner, task_id)

        def flag(step: Step) -> None:
            # Only a held lease is flagged (the flag goes with its holder, as on Redis).
            step.connection.execute(
                "UPDATE leases SET cancel_requested = 1"
                " WHERE owner = ? AND task_id = ? AND holder IS NOT NULL AND expires_at > ?",
                (owner, task_id, step.now_ms),
            )
            step.after_commit(lambda: self._notify(ref))

        await self._database.write(flag)

    def _notify(self, ref: TaskRef) -> None:
        for listener in self._listeners:
            listener.put_nowait(ref)

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        queue: asyncio.Queue[TaskRef] = asyncio.Queue()
        self._listeners.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._listeners.remove(queue)

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        """By the running-leases index: the held leases whose expiry has passed."""

        def expired(step: Step) -> list[TaskRef]:
            rows = step.connection.execute(
                "SELECT owner, task_id FROM leases INDEXED BY leases_running"
                " WHERE holder IS NOT NULL AND lease_expires <= ? AND expires_at > ?"
                " ORDER BY lease_expires LIMIT ?",
                (step.now_ms, step.now_ms, limit),
            ).fetchall()
            return [TaskRef(str(owner), str(task_id)) for owner, task_id in rows]

        return await self._database.read(expired)
