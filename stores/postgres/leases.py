"""PostgresLeaseStore: which process runs which turn, cancel flags, heartbeats, on the
database's clock.

A lease is a row per task (stores.postgres.schema), kept while its task lives: `holder` NULL is
a released lease, and `epoch` only grows, so a fence is never reused. Every change is one
conditional statement on that row (the row lock orders them), with expiry decided by the
server's `now()`, so replicas' clocks never matter. A row past its own `expires_at` (nothing
renewed it for the task TTL) counts as no lease: it is garbage, kept only for its epoch.

`request_cancel` flags the row and notifies `a2a_cancel` in the same statement; every replica's
`cancel_requests()` hears it (stores.postgres.notifications), and the holder also sees the flag
at its next renew (a notification is missed by a replica whose connection was down).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from stores.base import DEFAULT_TASK_TTL_S, LeaseStatus, LeaseStore, TaskRef
from stores.postgres.database import Database, rows_affected
from stores.postgres.notifications import CANCEL_CHANNEL, Notifications, task_payload

# $1 owner, $2 task, $3 holder, $4 lease ttl s, $5 row ttl s. No row back: another holder has
# a live lease. Taking it (free, expired, or from garbage) gives the next epoch; our own lease
# again keeps it. The cancel flag goes only with a free lease (a takeover keeps a request made
# to the dead holder), and a garbage row's void with it.
_ACQUIRE = """
INSERT INTO leases AS l (owner, task_id, holder, epoch, lease_expires_at, expires_at)
VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4), now() + make_interval(secs => $5))
ON CONFLICT (owner, task_id) DO UPDATE SET
    epoch = CASE WHEN l.holder = $3 AND l.expires_at > now() THEN l.epoch ELSE l.epoch + 1 END,
    cancel_requested = l.cancel_requested AND l.holder IS NOT NULL AND l.expires_at > now(),
    voided_by = CASE WHEN l.expires_at > now() THEN l.voided_by END,
    holder = $3,
    lease_expires_at = EXCLUDED.lease_expires_at,
    expires_at = greatest(l.expires_at, EXCLUDED.expires_at)
WHERE l.holder IS NULL OR l.holder = $3 OR l.lease_expires_at <= now() OR l.expires_at <= now()
RETURNING epoch
"""

# $1 owners, $2 tasks, $3 holders, $4 lease ttl s, $5 row ttl s: the leases still ours.
_RENEW = """
UPDATE leases AS l SET
    lease_expires_at = now() + make_interval(secs => $4),
    expires_at = greatest(l.expires_at, now() + make_interval(secs => $5))
FROM unnest($1::text[], $2::text[], $3::text[]) AS r(owner, task_id, holder)
WHERE l.owner = r.owner AND l.task_id = r.task_id AND l.holder = r.holder
  AND l.expires_at > now()
RETURNING l.owner, l.task_id, l.holder, l.cancel_requested
"""

_CANCEL = f"""
WITH flagged AS (
    UPDATE leases SET cancel_requested = true
    WHERE owner = $1 AND task_id = $2 AND holder IS NOT NULL AND expires_at > now()
)
SELECT pg_notify('{CANCEL_CHANNEL}', $3)
"""

_HEARTBEAT = """
WITH lapsed AS (
    DELETE FROM processes WHERE expires_at < now() AND process <> $1 RETURNING process
), beat AS (
    INSERT INTO processes (process, expires_at) VALUES ($1, now() + make_interval(secs => $2))
    ON CONFLICT (process) DO UPDATE SET expires_at = EXCLUDED.expires_at
)
SELECT process FROM lapsed
"""


class PostgresLeaseStore(LeaseStore):
    def __init__(
        self,
        database: Database,
        notifications: Notifications,
        *,
        ttl_s: float = DEFAULT_TASK_TTL_S,
    ) -> None:
        self._db = database
        self._notifications = notifications
        self._ttl_s = float(ttl_s)

    def _row_ttl_s(self, lease_ttl_s: float) -> float:
        return max(self._ttl_s, lease_ttl_s)

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        async with self._db.connection() as connection:
            epoch = await connection.fetchval(
                _ACQUIRE, owner, task_id, holder, float(ttl_s), self._row_ttl_s(ttl_s)
            )
        return int(epoch) if epoch is not None else 0

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        return (await self.renew_many([(TaskRef(owner, task_id), holder)], ttl_s=ttl_s))[0]

    async def renew_many(
        self, held: list[tuple[TaskRef, str]], *, ttl_s: float
    ) -> list[LeaseStatus]:
        """Every renewal in one statement."""
        if not held:
            return []
        async with self._db.connection() as connection:
            rows = await connection.fetch(
                _RENEW,
                [ref.owner for ref, _ in held],
                [ref.task_id for ref, _ in held],
                [holder for _, holder in held],
                float(ttl_s),
                self._row_ttl_s(ttl_s),
            )
        renewed = {
            (row["owner"], row["task_id"], row["holder"]): row["cancel_requested"] for row in rows
        }
        statuses = []
        for ref, holder in held:
            cancel = renewed.get((ref.owner, ref.task_id, holder))
            if cancel is None:
                statuses.append(LeaseStatus.LOST)
            else:
                statuses.append(LeaseStatus.CANCEL_REQUESTED if cancel else LeaseStatus.HELD)
        return statuses

    async def is_held(self, task_id: str, *, owner: str) -> bool:
        async with self._db.connection() as connection:
            return bool(
                await connection.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM leases WHERE owner = $1 AND task_id = $2"
                    " AND holder IS NOT NULL AND lease_expires_at > now()"
                    " AND expires_at > now())",
                    owner,
                    task_id,
                )
            )

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute(
                "UPDATE leases SET holder = NULL, cancel_requested = false"
                " WHERE owner = $1 AND task_id = $2 AND holder = $3",
                owner,
                task_id,
                holder,
            )

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute(
                "UPDATE leases SET lease_expires_at = least(lease_expires_at, now())"
                " WHERE owner = $1 AND task_id = $2 AND holder = $3",
                owner,
                task_id,
                holder,
            )

    async def heartbeat(self, process: str, *, ttl_s: float) -> list[str]:
        """The lapsed processes are deleted by the statement that returns them: each goes to
        one caller only."""
        async with self._db.connection() as connection:
            rows = await connection.fetch(_HEARTBEAT, process, float(ttl_s))
        return [row["process"] for row in rows]

    async def hand_over_process(self, process: str) -> int:
        """Scans the held leases (the partial index of running ones): this runs only when a
        process is found dead."""
        async with self._db.connection() as connection:
            status = await connection.execute(
                "UPDATE leases SET lease_expires_at = least(lease_expires_at, now())"
                " WHERE holder IS NOT NULL AND split_part(holder, '/', 1) = $1"
                " AND expires_at > now()",
                process,
            )
        return rows_affected(status)

    async def leave(self, process: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute("DELETE FROM processes WHERE process = $1", process)

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute(_CANCEL, owner, task_id, task_payload(owner, task_id))

    def cancel_requests(self) -> AsyncIterator[TaskRef]:
        return self._notifications.cancel_requests()

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        async with self._db.connection() as connection:
            rows = await connection.fetch(
                "SELECT owner, task_id FROM leases"
                " WHERE holder IS NOT NULL AND lease_expires_at <= now() AND expires_at > now()"
                " ORDER BY lease_expires_at LIMIT $1",
                limit,
            )
        return [TaskRef(row["owner"], row["task_id"]) for row in rows]
