"""asyncpg's failures as the stores' errors: no asyncpg exception reaches a caller.

"The database cannot be reached" (refused, lost, timed out, shutting down, out of connections, a
transaction the server rolled back to break a deadlock) is StoreUnavailable: the request may be
retried. Anything else the server or driver refuses is a StoreError (a defect, not an outage).
"""

from __future__ import annotations

import asyncpg
from asyncpg import exceptions as pg

from stores.errors import StoreError, StoreUnavailable

CONNECTION_BROKEN: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable host
    TimeoutError,  # a command (or connection attempt) past its timeout
    asyncpg.InterfaceError,  # a connection closed under us, a pool closing
    # A connection the server terminated mid-command (or while it sat idle in the pool):
    # asyncpg's protocol is left mid-state and its next command fails so.
    pg.InternalClientError,
)
"""What a connection raises once it is not to be used again: the pool's (database.py) is
terminated, the listener's (notifications.py) replaced."""

_UNREACHABLE: tuple[type[BaseException], ...] = (
    *CONNECTION_BROKEN,
    pg.PostgresConnectionError,  # class 08
    pg.OperatorInterventionError,  # class 57: shutdown, terminated backend, query canceled
    pg.InsufficientResourcesError,  # class 53: too many connections
    pg.TransactionRollbackError,  # class 40: deadlock or serialization failure (retryable)
    pg.CannotConnectNowError,
)


class _PostgresAvailable:
    """A class rather than a generator context manager: every store call runs in one."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: object
    ) -> None:
        if exc is None or isinstance(exc, StoreError):
            return
        if isinstance(exc, ValueError):  # an argument the driver cannot encode: a defect
            raise StoreError(f"a store command's argument was refused: {exc}") from exc
        if isinstance(exc, _UNREACHABLE):
            raise StoreUnavailable(f"PostgreSQL is unavailable: {type(exc).__name__}") from exc
        if isinstance(exc, asyncpg.PostgresError):
            raise StoreError(f"PostgreSQL refused a store command: {exc}") from exc


_AVAILABLE = _PostgresAvailable()


def postgres_available() -> _PostgresAvailable:
    """`with postgres_available(): ...`: see `_PostgresAvailable`."""
    return _AVAILABLE
