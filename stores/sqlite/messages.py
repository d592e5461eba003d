"""SQLiteMessageStore: a context's conversation (rows of ChatMessage JSON, the unit ids appended)
and its one-turn-at-a-time claim (a row naming the task, with the task's lease fence).

Each method is one transaction with the semantics of its script on Redis
(stores.redis.conversation_scripts): a fenced append is admitted when the claim names its task
under its fence or an earlier one (which the append's then replaces: epochs only grow), and a
claim's holder that carries no fence was claimed without one (`ClaimHolder.fenced`).
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
from stores.sqlite.database import Database, Step
from stores.sqlite.expiry import Ttl

_CLAIM = (
    "SELECT task_id, fence_holder, fence_epoch FROM claims"
    " WHERE owner = ? AND context_id = ? AND expires_at > ?"
)
_SET_CLAIM = (
    "INSERT OR REPLACE INTO claims (owner, context_id, task_id, fence_holder, fence_epoch,"
    " expires_at) VALUES (?, ?, ?, ?, ?, ?)"
)
_REFUSED, _SAME, _LATER = 0, 1, 2


def _admits(claim: tuple[str, str | None, int | None], fence: Fence) -> int:
    """Whether the claim's task may write under `fence`: _SAME (its own fence), _LATER (none
    yet, or an earlier one: to record), or _REFUSED (a later fence, or another holder's)."""
    _, holder, epoch = claim
    if holder is None or epoch is None or epoch < fence.epoch:
        return _LATER
    if epoch == fence.epoch and holder == fence.holder:
        return _SAME
    return _REFUSED


class SQLiteMessageStore(MessageStore):
    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._database = database
        self._ttl = Ttl.of_seconds(ttl_s)

    async def window(self, context_id: str, *, owner: str, limit: int) -> list[ChatMessage]:
        if limit <= 0:
            return []

        def window(step: Step) -> list[bytes]:
            return _window(step, owner, context_id, limit)

        return [load_message(raw) for raw in await self._database.read(window)]

    async def append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        *,
        owner: str,
        unit_id: str,
        fence: ContextFence | None = None,
    ) -> bool:
        added, _ = await self._append(context_id, messages, owner, unit_id, 0, fence)
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
        """Both in one transaction: the window is the one the append followed."""
        _, window = await self._append(context_id, messages, owner, unit_id, limit, fence)
        return [load_message(raw) for raw in window]

    async def _append(
        self,
        context_id: str,
        messages: list[ChatMessage],
        owner: str,
        unit_id: str,
        limit: int,
        fence: ContextFence | None,
    ) -> tuple[bool, list[bytes]]:
        stored = [dump_message(message) for message in messages]

        def append(step: Step) -> tuple[bool, list[bytes]]:
            connection, now = step.connection, step.now_ms
            expires = self._ttl.expires(now)
            if fence is not None:
                self._admit(step, owner, context_id, fence, expires)
            window = _window(step, owner, context_id, limit) if limit > 0 else []
            connection.execute(
                "DELETE FROM conversations WHERE owner = ? AND context_id = ? AND expires_at <= ?",
                (owner, context_id, now),
            )
            conversation, next_seq = connection.execute(
                "INSERT INTO conversations (owner, context_id, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (owner, context_id) DO UPDATE SET expires_at = excluded.expires_at"
                " RETURNING id, next_seq",
                (owner, context_id, expires),
            ).fetchone()
            added = connection.execute(
                "INSERT OR IGNORE INTO units (conversation, unit_id) VALUES (?, ?)",
                (conversation, unit_id),
            ).rowcount
            if added and stored:
                connection.executemany(
                    "INSERT INTO messages (conversation, seq, message) VALUES (?, ?, ?)",
                    [(conversation, next_seq + i, raw) for i, raw in enumerate(stored)],
                )
                connection.execute(
                    "UPDATE conversations SET next_seq = ? WHERE id = ?",
                    (next_seq + len(stored), conversation),
                )
            return bool(added), window

        return await self._database.write(append)

    def _admit(
        self, step: Step, owner: str, context_id: str, fence: ContextFence, expires: int
    ) -> None:
        """LeaseLost unless the claim admits the fence; a later fence is recorded, and a fenced
        append keeps the claim as long as the conversation."""
        claim = step.connection.execute(_CLAIM, (owner, context_id, step.now_ms)).fetchone()
        if claim is None or claim[0] != fence.task_id:
            raise LeaseLost(fence.task_id, fence.fence)
        admitted = _admits(claim, fence.fence)
        if admitted == _REFUSED:
            raise LeaseLost(fence.task_id, fence.fence)
        holder, epoch = (fence.fence.holder, fence.fence.epoch) if admitted == _LATER else claim[1:]
        step.connection.execute(
            _SET_CLAIM, (owner, context_id, fence.task_id, holder, epoch, expires)
        )

    async def claim(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> ClaimHolder | None:
        def claim(step: Step) -> ClaimHolder | None:
            connection, now = step.connection, step.now_ms
            held = connection.execute(_CLAIM, (owner, context_id, now)).fetchone()
            if held is not None and held[0] != task_id:
                return ClaimHolder(str(held[0]), fenced=held[1] is not None)
            if fence is None:
                if held is None:
                    connection.execute(
                        _SET_CLAIM, (owner, context_id, task_id, None, None, self._ttl.expires(now))
                    )
                return None
            if held is not None and _admits(held, fence) == _REFUSED:
                raise LeaseLost(task_id, fence)
            connection.execute(
                _SET_CLAIM,
                (owner, context_id, task_id, fence.holder, fence.epoch, self._ttl.expires(now)),
            )
            return None

        return await self._database.write(claim)

    async def replace_claim(
        self,
        context_id: str,
        stale_holder: str,
        task_id: str,
        *,
        owner: str,
        fence: Fence | None = None,
    ) -> bool:
        def replace(step: Step) -> bool:
            connection, now = step.connection, step.now_ms
            held = connection.execute(_CLAIM, (owner, context_id, now)).fetchone()
            if held is None or held[0] != stale_holder:
                return False
            holder, epoch = (fence.holder, fence.epoch) if fence is not None else (None, None)
            connection.execute(
                _SET_CLAIM, (owner, context_id, task_id, holder, epoch, self._ttl.expires(now))
            )
            return True

        return await self._database.write(replace)

    async def release(
        self, context_id: str, task_id: str, *, owner: str, fence: Fence | None = None
    ) -> bool:
        def release(step: Step) -> bool:
            connection = step.connection
            held = connection.execute(_CLAIM, (owner, context_id, step.now_ms)).fetchone()
            if held is None or held[0] != task_id:
                return False
            if fence is not None and _admits(held, fence) == _REFUSED:
                return False
            connection.execute(
                "DELETE FROM claims WHERE owner = ? AND context_id = ?", (owner, context_id)
            )
            return True

        return await self._database.write(release)


def _window(step: Step, owner: str, context_id: str, limit: int) -> list[bytes]:
    """The last `limit` messages, oldest first: read newest first by the primary key, `limit`
    rows deep (the window only, however long the conversation)."""
    rows = step.connection.execute(
        "SELECT m.message FROM conversations c JOIN messages m ON m.conversation = c.id"
        " WHERE c.owner = ? AND c.context_id = ? AND c.expires_at > ?"
        " ORDER BY m.seq DESC LIMIT ?",
        (owner, context_id, step.now_ms, limit),
    ).fetchall()
    return [bytes(row[0]) for row in reversed(rows)]
