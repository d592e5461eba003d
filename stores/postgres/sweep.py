"""The expiry sweep: deletes rows past their `expires_at`, in bounded batches, on one replica.

Readers already treat an expired row as missing; the sweep only gives the space back. Every
`interval_s` each replica tries to take the sweep's lease (a row of `sweeps`, for a few
intervals); the one that holds it deletes up to `batch` rows per statement, at most
`batches_max` statements per table and round, so a round never holds locks for long and a
backlog is worked off over several rounds. A task's journal goes with it (ON DELETE CASCADE), a
conversation's messages and units with it; a lease row goes only once its task is gone too (its
epoch must outlive every fence of the task).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import asyncpg

from stores.errors import StoreError
from stores.postgres.database import Database, rows_affected
from stores.postgres.schema import EXPIRING_TABLES

logger = logging.getLogger(__name__)

_TAKE_SWEEP = """
INSERT INTO sweeps AS s (name, holder, expires_at)
VALUES ('expiry', $1, now() + make_interval(secs => $2))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE s.holder = EXCLUDED.holder OR s.expires_at <= now()
RETURNING holder
"""

# By ctid: PostgreSQL's DELETE has no LIMIT. A row refreshed meanwhile is left (the outer
# condition is checked again on the row's latest version).
_DELETE_BATCH = """
DELETE FROM {table} WHERE expires_at <= now() AND ctid = ANY(ARRAY(
    SELECT ctid FROM {table} WHERE expires_at <= now() LIMIT $1))
"""
_DELETE_LEASES = """
DELETE FROM leases AS l WHERE l.expires_at <= now() AND ctid = ANY(ARRAY(
    SELECT ctid FROM leases AS g WHERE g.expires_at <= now() AND NOT EXISTS (
        SELECT 1 FROM tasks AS t
        WHERE t.owner = g.owner AND t.task_id = g.task_id AND t.expires_at > now())
    LIMIT $1))
"""


class ExpirySweep:
    """Started on the stores' first connection (`start`), stopped by `aclose`."""

    def __init__(
        self,
        database: Database,
        *,
        interval_s: float = 60.0,
        batch: int = 1000,
        batches_max: int = 20,
    ) -> None:
        self._db = database
        self._interval_s = interval_s
        self._batch = batch
        self._batches_max = batches_max
        self._holder = uuid.uuid4().hex
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="postgres-expiry-sweep")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.sweep_once()
            except StoreError as exc:  # the database is away: the next round tries again
                logger.warning("error=<%s> | the expiry sweep failed", exc)

    async def sweep_once(self) -> int:
        """One round, if this replica holds the sweep's lease: the rows deleted."""
        async with self._db.connection() as connection:
            held = await connection.fetchval(_TAKE_SWEEP, self._holder, 3 * self._interval_s)
            if held is None:
                return 0
            deleted = 0
            for table in EXPIRING_TABLES:
                deleted += await self._delete(connection, _DELETE_BATCH.format(table=table))
            deleted += await self._delete(connection, _DELETE_LEASES)
        if deleted:
            logger.info("rows=<%d> | expired rows swept", deleted)
        return deleted

    async def _delete(self, connection: asyncpg.Connection, statement: str) -> int:
        deleted = 0
        for _ in range(self._batches_max):
            status = await connection.execute(statement, self._batch)
            count = rows_affected(status)
            deleted += count
            if count < self._batch:
                break
        return deleted

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
