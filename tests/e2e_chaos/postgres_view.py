"""What the PostgreSQL stores hold, read from their rows the way an auditor reads them (schema:
stores/postgres/schema.py), with the questions of tests/e2e_chaos/redis_view.RedisView:

    tasks      (owner, task_id)            state, snapshot (stored JSON), expires_at
    journal    (owner, task_id, position)  event (stored JSON), epoch (the writer's lease epoch)
    leases     (owner, task_id)            holder (NULL: released), lease_expires_at, expires_at
    claims     (owner, context_id)         task_id (the turn running in the context)
    messages   (owner, context_id, seq)    message (ChatMessage JSON)

A task is *stuck* when it is SUBMITTED or WORKING and nobody holds a live lease on it, as in Redis.
A context's claim is *stale* when it names a task that has ended or does not exist: its turn ended
while the database could not be told (tidying is left for later, agent/runtime/publisher.forget),
and the next turn in the context finds it so and replaces it (agent/runtime/claims.py). Stale
claims are allowed; a context whose next message is refused is what would be locked. Every expiry is the database's
`now()`, as the stores decide it. Each question opens a connection of its own and closes it
(fine in a test; the database may have been restarted in between).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from stores.base import ANONYMOUS
from tests.e2e_chaos.redis_view import ACTIVE_STATES, TERMINAL_STATES, JournalRow

T = TypeVar("T")

_LIVE_LEASE = "holder IS NOT NULL AND lease_expires_at > now() AND expires_at > now()"


class PostgresView:
    def __init__(self, url: str, owner: str = ANONYMOUS) -> None:
        self.url = url
        self.owner = owner

    def _run(self, query: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(query)

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        import asyncpg

        connection = await asyncpg.connect(self.url, timeout=10)
        try:
            return list(await connection.fetch(sql, *args, timeout=10))
        finally:
            await connection.close()

    def fetch(self, sql: str, *args: Any) -> list[Any]:
        return self._run(self._fetch(sql, *args))

    # --- leases ---

    def lease(self, task_id: str) -> dict[str, str]:
        rows = self.fetch(
            "SELECT holder, epoch, lease_expires_at, expires_at,"
            f" ({_LIVE_LEASE}) AS live FROM leases WHERE owner = $1 AND task_id = $2",
            self.owner, task_id,
        )  # fmt: skip
        return {k: str(v) for k, v in rows[0].items()} if rows else {}

    def lease_live(self, task_id: str) -> bool:
        return self.lease(task_id).get("live") == "True"

    def holder(self, task_id: str) -> str:
        holder = self.lease(task_id).get("holder", "")
        return "" if holder == "None" else holder

    # --- tasks ---

    def task_ids(self) -> list[str]:
        rows = self.fetch("SELECT task_id FROM tasks WHERE owner = $1", self.owner)
        return [r["task_id"] for r in rows]

    def task_state(self, task_id: str) -> str | None:
        rows = self.fetch(
            "SELECT state FROM tasks WHERE owner = $1 AND task_id = $2", self.owner, task_id
        )
        return rows[0]["state"] if rows else None

    def task(self, task_id: str) -> dict[str, Any] | None:
        rows = self.fetch(
            "SELECT snapshot FROM tasks WHERE owner = $1 AND task_id = $2", self.owner, task_id
        )
        return json.loads(rows[0]["snapshot"]) if rows else None

    def active(self) -> list[str]:
        """Tasks still SUBMITTED or WORKING (a turn is, or should be, running)."""
        rows = self.fetch(
            "SELECT task_id FROM tasks WHERE owner = $1 AND state = ANY($2::text[])",
            self.owner, sorted(ACTIVE_STATES),
        )  # fmt: skip
        return [r["task_id"] for r in rows]

    def stuck(self, task_ids: list[str] | None = None) -> list[str]:
        """Tasks SUBMITTED or WORKING without a live lease, each described."""
        rows = self.fetch(
            "SELECT t.task_id, t.state FROM tasks t"
            " LEFT JOIN leases l ON l.owner = t.owner AND l.task_id = t.task_id"
            " AND l.holder IS NOT NULL AND l.lease_expires_at > now() AND l.expires_at > now()"
            " WHERE t.owner = $1 AND t.state = ANY($2::text[]) AND l.task_id IS NULL",
            self.owner, sorted(ACTIVE_STATES),
        )  # fmt: skip
        wanted = None if task_ids is None else set(task_ids)
        return [
            f"{r['task_id']} {r['state']} lease={self.lease(r['task_id']) or 'none'}"
            for r in rows
            if wanted is None or r["task_id"] in wanted
        ]

    def tasks_at_end(self) -> list[tuple[str, str, dict[str, Any], bool]]:
        """Every task: (id, state, snapshot, whether a live lease is held), in one query."""
        rows = self.fetch(
            "SELECT t.task_id, t.state, t.snapshot, (l.task_id IS NOT NULL) AS live FROM tasks t"
            " LEFT JOIN leases l ON l.owner = t.owner AND l.task_id = t.task_id"
            " AND l.holder IS NOT NULL AND l.lease_expires_at > now() AND l.expires_at > now()"
            " WHERE t.owner = $1",
            self.owner,
        )
        return [(r["task_id"], r["state"], json.loads(r["snapshot"]), r["live"]) for r in rows]

    # --- journals, conversations, claims ---

    def journal(self, task_id: str) -> list[JournalRow]:
        rows = self.fetch(
            "SELECT position, event, epoch FROM journal WHERE owner = $1 AND task_id = $2"
            " ORDER BY position",
            self.owner, task_id,
        )  # fmt: skip
        return [JournalRow(str(r["position"]), json.loads(r["event"]), r["epoch"]) for r in rows]

    def journals(self) -> dict[str, list[JournalRow]]:
        """Every task's journal, in one query (the nemesis reads thousands)."""
        rows = self.fetch(
            "SELECT task_id, position, event, epoch FROM journal WHERE owner = $1"
            " ORDER BY task_id, position",
            self.owner,
        )
        out: dict[str, list[JournalRow]] = {}
        for r in rows:
            row = JournalRow(str(r["position"]), json.loads(r["event"]), r["epoch"])
            out.setdefault(r["task_id"], []).append(row)
        return out

    def conversation(self, context_id: str) -> list[dict[str, Any]]:
        rows = self.fetch(
            "SELECT message FROM messages WHERE owner = $1 AND context_id = $2 ORDER BY seq",
            self.owner, context_id,
        )  # fmt: skip
        return [json.loads(r["message"]) for r in rows]

    def claim_task(self, context_id: str) -> str | None:
        """The task the context's live claim names (None: free)."""
        rows = self.fetch(
            "SELECT task_id FROM claims WHERE owner = $1 AND context_id = $2"
            " AND expires_at > now()",
            self.owner, context_id,
        )  # fmt: skip
        return rows[0]["task_id"] if rows else None

    def stale_claims(self) -> dict[str, str]:
        """Contexts whose live claim names a task that has ended, or no task there is: each
        context's claim described."""
        rows = self.fetch(
            "SELECT c.context_id, c.task_id, t.state FROM claims c"
            " LEFT JOIN tasks t ON t.owner = c.owner AND t.task_id = c.task_id"
            " WHERE c.owner = $1 AND c.task_id IS NOT NULL AND c.expires_at > now()"
            " AND (t.state IS NULL OR t.state = ANY($2::text[]))",
            self.owner, sorted(TERMINAL_STATES),
        )  # fmt: skip
        return {r["context_id"]: f"claim of {r['task_id']} ({r['state']})" for r in rows}
