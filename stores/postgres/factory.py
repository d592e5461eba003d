"""The PostgreSQL stores of one replica, built from a URL: one pool, one listening connection,
one expiry sweep.

The stores themselves: `tasks`, `leases`, `messages`, `checkpoints`, `push`, `rate_limit`; the
schema in `schema` (migrated by `migrations`), waiting in `notifications`, expiry in `sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stores.base import DEFAULT_TASK_TTL_S
from stores.postgres.checkpoints import PostgresCheckpointStore
from stores.postgres.database import Database
from stores.postgres.leases import PostgresLeaseStore
from stores.postgres.messages import PostgresMessageStore
from stores.postgres.notifications import Notifications
from stores.postgres.push import PostgresPushConfigStore
from stores.postgres.rate_limit import PostgresRateLimiter
from stores.postgres.sweep import ExpirySweep
from stores.postgres.tasks import PostgresTaskStore
from stores.rate_limit import RateLimit, RateLimiter

__all__ = ["POOL_MAX", "PostgresStores", "create_postgres_stores", "pool_size_for"]

POOL_MAX = 20
"""The most connections a replica opens unless told (DATABASE_POOL_SIZE): each is a server
process of its own, and past the database's cores more of them contend rather than help; 20
keeps four replicas under PostgreSQL's default max_connections (100)."""


def pool_size_for(max_running_turns: int) -> int:
    """A replica's pool from what it runs at once: every running turn writes one statement at a
    time (each write is one statement: stores.postgres.write_functions), so one connection per
    turn; and 4 for the rest (journal notifications, the expiry sweep, lease renewals, the
    readiness probe). Streams and blocking sends wait on the listening connection, not on the
    pool, and read through it between wake-ups. At most POOL_MAX."""
    return min(max_running_turns + 4, POOL_MAX)


@dataclass(frozen=True, kw_only=True)
class PostgresStores:
    """The stores over one pool; waits and cancel requests over one listening connection."""

    tasks: PostgresTaskStore
    messages: PostgresMessageStore
    checkpoints: PostgresCheckpointStore
    leases: PostgresLeaseStore
    pushes: PostgresPushConfigStore
    database: Database
    notifications: Notifications
    sweep: ExpirySweep
    ping_timeout_s: float

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        """Buckets in the database: every replica on it shares them."""
        return PostgresRateLimiter(self.database, limit)

    async def ping(self) -> None:
        """Raise StoreUnavailable unless PostgreSQL answers within `ping_timeout_s`."""
        await self.database.ping(self.ping_timeout_s)

    async def aclose(self) -> None:
        await self.sweep.aclose()
        await self.tasks.announcements.aclose()
        await self.notifications.aclose()
        await self.database.aclose()


def create_postgres_stores(
    url: str,
    *,
    ttl_s: float = DEFAULT_TASK_TTL_S,
    pool_size: int = POOL_MAX,
    command_timeout_s: float = 5.0,
    journal_max: int = 10_000,
    sweep_interval_s: float = 60.0,
) -> PostgresStores:
    """Build the PostgreSQL stores for a `postgresql://` or `postgres://` URL.

    Nothing connects here: the pool is opened (and the schema migrated) by the first store
    call, and while the database cannot be reached each call fails with StoreUnavailable within
    about `command_timeout_s` (the next one tries again). The expiry sweep starts with the pool.
    """
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            f"DATABASE_URL must start with postgresql:// or postgres:// (got {url.split(':')[0]!r})"
        )
    database = Database(url, pool_size=pool_size, command_timeout_s=command_timeout_s)
    sweep = ExpirySweep(database, interval_s=sweep_interval_s)
    database.on_open = sweep.start
    notifications = Notifications(url, command_timeout_s=command_timeout_s)
    return PostgresStores(
        tasks=PostgresTaskStore(database, notifications, ttl_s=ttl_s, journal_max=journal_max),
        messages=PostgresMessageStore(database, ttl_s=ttl_s),
        checkpoints=PostgresCheckpointStore(database, ttl_s=ttl_s),
        leases=PostgresLeaseStore(database, notifications, ttl_s=ttl_s),
        pushes=PostgresPushConfigStore(database, ttl_s=ttl_s),
        database=database,
        notifications=notifications,
        sweep=sweep,
        ping_timeout_s=2 * command_timeout_s,
    )
