"""Expiry: every row's `expires_at`, invisible past it at once, deleted by a bounded sweep.

Reads filter on `expires_at > now`, so an expired task (or lease, conversation, ...) is gone for
every caller the moment its TTL passes, as a Redis key is. The rows themselves are deleted by
`Sweeper`, a background task (started at the stores' first write, cancelled by `aclose`) that
every `interval_s` deletes them in batches of `batch` rows per table, one short transaction per
batch, so the writes of running turns go on between batches.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial

from stores.sqlite.database import Database, Step
from stores.sqlite.schema import EXPIRING_TABLES

logger = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 60.0
SWEEP_BATCH = 200
SWEEP_BATCHES_MAX = 50
"""Batches per table in one sweep: what is left waits for the next sweep (bounded work)."""

_KEYS = {
    "tasks": "id",
    "leases": "owner, task_id",
    "checkpoints": "owner, task_id",
    "conversations": "id",
    "claims": "owner, context_id",
    "push_configs": "id",
    "push_cursors": "owner, task_id",
}
assert set(_KEYS) == set(EXPIRING_TABLES)


@dataclass(frozen=True, slots=True)
class Ttl:
    """A TTL in ms, and when a row written now expires."""

    ms: int

    @classmethod
    def of_seconds(cls, ttl_s: float) -> Ttl:
        return cls(max(1, int(ttl_s * 1000)))

    def expires(self, now_ms: int) -> int:
        return now_ms + self.ms

    def stale(self, expires_at: int, now_ms: int) -> bool:
        """Whether a row that expires at `expires_at` should take a new expiry now: when it has
        lost more than a hundredth of its TTL (at most a minute). Its expiry is in the list
        indexes, so a streamed answer's chunks (a write each) move them once in a while, not
        once per chunk; a task expires that little earlier than its exact TTL at most."""
        return expires_at < self.expires(now_ms) - min(self.ms // 100, 60_000)


def delete_expired(step: Step, table: str, batch: int) -> int:
    """Delete up to `batch` expired rows of `table` (what belongs to them goes by cascade)."""
    keys = _KEYS[table]  # the names are ours (_KEYS), never a caller's
    cursor = step.connection.execute(
        f"DELETE FROM {table} WHERE ({keys}) IN"
        f" (SELECT {keys} FROM {table} WHERE expires_at <= ? LIMIT ?)",
        (step.now_ms, batch),
    )
    return cursor.rowcount


class Sweeper:
    """Deletes expired rows every `interval_s` (see the module docstring)."""

    def __init__(
        self, database: Database, *, interval_s: float = SWEEP_INTERVAL_S, batch: int = SWEEP_BATCH
    ) -> None:
        self._database = database
        self._interval_s = interval_s
        self._batch = batch

    def start(self) -> None:
        self._database.keep(asyncio.get_running_loop().create_task(self._run()))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.sweep()
            except Exception:  # a failed sweep is retried at the next one; it must not stop
                logger.warning("SQLite expiry sweep failed", exc_info=True)

    async def sweep(self, *, batches: int = SWEEP_BATCHES_MAX) -> int:
        """One sweep: the number of rows deleted."""
        deleted = 0
        for table in EXPIRING_TABLES:
            for _ in range(batches):
                count = await self._database.write(
                    partial(delete_expired, table=table, batch=self._batch)
                )
                deleted += count
                if count < self._batch:
                    break
        if deleted:
            logger.info("deleted=<%d> | SQLite expiry sweep", deleted)
        return deleted
