"""PostgresMessageStore: a context's conversation, and its one-turn-at-a-time claim.

A conversation is a row (its length and expiry) with its messages and unit ids beside it; an
append locks that row, so a context's units go in one at a time, all of a unit's messages or
none, and a unit id once. A conversation past its expiry counts as none: the next append
starts it over.

The claim is a row per context: the task holding it (NULL: free) and that task's latest lease
fence, updated in one transaction with the row locked (`FOR UPDATE`), following the Redis
scripts' rules (stores.redis.conversation_scripts): a fenced write is admitted when the claim
names its task and carries no fence, an earlier one (the writer's replaces it: epochs only
grow), or the writer's own. A fenced append checks the claim in the same transaction as it
writes.
"""

from __future__ import annotations

import asyncpg

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ClaimHolder,
    ContextFence,
    Fence,
    LeaseLost,
    MessageStore,
    StoreUnavailable,
)
from stores.codec import dump_message, load_message
from stores.models import ChatMessage
from stores.postgres.database import Database, rows_affected

_LIVE = "owner = $1 AND context_id = $2 AND expires_at > now()"

_WINDOW = f"""
SELECT message FROM messages
WHERE owner = $1 AND context_id = $2
  AND EXISTS (SELECT 1 FROM conversations WHERE {_LIVE})
ORDER BY seq DESC LIMIT $3
"""

# Makes sure the row exists (a claim row is then locked with FOR UPDATE: an INSERT racing
# another would not be).
_CLAIM_ROW_TRIES = 5
_ENSURE_CLAIM = """
INSERT INTO claims (owner, context_id, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3)) ON CONFLICT DO NOTHING
"""
_LOCK_CLAIM = """
SELECT CASE WHEN expires_at > now() THEN task_id END AS task_id, fence_holder, fence_epoch
FROM claims WHERE owner = $1 AND context_id = $2 FOR UPDATE
"""
_SET_CLAIM = """
UPDATE claims SET task_id = $3, fence_holder = $4, fence_epoch = $5,
    expires_at = now() + make_interval(secs => $6)
WHERE owner = $1 AND context_id = $2
"""

_NOT_ADMITTED, _ADMITTED, _LATER = 0, 1, 2


def _admits(claim: asyncpg.Record, fence: Fence) -> int:
    """Whether the claim (its task being the writer's) admits the fence, and whether the fence
    is later than the one it has (then it is recorded)."""
    epoch = claim["fence_epoch"]
    if epoch is None or epoch < fence.epoch:
        return _LATER
    if epoch == fence.epoch and claim["fence_holder"] == fence.holder:
        return _ADMITTED
    return _NOT_ADMITTED


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
        async with self._db.transaction() as connection:
            if fence is not None:
                await self._check_claim(connection, owner, context_id, fence)
            length = await self._lock_conversation(connection, owner, context_id)
            before: list[ChatMessage] = []
            if window > 0 and length:
                rows = await connection.fetch(
                    "SELECT message FROM messages WHERE owner = $1 AND context_id = $2"
                    " ORDER BY seq DESC LIMIT $3",
                    owner,
                    context_id,
                    window,
                )
                before = [load_message(row["message"]) for row in reversed(rows)]
            added = await connection.fetchval(
                "INSERT INTO message_units (owner, context_id, unit_id) VALUES ($1, $2, $3)"
                " ON CONFLICT DO NOTHING RETURNING true",
                owner,
                context_id,
                unit_id,
            )
            if added and stored:
                await connection.execute(
                    "WITH added AS (INSERT INTO messages (owner, context_id, seq, message)"
                    " SELECT $1, $2, $3 + n, message"
                    " FROM unnest($4::bytea[]) WITH ORDINALITY AS m(message, n))"
                    " UPDATE conversations SET length = $3 + cardinality($4::bytea[])"
                    " WHERE owner = $1 AND context_id = $2",
                    owner,
                    context_id,
                    length,
                    stored,
                )
        return bool(added), before

    async def _lock_conversation(
        self, connection: asyncpg.Connection, owner: str, context_id: str
    ) -> int:
        """The conversation's row, made or refreshed and locked: its length (an expired one
        starts over)."""
        row = await connection.fetchrow(
            "INSERT INTO conversations AS c (owner, context_id, expires_at)"
            " VALUES ($1, $2, now() + make_interval(secs => $3))"
            " ON CONFLICT (owner, context_id) DO UPDATE SET expires_at = EXCLUDED.expires_at,"
            "  length = CASE WHEN c.expires_at > now() THEN c.length ELSE -1 END"
            " RETURNING length",
            owner,
            context_id,
            self._ttl_s,
        )
        length = int(row["length"])
        if length < 0:  # expired, not yet swept: its messages and units go
            for table in ("messages", "message_units"):
                await connection.execute(
                    f"DELETE FROM {table} WHERE owner = $1 AND context_id = $2", owner, context_id
                )
            await connection.execute(
                "UPDATE conversations SET length = 0 WHERE owner = $1 AND context_id = $2",
                owner,
                context_id,
            )
            length = 0
        return length

    async def _check_claim(
        self, connection: asyncpg.Connection, owner: str, context_id: str, fence: ContextFence
    ) -> None:
        claim = await connection.fetchrow(_LOCK_CLAIM, owner, context_id)
        if claim is None or claim["task_id"] != fence.task_id:
            raise LeaseLost(fence.task_id, fence.fence)
        admitted = _admits(claim, fence.fence)
        if admitted == _NOT_ADMITTED:
            raise LeaseLost(fence.task_id, fence.fence)
        # A fenced append keeps the claim as long as the conversation (and records a later
        # fence).
        await connection.execute(
            _SET_CLAIM,
            owner,
            context_id,
            fence.task_id,
            fence.fence.holder,
            fence.fence.epoch if admitted == _LATER else claim["fence_epoch"],
            self._ttl_s,
        )

    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        async with self._db.transaction() as connection:
            claim = None
            for _ in range(_CLAIM_ROW_TRIES):
                # A release may delete the row between the two statements (the insert found it,
                # so wrote nothing; the lock then finds none): each statement sees what has
                # committed by its start (READ COMMITTED), so ensuring it again inserts it.
                await connection.execute(_ENSURE_CLAIM, owner, context_id, self._ttl_s)
                claim = await connection.fetchrow(_LOCK_CLAIM, owner, context_id)
                if claim is not None:
                    break
            if claim is None:  # deleted under us each time: a storm of releases; the caller retries
                raise StoreUnavailable(f"context {context_id!r}: its claim row kept vanishing")
            held = claim["task_id"]
            if held is not None and held != task_id:
                return ClaimHolder(held, fenced=claim["fence_epoch"] is not None)
            if fence is None:
                if held is None:
                    await connection.execute(
                        _SET_CLAIM, owner, context_id, task_id, None, None, self._ttl_s
                    )
                return None
            if held is not None and _admits(claim, fence) == _NOT_ADMITTED:
                raise LeaseLost(task_id, fence)
            await connection.execute(
                _SET_CLAIM, owner, context_id, task_id, fence.holder, fence.epoch, self._ttl_s
            )
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
        async with self._db.transaction() as connection:
            claim = await connection.fetchrow(_LOCK_CLAIM, owner, context_id)
            if claim is None or claim["task_id"] != task_id:
                return False
            if fence is not None and _admits(claim, fence) == _NOT_ADMITTED:
                return False
            await connection.execute(
                "DELETE FROM claims WHERE owner = $1 AND context_id = $2", owner, context_id
            )
        return True
