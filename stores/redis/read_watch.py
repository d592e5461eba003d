"""ReadWatch: a blocking read waiting on a Redis that stopped answering fails within seconds.

A blocking XREAD waits for news up to its block (an open stream's keep-alive period, 15 s by
default), and only silence past the block plus a margin says the connection is cut: a replica
partitioned from Redis (or a Redis frozen) left every stream open on it silent, kept alive by
pings, for ~20 s, while another replica took its turns over. Pinging on the blocked connection
itself is impossible (it is busy with the XREAD), so:

    blocking reads waiting (any number) --while any waits--> one probe per replica:
        every interval_s: PING (the lease client, as the readiness probe; its own deadline)
            answered --> nothing
            failed   --> every read waiting now ends with StoreUnavailable (its client's
                         stream ends with the store-unavailable error; it resumes elsewhere)

A read ends through the deadline it already has (`asyncio.timeout`, rescheduled to now), so a
read costs an entry in a set while it waits: no task, no timer of its own. With no read waiting
the probe stops (an idle replica sends nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from stores.base import StoreUnavailable
from stores.redis.support import RedisClient, redis_available

logger = logging.getLogger(__name__)


class ReadWatch:
    def __init__(self, ping: Callable[[], Awaitable[None]], *, interval_s: float) -> None:
        """`ping`: raises StoreUnavailable unless Redis answers, within a deadline of its own;
        `interval_s`: the wait between two pings while reads wait."""
        self._ping = ping
        self._interval_s = interval_s
        self._deadlines: set[asyncio.Timeout] = set()
        self._probe: asyncio.Task[None] | None = None

    def watching(self, deadline: asyncio.Timeout) -> _Watched:
        """`with watch.watching(deadline): ...`: while the block runs, a failed ping makes
        `deadline` expire at once (the read's own handling of its timeout then raises
        StoreUnavailable)."""
        return _Watched(self, deadline)

    def _add(self, deadline: asyncio.Timeout) -> None:
        self._deadlines.add(deadline)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._watch(), name="redis-read-watch")

    def _discard(self, deadline: asyncio.Timeout) -> None:
        self._deadlines.discard(deadline)

    async def _watch(self) -> None:
        while self._deadlines:
            await asyncio.sleep(self._interval_s)
            if not self._deadlines:
                return
            try:
                await self._ping()
            except StoreUnavailable as exc:
                self._expire_all(exc)
            except Exception as exc:  # a probe that cannot tell: the reads go on
                logger.warning("error=<%r> | the Redis read probe failed", exc)

    def _expire_all(self, exc: StoreUnavailable) -> None:
        deadlines, self._deadlines = self._deadlines, set()
        if deadlines:
            logger.warning(
                "reads=<%d>, error=<%s> | Redis does not answer; ending the reads that wait on it",
                len(deadlines),
                exc,
            )
        now = asyncio.get_running_loop().time()
        for deadline in deadlines:
            with contextlib.suppress(RuntimeError):  # it is expiring or over already
                deadline.reschedule(now)

    async def aclose(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None and not probe.done():
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe


class _Watched:
    """A class rather than a generator context manager: a lone stream's reader enters one per
    read (per chunk of a streamed answer)."""

    __slots__ = ("_deadline", "_watch")

    def __init__(self, watch: ReadWatch, deadline: asyncio.Timeout) -> None:
        self._watch = watch
        self._deadline = deadline

    def __enter__(self) -> None:
        self._watch._add(self._deadline)

    def __exit__(self, *_: object) -> None:
        self._watch._discard(self._deadline)


_UNWATCHED = contextlib.nullcontext()


def watched(
    watch: ReadWatch | None, deadline: asyncio.Timeout
) -> _Watched | contextlib.nullcontext[None]:
    """`watch.watching(deadline)`, or nothing without a watch."""
    return _UNWATCHED if watch is None else watch.watching(deadline)


async def ping_within(client: RedisClient, timeout_s: float) -> None:
    """PING `client`: StoreUnavailable unless answered within `timeout_s` (refused, dropped
    and timed-out connections alike)."""
    try:
        async with asyncio.timeout(timeout_s):
            with redis_available():
                await client.ping()
    except TimeoutError as exc:
        raise StoreUnavailable(f"Redis did not answer a ping within {timeout_s:g}s") from exc
