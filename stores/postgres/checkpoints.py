"""PostgresCheckpointStore: a running turn's saved state, a row per task, fenced."""

from __future__ import annotations

from stores.base import DEFAULT_TASK_TTL_S, CheckpointStore, Fence, LeaseLost
from stores.postgres.database import Database

_SAVE = """
INSERT INTO checkpoints (owner, task_id, checkpoint, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))
ON CONFLICT (owner, task_id) DO UPDATE
SET checkpoint = EXCLUDED.checkpoint, expires_at = EXCLUDED.expires_at
"""

# The same, only if the lease still has the fence's holder and epoch ($5, $6): its row read FOR
# SHARE in the statement, so a takeover waits for the save and the save is wholly before it
# (or finds the new epoch and writes nothing). No row back: the fence lost.
_SAVE_FENCED = """
WITH lease AS (
    SELECT 1 FROM leases
    WHERE owner = $1 AND task_id = $2 AND expires_at > now() AND holder = $5 AND epoch = $6
    FOR SHARE
)
INSERT INTO checkpoints (owner, task_id, checkpoint, expires_at)
SELECT $1, $2, $3, now() + make_interval(secs => $4) FROM lease
ON CONFLICT (owner, task_id) DO UPDATE
SET checkpoint = EXCLUDED.checkpoint, expires_at = EXCLUDED.expires_at
RETURNING true
"""


class PostgresCheckpointStore(CheckpointStore):
    """A row per task, expiring `ttl_s` after it was last saved; a fenced save checks the
    lease in its statement (the lease row held FOR SHARE until the save commits)."""

    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._db = database
        self._ttl_s = float(ttl_s)

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        async with self._db.connection() as connection:
            if fence is None:
                await connection.execute(_SAVE, owner, task_id, checkpoint, self._ttl_s)
                return
            saved = await connection.fetchval(
                _SAVE_FENCED, owner, task_id, checkpoint, self._ttl_s, fence.holder, fence.epoch
            )
        if not saved:
            raise LeaseLost(task_id, fence)

    async def load(self, task_id: str, *, owner: str) -> str | None:
        async with self._db.connection() as connection:
            checkpoint = await connection.fetchval(
                "SELECT checkpoint FROM checkpoints"
                " WHERE owner = $1 AND task_id = $2 AND expires_at > now()",
                owner,
                task_id,
            )
        return None if checkpoint is None else str(checkpoint)

    async def delete(self, task_id: str, *, owner: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute(
                "DELETE FROM checkpoints WHERE owner = $1 AND task_id = $2", owner, task_id
            )
