"""Journal notifications sent after the writes they announce, many in one statement.

    publish --a2a_publish() commits--> announce([owner, task]) --> one batch at a time:
            SELECT pg_notify('a2a_journal', p) FROM unnest(payloads) --> every replica's listener

Why not `pg_notify` inside the writing statement: PostgreSQL serializes the commits of every
transaction that notifies (a database-wide lock taken before the commit record and held until
the commit ends, its WAL flush included), so journal writes that notify commit one at a time,
each waiting for the previous one's `fsync`: no group commit. A notification in a transaction of
its own writes no data, so its commit waits for no flush; and concurrent publishes share one.

A notification sent after the commit still wakes every waiter: a reader registers and listens
before it reads (stores.postgres.notifications), so an entry committed after its read is
announced after that too. One not sent (the database lost between the commit and the
announcement, the replica killed there) delays its readers to their read's timeout, when they
read again: nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging

from stores.errors import StoreError
from stores.postgres.database import Database
from stores.postgres.notifications import JOURNAL_CHANNEL

logger = logging.getLogger(__name__)

_ANNOUNCE = f"SELECT pg_notify('{JOURNAL_CHANNEL}', payload) FROM unnest($1::text[]) AS payload"


class Announcements:
    """One statement in flight at a time; the payloads that come meanwhile go in the next. A
    writer does not wait for it: its entries are committed, and its own readers (woken by the
    same notification) read them whenever it comes."""

    def __init__(self, database: Database, *, close_timeout_s: float = 2.0) -> None:
        self._db = database
        self._close_timeout_s = close_timeout_s
        self._pending: dict[str, None] = {}  # an ordered set: a task announced once a batch
        self._sender: asyncio.Task[None] | None = None

    def announce(self, payload: str) -> None:
        """Send the payload's notification soon (a failure is logged: the write it announces
        is committed, and its readers read again at their timeout)."""
        self._pending[payload] = None
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._pending:
            payloads, self._pending = list(self._pending), {}
            try:
                async with self._db.connection() as connection:
                    await connection.execute(_ANNOUNCE, payloads)
            except StoreError as exc:
                logger.warning("journal notifications not sent (readers wait for their read's"
                               " timeout) | %s", exc)  # fmt: skip

    async def aclose(self) -> None:
        """Send what is pending (for up to `close_timeout_s`), then stop."""
        sender, self._sender = self._sender, None
        if sender is None or sender.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(sender), self._close_timeout_s)
        except TimeoutError:
            sender.cancel()
            await asyncio.wait([sender])
