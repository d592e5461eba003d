"""SQLiteCheckpointStore: a running turn's saved state, a row per task, fenced by its lease row
in the same transaction (SAVE_CHECKPOINT on Redis)."""

from __future__ import annotations

from stores.base import DEFAULT_TASK_TTL_S, CheckpointStore, Fence
from stores.sqlite.database import Database, Step
from stores.sqlite.expiry import Ttl
from stores.sqlite.fences import check_fence


class SQLiteCheckpointStore(CheckpointStore):
    """A checkpoint expires `ttl_s` after it was last saved."""

    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._database = database
        self._ttl = Ttl.of_seconds(ttl_s)

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        def save(step: Step) -> None:
            if fence is not None:
                check_fence(step, owner, task_id, fence)
            step.connection.execute(
                "INSERT OR REPLACE INTO checkpoints (owner, task_id, checkpoint, expires_at)"
                " VALUES (?, ?, ?, ?)",
                (owner, task_id, checkpoint, self._ttl.expires(step.now_ms)),
            )

        await self._database.write(save)

    async def load(self, task_id: str, *, owner: str) -> str | None:
        def load(step: Step) -> str | None:
            row = step.connection.execute(
                "SELECT checkpoint FROM checkpoints"
                " WHERE owner = ? AND task_id = ? AND expires_at > ?",
                (owner, task_id, step.now_ms),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._database.read(load)

    async def delete(self, task_id: str, *, owner: str) -> None:
        def delete(step: Step) -> None:
            step.connection.execute(
                "DELETE FROM checkpoints WHERE owner = ? AND task_id = ?", (owner, task_id)
            )

        await self._database.write(delete)
