"""One replica's connection pool to PostgreSQL, opened on first use, and the helpers the stores
run their statements with.

Nothing connects until the first store call. The pool is made under a lock, and the schema is
migrated on its first connection (stores.postgres.migrations); while the database cannot be
reached every call fails with StoreUnavailable within about one command timeout, and the next
call tries again. Once the pool exists, asyncpg replaces the connections it loses.

Every statement has a client-side timeout (`command_timeout_s`: asyncpg cancels it on the
server and the caller gets StoreUnavailable). Waiting for a free connection is not a failure
(under a burst the pool, not the database, is the bottleneck): a caller queues for up to
`POOL_WAITS` command timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import asyncpg

from stores.errors import StoreUnavailable
from stores.postgres.errors import CONNECTION_BROKEN, postgres_available
from stores.postgres.migrations import apply_migrations

logger = logging.getLogger(__name__)

POOL_WAITS = 10
"""How many command timeouts a caller may wait for a free connection."""

IDLE_IN_TRANSACTION_TIMEOUTS = 2
"""How many command timeouts the server keeps a transaction whose client sends nothing."""


def session_settings(command_timeout_s: float) -> dict[str, str]:
    """The pool's sessions' settings. `idle_in_transaction_session_timeout`: a replica cut off
    from the database mid-transaction (its next statement, or the answer to its last, lost in a
    partition) leaves its session open on the server, holding its row locks (a lease, a claim,
    a task row) until TCP gives up, hours later by default; every other replica's statement on
    those rows waits and times out, so nobody takes the cut-off replica's turns over. The server
    ends such a transaction (rolled back, its locks freed) once it has been idle for longer than
    its client would have waited for an answer."""
    idle_ms = int(IDLE_IN_TRANSACTION_TIMEOUTS * command_timeout_s * 1000)
    return {"idle_in_transaction_session_timeout": str(max(idle_ms, 1000))}


async def keep_session(connection: asyncpg.Connection) -> None:
    """The pool's reset at every release: nothing. asyncpg's default sends `SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`, a round trip at each release,
    undoing session state no store leaves on a pooled connection (no advisory lock, cursor,
    LISTEN or SET: the migration's lock and LISTEN have connections of their own). An open
    transaction is still rolled back: asyncpg does that before it calls a pool's `reset`."""


class Database:
    """The pool, made on first use; `on_open` runs once it is (the stores' background sweep)."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        command_timeout_s: float = 5.0,
        on_open: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.command_timeout_s = command_timeout_s
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Future[asyncpg.Pool] | None = None
        self.on_open = on_open
        self._closed = False

    async def pool(self) -> asyncpg.Pool:
        """The pool; callers that come while it is being opened share that one attempt (so
        during an outage each fails within one attempt's timeout, not one per caller before
        it), and a failed attempt is made again by the next caller."""
        pool = self._pool
        if pool is not None:
            return pool
        if self._closed:
            raise StoreUnavailable("the PostgreSQL stores are closed")
        opening = self._opening
        if opening is None or opening.done():
            opening = self._opening = asyncio.ensure_future(self._open_once())
        return await asyncio.shield(opening)

    async def _open_once(self) -> asyncpg.Pool:
        pool = await self._open()
        if self._closed:  # closed while it opened
            pool.terminate()
            raise StoreUnavailable("the PostgreSQL stores are closed")
        self._pool = pool
        if self.on_open is not None:
            self.on_open()
        return pool

    async def _open(self) -> asyncpg.Pool:
        timeout = self.command_timeout_s
        with postgres_available():
            # The schema first, on a connection of its own: a pool's connections would be
            # opened (min_size) before it, and the migration lock may be held by another replica.
            connection = await asyncpg.connect(self.url, timeout=timeout)
            try:
                await asyncio.wait_for(apply_migrations(connection), 10 * timeout)
            finally:
                await connection.close(timeout=timeout)
            pool = asyncpg.create_pool(
                self.url,
                # No floor: asyncpg would keep reconnecting a lost floor in the background,
                # logging a traceback at each failure for as long as the database is down.
                # Connections are opened as callers need them (and fail as they do).
                min_size=0,
                max_size=self._pool_size,
                command_timeout=timeout,
                timeout=timeout,  # connection attempts
                max_inactive_connection_lifetime=60.0,
                server_settings=session_settings(timeout),
                reset=keep_session,
            )
            return await pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection (StoreUnavailable if there is none to be had)."""
        with postgres_available():
            pool = await self.pool()
            async with pool.acquire(timeout=POOL_WAITS * self.command_timeout_s) as connection:
                try:
                    yield connection
                except CONNECTION_BROKEN:
                    # Its protocol is stuck mid-state (see errors.py), its socket gone, or the
                    # server did not answer in time: never hand it out again. Released as it
                    # is, the pool (or a rollback) would first wait for the timed-out
                    # statement's cancel, which a server cut off never answers: the caller's
                    # error would come a command timeout late, or two.
                    connection.terminate()
                    raise

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection in a transaction (READ COMMITTED: the stores lock the rows that
        their conditional writes read, `FOR UPDATE` / `FOR SHARE`). A statement past its
        timeout ends it with the connection (the server rolls back what it had)."""
        async with self.connection() as connection:
            transaction = connection.transaction()
            await transaction.start()
            try:
                yield connection
            except TimeoutError:
                raise  # no rollback to wait for: connection() terminates the connection
            except BaseException:
                if not connection.is_closed():
                    await transaction.rollback()
                raise
            else:
                await transaction.commit()

    async def ping(self, timeout_s: float) -> None:
        """StoreUnavailable unless the database answers within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                async with self.connection() as connection:
                    await connection.fetchval("SELECT 1")
        except TimeoutError as exc:
            raise StoreUnavailable("PostgreSQL did not answer a ping") from exc

    async def aclose(self) -> None:
        self._closed = True
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.cancel()
            await asyncio.wait([opening])
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.command_timeout_s)
            except CONNECTION_BROKEN:
                pool.terminate()


def rows_affected(status: object) -> int:
    """The row count of a command's status (`"UPDATE 3"`, `"DELETE 0"`)."""
    return int(str(status).rsplit(" ", 1)[-1])
