"""asyncpg's failures as the stores' errors: no asyncpg exception reaches a caller.

"The database cannot be reached" (refused, lost, timed out, shutting down, out of connections, a
transaction the server rolled back to break a deadlock) is StoreUnavailable: the request may be
retried. Anything else the server or driver refuses is a StoreError (a defect, not an outage).
"""

from __future__ import annotations

import asyncpg
from asyncpg import exceptions as pg

from stores.errors import StoreError, StoreUnavailable

_UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable host
    TimeoutError,  # a command (or connection attempt) past its timeout
    asyncpg.InterfaceError,  # a connection closed under us, a pool closing
    pg.PostgresConnectionError,  # class 08
    pg.OperatorInterventionError,  # class 57: shutdown, terminated backend, query canceled
    pg.InsufficientResourcesError,  # class 53: too many connections
    pg.TransactionRollbackError,  # class 40: deadlock or serialization failure (retryable)
    pg.CannotConnectNowError,
    # A pooled connection the server terminated while it sat idle: asyncpg's protocol is left
    # mid-state and its next command fails so (the pool is told to replace it: database.py).
    pg.InternalClientError,
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
