"""Waiting without polling: one LISTEN connection per replica, shared by every waiter.

    publish (any replica) --INSERT journal + pg_notify('a2a_journal', [owner, task]) in its
            |                transaction: delivered when it commits, to every listener
            v
    Notifications (one connection, LISTEN a2a_journal, a2a_cancel) --> the futures of the
            local readers waiting on that task --> each reads the journal again

A reader registers its future and makes sure the listener is listening *before* it reads, so an
entry committed after its read is always notified to it (PostgreSQL delivers a notification only
to sessions listening when the transaction commits).

The connection is watched: asyncpg reports a closed connection (a terminated backend, a restart),
and a ping every `ping_interval_s` finds a silent one. When it is lost every waiter is woken to
read again (it reads through the pool: StoreUnavailable if the database is gone), and the next
waiter connects anew; so no wakeup is lost silently. Cancel requests (`a2a_cancel`) go to every
`cancel_requests()` iterator of this replica; a request sent while the connection is down is
missed here, which is why the lease row's cancel flag exists (the holder sees it at its renew).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator

import asyncpg

from stores.base import TaskRef
from stores.errors import StoreUnavailable
from stores.postgres.errors import CONNECTION_BROKEN, postgres_available

logger = logging.getLogger(__name__)

# What a lost listening connection raises: a broken connection's errors, and the server's
# (terminated mid-ping when the database was killed under load: it escaped the watch once, as an
# unretrieved exception).
_CONNECTION_LOST = (*CONNECTION_BROKEN, asyncpg.PostgresError)

JOURNAL_CHANNEL = "a2a_journal"
CANCEL_CHANNEL = "a2a_cancel"


def task_payload(owner: str, task_id: str) -> str:
    """A notification's payload naming a task (JSON: ids may hold any character)."""
    return json.dumps([owner, task_id], separators=(",", ":"))


def _task_of(payload: str) -> tuple[str, str] | None:
    try:
        owner, task_id = json.loads(payload)
        return str(owner), str(task_id)
    except (ValueError, TypeError):
        logger.warning("ignoring a malformed notification")
        return None


class Notifications:
    """The replica's listening connection and the local waiters it wakes."""

    def __init__(
        self, url: str, *, command_timeout_s: float, ping_interval_s: float | None = None
    ) -> None:
        self._url = url
        self._timeout_s = command_timeout_s
        self._ping_interval_s = ping_interval_s or max(1.0, command_timeout_s)
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        self._cancel_queues: set[asyncio.Queue[TaskRef]] = set()
        self._connection: asyncpg.Connection | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closed = False

    @contextlib.contextmanager
    def waiting(self, owner: str, task_id: str) -> Iterator[asyncio.Future[None]]:
        """A future done at the next notification of the task (or a lost connection)."""
        key = (owner, task_id)
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, set()).add(woken)
        try:
            yield woken
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[key]

    async def listening(self) -> None:
        """Make sure the connection listens (StoreUnavailable if it cannot be opened). Callers
        that come while it is being opened share that attempt."""
        if self._connection is not None and not self._connection.is_closed():
            return
        if self._closed:
            raise StoreUnavailable("the PostgreSQL stores are closed")
        connecting = self._connecting
        if connecting is None or connecting.done():
            connecting = self._connecting = asyncio.ensure_future(self._listen())
        await asyncio.shield(connecting)

    async def _listen(self) -> None:
        with postgres_available():
            connection = await asyncpg.connect(self._url, timeout=self._timeout_s)
            try:
                await connection.add_listener(JOURNAL_CHANNEL, self._on_journal)
                await connection.add_listener(CANCEL_CHANNEL, self._on_cancel)
            except BaseException:
                connection.terminate()
                raise
        if self._closed:
            connection.terminate()
            raise StoreUnavailable("the PostgreSQL stores are closed")
        connection.add_termination_listener(self._on_lost)
        self._connection = connection
        # No waiter to wake: each one reads after its `listening()`, and those that read
        # under a lost connection were woken when it was lost.
        self._watch = asyncio.create_task(self._watch_connection(connection))

    def _on_journal(self, connection: object, pid: int, channel: str, payload: object) -> None:
        key = _task_of(str(payload))
        for woken in self._waiters.get(key, ()) if key is not None else ():
            if not woken.done():
                woken.set_result(None)

    def _on_cancel(self, connection: object, pid: int, channel: str, payload: object) -> None:
        key = _task_of(str(payload))
        if key is not None:
            for queue in self._cancel_queues:
                queue.put_nowait(TaskRef(*key))

    def _on_lost(self, connection: object) -> None:
        if connection is not self._connection:
            return
        self._connection = None
        if not self._closed:
            logger.warning("the PostgreSQL notification connection was lost; reconnecting")
        self._wake_all()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for woken in waiters:
                if not woken.done():
                    woken.set_result(None)

    async def _watch_connection(self, connection: asyncpg.Connection) -> None:
        """Ping the listening connection: one that went silent (a partition, a frozen server)
        is closed and counts as lost."""
        while not connection.is_closed():
            await asyncio.sleep(self._ping_interval_s)
            try:
                await connection.fetchval("SELECT 1", timeout=self._timeout_s)
            except _CONNECTION_LOST:
                connection.terminate()
                self._on_lost(connection)
                return

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        """Cancel notifications for as long as the caller listens. A lost connection is
        re-established (with backoff up to 5 s) and logged, never raised."""
        queue: asyncio.Queue[TaskRef] = asyncio.Queue()
        self._cancel_queues.add(queue)
        backoff = 0.1
        try:
            while True:
                try:
                    await self.listening()
                    backoff = 0.1
                except StoreUnavailable as exc:
                    logger.warning("error=<%s> | cancel channel lost; listening again", exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                try:
                    ref = await asyncio.wait_for(queue.get(), self._ping_interval_s)
                except TimeoutError:
                    continue  # to check that the connection still listens
                yield ref
        finally:
            self._cancel_queues.discard(queue)

    async def aclose(self) -> None:
        self._closed = True
        connecting, self._connecting = self._connecting, None
        if connecting is not None and not connecting.done():
            connecting.cancel()
            await asyncio.wait([connecting])
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.close(timeout=self._timeout_s)
            except _CONNECTION_LOST:
                connection.terminate()
        self._wake_all()
