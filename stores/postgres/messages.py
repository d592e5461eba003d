"""PostgresMessageStore: a context's conversation, and its one-turn-at-a-time claim.

A conversation is a row (its length and expiry) with its messages and unit ids beside it; an
append locks that row, so a context's units go in one at a time, all of a unit's messages or
none, and a unit id once. A conversation past its expiry counts as none: the next append
starts it over.

The claim is a row per context: the task holding it (NULL: free) and that task's latest lease
fence, following the Redis scripts' rules (stores.redis.conversation_scripts): a fenced write is
admitted when the claim names its task and carries no fence, an earlier one (the writer's
replaces it: epochs only grow), or the writer's own. A claim and an append are each one
statement (functions of the database: stores.postgres.write_functions), the claim row locked
(`FOR UPDATE`) in it: a fenced append checks the claim in the statement that writes.
"""

from __future__ import annotations

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ClaimHolder,
    ContextFence,
    Fence,
    LeaseLost,
    MessageStore,
)
from stores.codec import dump_message, load_message
from stores.models import ChatMessage
from stores.postgres.database import Database, rows_affected
from stores.postgres.fences import fence_args

_LIVE = "owner = $1 AND context_id = $2 AND expires_at > now()"

_WINDOW = f"""
SELECT message FROM messages
WHERE owner = $1 AND context_id = $2
  AND EXISTS (SELECT 1 FROM conversations WHERE {_LIVE})
ORDER BY seq DESC LIMIT $3
"""

_APPEND = (
    "SELECT outcome, added, before FROM a2a_append_messages($1, $2, $3, $4, $5, $6, $7, $8, $9)"
)
_CLAIM = "SELECT outcome, held_task, held_fenced FROM a2a_claim($1, $2, $3, $4, $5, $6)"

# The claim goes if it names the task and, for a fenced release, admits the fence (a2a_claim's
# rule): the row is locked by the DELETE, its condition checked again on its latest version.
_RELEASE = f"""
DELETE FROM claims WHERE {_LIVE} AND task_id = $3
  AND ($4::text IS NULL OR fence_epoch IS NULL OR fence_epoch < $5
       OR (fence_epoch = $5 AND fence_holder = $4))
"""


class PostgresMessageStore(MessageStore):
    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._db = database
        self._ttl_s = float(ttl_s)

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        if limit <= 0:
            return []
        async with self._db.connection() as connection:
            rows = await connection.fetch(_WINDOW, owner, context_id, limit)
        return [load_message(row["message"]) for row in reversed(rows)]

    async def append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        fence: ContextFence | None = None,
    ) -> bool:
        added, _ = await self._append(owner, context_id, unit_id, messages, 0, fence)
        return added

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
        _, window = await self._append(owner, context_id, unit_id, messages, limit, fence)
        return window

    async def _append(
        self,
        owner: str,
        context_id: str,
        unit_id: str,
        messages: list[ChatMessage],
        window: int,
        fence: ContextFence | None,
    ) -> tuple[bool, list[ChatMessage]]:
        """Whether the unit was new, and the last `window` messages before it."""
        stored = [dump_message(message) for message in messages]
        holder, epoch = fence_args(fence.fence if fence is not None else None)
        async with self._db.connection() as connection:
            row = await connection.fetchrow(
                _APPEND,
                owner,
                context_id,
                unit_id,
                stored,
                window,
                self._ttl_s,
                fence.task_id if fence is not None else None,
                holder,
                epoch,
            )
        if row["outcome"] != "ok":
            assert fence is not None
            raise LeaseLost(fence.task_id, fence.fence)
        before = [load_message(message) for message in row["before"] or ()]
        return bool(row["added"]), before

    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        async with self._db.connection() as connection:
            row = await connection.fetchrow(
                _CLAIM, owner, context_id, task_id, self._ttl_s, *fence_args(fence)
            )
        if row["outcome"] == "held":
            return ClaimHolder(row["held_task"], fenced=bool(row["held_fenced"]))
        if row["outcome"] == "lease":
            assert fence is not None
            raise LeaseLost(task_id, fence)
        return None

    async def replace_claim(
        self,
        context_id: str,
        stale_holder: str,
        task_id: str,
        *,
        owner: str,
        fence: Fence | None = None,
    ) -> bool:
        async with self._db.connection() as connection:
            status = await connection.execute(
                "UPDATE claims SET task_id = $4, fence_holder = $5, fence_epoch = $6,"
                " expires_at = now() + make_interval(secs => $7)"
                " WHERE " + _LIVE + " AND task_id = $3",
                owner,
                context_id,
                stale_holder,
                task_id,
                fence.holder if fence is not None else None,
                fence.epoch if fence is not None else None,
                self._ttl_s,
            )
        return rows_affected(status) == 1

    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        async with self._db.connection() as connection:
            status = await connection.execute(
                _RELEASE, owner, context_id, task_id, *fence_args(fence)
            )
        return rows_affected(status) == 1
