"""JournalMux: the readers of a replica wait in shared multi-key blocking XREADs (one Redis only).

Each open stream waits on its task's journal. A blocking XREAD per journal made N streams on N
different tasks N Redis connections (10,000 streams: past Redis' `maxclients`), and every
streamed chunk a round trip of its own for each task's reader. Here one connection blocks in one
XREAD over up to `SHARD_JOURNALS` journals someone waits on (a shard; more journals take more
shards); what it finds goes to the readers of those journals (parsed once, however many readers),
and chunks published to 32 tasks at once come back in one reply. (A reader alone does not come
here: `RedisTaskStore.read` lets it read for itself, which saves a hand-over per entry.)

A reader whose journal is not in its shard's read in flight (or who waits from an earlier
position than it reads from) has that read ended early: an entry added to the shard's wake
stream, which every read of the shard also waits on, returns it, and the next read covers
everyone waiting. A burst of new readers costs one wake, not one each. Unlike CLIENT UNBLOCK, a
wake that reaches Redis before the read it is meant to end still ends it (the read starts from
the wake stream's last id seen). The wake only makes it prompt: a read answers a reader only if
it read that reader's journal from its position or an earlier one, so a reader that joined
behind the read in flight (whose reply, even one already on its way, starts after entries the
reader has not had) waits for the next read, which starts from it. A reader gets the positions
after its own, each once, from the read or from what was kept (below).

Three things keep a chunk from costing more than a reader of its own would:
* after a read answers readers, the next one waits (`RETURN_WAIT_S` at most) for them to pass
  their entries on and come back: read at once, it would return each new entry alone, a round
  trip and a hand-over per entry, where a reader reading for itself finds the entries that came
  while it was busy in one reply;
* a journal just read stays in the reads for a moment (`LINGER_S`) unless its task has ended, so a
  reader slower than that wait still finds its journal covered, with no wake;
* what the reads found is kept for as long (the journal's last `RECENT_MAX` entries): a reader
  coming back for entries the shared read already fetched gets them at once.

Only for a single Redis: on a cluster the journals live on different shards (and a multi-key
XREAD must stay in one slot); the cluster store keeps one read per journal (SharedReads).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from stores.base import StoreUnavailable
from stores.deadlines import CoarseDeadlines
from stores.models import JournalEntry
from stores.redis.read_watch import ReadWatch, watched
from stores.redis.support import journal_entries, redis_available, text, xread_streams

LINGER_S = 1.0  # a journal just read stays in the reads this long (unless its task ended)
RETURN_WAIT_S = 0.002  # at most this long for the readers just answered to come back
RECENT_MAX = 64  # entries of a lingering journal kept for its readers coming back
# Journals per shared read: a read ends whenever one of its journals has news and starts again
# with all of them, so its cost per event grows with their number (with 10,000 journals in one
# read, restarting it took most of the process' CPU). More journals take more reads.
SHARD_JOURNALS = 128
BLOCK_S = 15.0  # a read with nothing to find ends after this and starts again (pruned)
_SILENCE_MARGIN_S = 5.0  # past its block, a read that has not answered is a silent connection
_WAKE_TTL_MS = 60_000  # a replica that died leaves its wake stream behind this long at most


class _Reader:
    __slots__ = ("after", "found")

    def __init__(self, after: int, found: asyncio.Future[list[JournalEntry]]) -> None:
        self.after = after
        self.found = found


def _remember(recent: _Recent | None, entries: list[JournalEntry], until: float) -> _Recent:
    """The last entries read of a journal, `entries` (just read) added to what was kept."""
    if recent is None or entries[0].position > recent.entries[-1].position + 1:  # none, a gap
        return _Recent(entries[-RECENT_MAX:], until)
    last = recent.entries[-1].position
    newer = [entry for entry in entries if entry.position > last]
    return _Recent((recent.entries + newer)[-RECENT_MAX:], until)


def _ends(entry: JournalEntry) -> bool:
    return entry.state is not None and entry.state.is_terminal


class _Recent:
    """A journal's last entries read (consecutive positions) and until when it lingers."""

    __slots__ = ("entries", "until")

    def __init__(self, entries: list[JournalEntry], until: float) -> None:
        self.entries = entries
        self.until = until

    @property
    def ended(self) -> bool:
        """Its task has ended: nothing more will come (it is kept only for its readers)."""
        return _ends(self.entries[-1])

    def after(self, position: int) -> list[JournalEntry] | None:
        """The entries after `position`, if these are all of them up to the last one read."""
        first = self.entries[0].position
        if first - 1 <= position < self.entries[-1].position:
            return self.entries[position + 1 - first :]
        return None


class JournalMux:
    """Readers of up to SHARD_JOURNALS journals share a read (a shard); more take another one."""

    def __init__(
        self,
        read_client: Redis,
        command_client: Redis,
        *,
        wake_key: Callable[[int], str],
        read_watch: ReadWatch | None = None,
    ) -> None:
        self._read = read_client
        self._commands = command_client
        self._wake_key = wake_key
        self._read_watch = read_watch
        self._shards: list[_Shard] = []
        self._shard_of: dict[str, _Shard] = {}
        self._deadlines: CoarseDeadlines[list[JournalEntry]] = CoarseDeadlines(expired=[])
        self.waiting = 0  # readers in `read`

    async def read(self, journal: str, after: int, timeout_s: float) -> list[JournalEntry]:
        """The entries after `after` as soon as there are any; [] when `timeout_s` passes."""
        shard = self._shard_of.get(journal)
        if shard is None:
            shard = next((s for s in self._shards if s.journals < SHARD_JOURNALS), None)
            if shard is None:
                wake_key = self._wake_key(len(self._shards))
                shard = _Shard(
                    self._read,
                    self._commands,
                    wake_key=wake_key,
                    forget=self._forget,
                    deadlines=self._deadlines,
                    read_watch=self._read_watch,
                )
                self._shards.append(shard)
            self._shard_of[journal] = shard
            shard.journals += 1
        self.waiting += 1
        try:
            return await shard.read(journal, after, timeout_s)
        finally:
            self.waiting -= 1

    def _forget(self, journal: str) -> None:
        shard = self._shard_of.pop(journal, None)
        if shard is not None:
            shard.journals -= 1

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


class _Shard:
    def __init__(
        self,
        read_client: Redis,
        command_client: Redis,
        *,
        wake_key: str,
        forget: Callable[[str], None],
        deadlines: CoarseDeadlines[list[JournalEntry]],
        read_watch: ReadWatch | None,
    ) -> None:
        self._deadlines = deadlines
        self._read_watch = read_watch
        self.journals = 0  # in `_readers` or `_recent` (the mux routes them here)
        self._forget = forget
        self._read = read_client
        self._commands = command_client
        self._wake_key = wake_key
        self._wake_id = "0-0"
        self._woken = False  # a wake was sent for the read in flight
        self._wakes: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references
        # Journal -> its readers (a dict as an ordered set: leaving is O(1)).
        self._readers: dict[str, dict[_Reader, None]] = {}
        self._recent: dict[str, _Recent] = {}  # journals read a moment ago
        # The read in flight: journal -> the position it reads after (None: no read in flight).
        self._covered: dict[str, int] | None = None
        self._loop: asyncio.Task[None] | None = None
        # Readers answered by the last read that have not come back yet, and the signal that they
        # all have: the next read waits for them (see `_run`).
        self._answered = 0
        self._back = asyncio.Event()

    async def read(self, journal: str, after: int, timeout_s: float) -> list[JournalEntry]:
        if self._answered:  # one of the readers just answered is back
            self._answered -= 1
            if not self._answered:
                self._back.set()
        recent = self._recent.get(journal)
        if recent is not None and (found := recent.after(after)):
            return found
        reader = _Reader(after, asyncio.get_running_loop().create_future())
        self._readers.setdefault(journal, {})[reader] = None
        self._cover(journal, after)
        slot = self._deadlines.add(reader.found, timeout_s)  # [] then; no timer per reader
        try:
            return await reader.found
        finally:
            self._deadlines.discard(reader.found, slot)
            readers = self._readers.get(journal)
            if readers is not None:
                readers.pop(reader, None)
                if not readers:
                    del self._readers[journal]
                    if journal not in self._recent:
                        self._forget(journal)

    def _cover(self, journal: str, after: int) -> None:
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._run())
            return
        if self._covered is None:  # between reads: the next one includes this reader
            return
        covered = self._covered.get(journal)
        if (covered is None or after < covered) and not self._woken:
            self._woken = True
            wake = asyncio.create_task(self._wake())
            self._wakes.add(wake)
            wake.add_done_callback(self._wakes.discard)

    async def _wake(self) -> None:
        try:
            pipe = self._commands.pipeline(transaction=False)
            pipe.xadd(self._wake_key, {"w": 1}, maxlen=1, approximate=False)
            pipe.pexpire(self._wake_key, _WAKE_TTL_MS)
            await pipe.execute()
        except Exception:  # the read in flight still ends by itself (BLOCK_S), its error shows
            pass

    async def _run(self) -> None:
        try:
            while positions := self._next_positions():
                self._covered = positions
                # Entry ids are "<position>-1": XREAD returns the ids after "<position>-1".
                streams = {journal: f"{position}-1" for journal, position in positions.items()}
                streams[self._wake_key] = self._wake_id
                try:
                    reply = await self._xread(streams)
                except Exception as exc:  # every reader waiting gets it
                    self._fail(exc)
                    continue
                finally:
                    self._covered = None
                    self._woken = False
                self._answered = self._deliver(reply, positions)
                if self._answered:
                    await self._readers_back()
        except BaseException as exc:
            self._fail(StoreUnavailable(f"the journal reader stopped: {exc!r}"))
            raise

    def _next_positions(self) -> dict[str, int]:
        """What the next read reads after: every journal with readers still waiting, from the
        earliest of them, and those read a moment ago, from where that read ended. (Readers just
        answered have not left yet: they would make the read return the same entries again.)"""
        now = time.monotonic()
        positions: dict[str, int] = {}
        for journal, readers in self._readers.items():
            waiting = [reader.after for reader in readers if not reader.found.done()]
            if waiting:
                positions[journal] = min(waiting)
        for journal, recent in list(self._recent.items()):
            if recent.until < now:
                del self._recent[journal]
                if journal not in self._readers:
                    self._forget(journal)
            elif journal not in positions and not recent.ended:
                positions[journal] = recent.entries[-1].position
        return positions

    async def _xread(self, streams: dict[Any, Any]) -> Any:
        with redis_available():
            try:
                async with asyncio.timeout(BLOCK_S + _SILENCE_MARGIN_S) as deadline:
                    with watched(self._read_watch, deadline):
                        return await self._read.xread(streams, block=int(BLOCK_S * 1000))
            except TimeoutError as exc:  # silent past its block, or Redis stopped answering pings
                raise StoreUnavailable("Redis did not answer a blocking read") from exc

    async def _readers_back(self) -> None:
        """Give the readers just answered a moment to come back (see the module's docstring)."""
        self._back.clear()
        try:
            async with asyncio.timeout(RETURN_WAIT_S):
                await self._back.wait()
        except TimeoutError:  # some streams ended, or their clients are slow: read without them
            pass
        self._answered = 0

    def _deliver(self, reply: Any, positions: dict[str, int]) -> int:
        """Answer the readers of what `reply` (the read after `positions`) found; how many were
        answered.

        A reader gets only what the read found after its own position: one that joined while
        the read was in flight from a later position (it waits from earlier than the others)
        is not in this reply's entries, which would skip those in between; it stays waiting,
        and the next read, which starts at once from the earliest position waited on, covers it."""
        answered = 0
        now = time.monotonic()
        for key, raw in xread_streams(reply):
            journal = text(key)
            if journal == self._wake_key:
                self._wake_id = text(raw[-1][0])
                continue
            entries = journal_entries(raw)
            self._recent[journal] = _remember(self._recent.get(journal), entries, now + LINGER_S)
            read_after = positions[journal]
            # No copy: answering a reader only schedules it, nobody leaves during this loop.
            for reader in self._readers.get(journal, ()):
                if reader.found.done() or reader.after < read_after:
                    continue
                mine = entries
                if entries[0].position <= reader.after:
                    mine = [entry for entry in entries if entry.position > reader.after]
                if mine:
                    reader.found.set_result(mine)
                    if not _ends(mine[-1]):  # a stream that ended does not come back
                        answered += 1
        return answered

    def _fail(self, exc: BaseException) -> None:
        """Every reader waiting gets `exc`; what was read a moment ago is forgotten (a Redis that
        is down must not keep the loop reading for journals nobody waits on)."""
        for journal in self._recent.keys() - self._readers.keys():
            self._forget(journal)
        self._recent.clear()
        for readers in self._readers.values():
            for reader in readers:
                if not reader.found.done():
                    reader.found.set_exception(exc)

    async def aclose(self) -> None:
        jobs = [job for job in (self._loop, *self._wakes) if job is not None and not job.done()]
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
