"""RedisTaskStore: task snapshots in a hash, each task's journal in a Redis Stream, list indexes.

    publish(event [, snapshot]) --EVALSHA (one slot: {task})--> HINCRBY seq, XADD "<seq>-1",
            |                                                   [HSET snapshot + pos], PEXPIRE
            | with a snapshot, same round trip (slot {owner}):  ZADD + PEXPIRE the 4 list indexes
            v
    p:journal:<owner>:{<task>} --XREAD BLOCK from "<after>-1"--> readers on any replica

Consistency between the task (slot `{task}`) and the owner's list indexes (slot `{owner}`): they
cannot change in one atomic step on a cluster, so the task part is one Lua script and the index
update is a second step, queued after it in the same pipeline (so on one Redis both run in that
order in one round trip). The task is written first: an index entry therefore never names a task
that is still being created, which makes it safe for `list` to drop entries whose task is gone
(expired). Both steps are answered in one reply, so a caller told that `create` succeeded knows
the task is indexed; if the connection is cut in between, the caller gets StoreUnavailable (the
task may then exist unlisted, as an abandoned create). A publish only moves an existing entry
(ZADD XX), so a misdirected publish (no such task) leaves no entry anywhere. `list`
(stores.redis.listing) reads a page by index score and checks each entry against the state and
time kept beside the snapshot in the hash: an entry with a stale score is left out and repaired,
never listed wrongly.

Blocking reads go to `read_client`, a client of its own with no socket timeout shorter than the
longest block, so that waiting readers never take the connections that publishes need. On one Redis
a reader alone reads for itself, and readers of several journals share multi-key XREADs of up to 128
journals each (`JournalMux`): a connection per 128 tasks waited on, however many streams. On a
cluster a read holds a connection per journal and position, shared by every reader waiting there
(`SharedReads`), so the pool is sized for the number of concurrent readers (see
`create_redis_stores`).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import uuid
from collections.abc import Awaitable, Sequence
from functools import partial
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from stores.base import (
    DEFAULT_TASK_TTL_S,
    ChunkSink,
    Fence,
    JournalWrite,
    LeaseLost,
    PositionConflict,
    StateConflict,
    StoreUnavailable,
    TaskGone,
    TaskPage,
    TaskQuery,
    TaskStore,
    TaskUnreadable,
    TaskVoided,
    WriteRetry,
)
from stores.chunks import WritingBehind
from stores.codec import dump_event, dump_task, load_task, snapshot_event
from stores.models import JournalEntry, Task, TaskRecord, TaskState
from stores.redis.batch import CommandBatcher
from stores.redis.journal_mux import JournalMux
from stores.redis.listing import TaskLists
from stores.redis.read_watch import ReadWatch, watched
from stores.redis.scripts import CREATE_TOUCHING_TASK, PUBLISH_TOUCHING_EVENTS, VOID_TASK
from stores.redis.shared_reads import SharedReads
from stores.redis.store import RedisStore
from stores.redis.support import (
    AnyPipeline,
    LuaScript,
    RedisClient,
    journal_entries,
    redis_available,
    text,
    timestamp_ms,
    timestamp_us,
    xread_streams,
)

_NO_SNAPSHOT = ("", "", "", "", "")
_NO_INDEXES = ("", "", "")

logger = logging.getLogger(__name__)

_READ_TIMEOUT_MARGIN_S = 5.0
# A reader that joined a read started by another one with a longer block stops waiting this long
# after its own time is up (a silent connection is then found by the store check that follows).
_JOIN_GRACE_S = 1.0


class RedisTaskStore(RedisStore, TaskStore):
    """Tasks and journals in Redis; every key expires between 15/16 of `ttl_s` and `ttl_s` after
    the task's last event (an expiry is set again only once it has run down by a sixteenth:
    `LUA_TOUCH`).

    The list indexes expire after twice that: chunks refresh the task's TTL but not the indexes
    (a chunk is one script call, nothing more), so an index outlives every task it names.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        prefix: str = "a2a",
        ttl_s: int = DEFAULT_TASK_TTL_S,
        journal_max: int = 10_000,
        read_client: RedisClient | None = None,
        batcher: CommandBatcher | None = None,
        read_watch: ReadWatch | None = None,
    ) -> None:
        """`read_watch`: ends the blocking reads waiting on a Redis that stopped answering."""
        super().__init__(client, prefix=prefix, ttl_s=ttl_s, batcher=batcher)
        self._read_redis = read_client or client
        self._read_watch = read_watch
        self._index_ttl_ms = 2 * self._ttl_ms
        self._lists = TaskLists(
            client, self._keys, ttl_ms=self._ttl_ms, index_ttl_ms=self._index_ttl_ms
        )
        self._journal_max = journal_max
        # One Redis: one blocking read for every journal waited on (JournalMux). A cluster: one
        # per journal and position, shared by its readers (SharedReads).
        self._mux = (
            JournalMux(
                self._read_redis,
                client,
                wake_key=partial(self._keys.wake, uuid.uuid4().hex),
                read_watch=read_watch,
            )
            if isinstance(self._read_redis, Redis) and isinstance(client, Redis)
            else None
        )
        self._waits: SharedReads[builtins.list[JournalEntry]] = SharedReads()

    async def create(self, task: Task, *, owner: str, fence: Fence | None = None) -> TaskRecord:
        keys = [
            self._keys.task(owner, task.id),
            self._keys.journal(owner, task.id),
            self._keys.lease(owner, task.id),
        ]
        stored = dump_task(task)
        args = [
            stored,
            snapshot_event(stored),
            *self._listing_fields(task),
            self._ttl_ms,
            self._journal_max,
            task.id,
            self._index_ttl_ms,
            TaskLists.scores(task)[1],
            *((fence.holder, fence.epoch) if fence is not None else ("", "")),
        ]
        with redis_available():
            reply = await self._run_indexed(CREATE_TOUCHING_TASK, keys, args, task, owner, add=True)
        if int(reply[0]) < 1:
            # Refused: nothing written. (On a cluster the index entry queued after the script
            # names a task that does not exist: a list drops such an entry when it meets it.)
            assert fence is not None
            if int(reply[0]) < 0:
                raise TaskVoided(task.id, fence, by=text(reply[1]))
            raise LeaseLost(task.id, fence)
        return TaskRecord(task=task, owner=owner, position=1, stored=stored)

    async def void(self, task_id: str, *, owner: str, by: str) -> bool:
        keys = [self._keys.task(owner, task_id), self._keys.lease(owner, task_id)]
        with redis_available():
            return bool(await self._batcher.run_script(VOID_TASK, keys, [by, self._ttl_ms]))

    async def get(self, task_id: str, *, owner: str) -> TaskRecord | None:
        with redis_available():
            key = self._keys.task(owner, task_id)
            raw, position = await self._batcher.run_args("HMGET", key, "task", "pos")
        if raw is None or position is None:
            return None
        try:
            task = load_task(raw)
            stored = raw if isinstance(raw, bytes) else raw.encode()
            return TaskRecord(task=task, owner=owner, position=int(position), stored=stored)
        except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
            raise TaskUnreadable(task_id) from exc

    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        return await self._lists.list(query, owner=owner)

    async def publish(self, task_id: str, write: JournalWrite, *, owner: str) -> int:
        keys = self._publish_keys(owner, task_id)
        events = [*write.chunks, dump_event(write.event)]
        event_id, fence, snapshot = write.event_id, write.fence, write.snapshot
        if_position = write.if_position
        with redis_available():
            if snapshot is None:
                # The streaming hot path: one EVALSHA, in the next round trip out.
                args = self._publish_args(events, event_id, fence, _NO_SNAPSHOT, if_position)
                reply = await self._batcher.run_script(PUBLISH_TOUCHING_EVENTS, keys, args)
            else:
                stored = write.snapshot_stored
                fields = (
                    stored if stored is not None else dump_task(snapshot),
                    *self._listing_fields(snapshot),
                    write.if_state.value if write.if_state is not None else "",
                )
                indexes = (task_id, self._index_ttl_ms, TaskLists.scores(snapshot)[1])
                args = self._publish_args(events, event_id, fence, fields, if_position, indexes)
                reply = await self._run_indexed(
                    PUBLISH_TOUCHING_EVENTS, keys, args, snapshot, owner, add=False
                )
        return _published(
            reply, task_id, fence=fence, if_state=write.if_state, if_position=if_position
        )

    async def publish_chunks(
        self,
        task_id: str,
        events: Sequence[bytes],
        *,
        owner: str,
        event_id: str | None = None,
        fence: Fence | None = None,
    ) -> int:
        keys = self._publish_keys(owner, task_id)
        args = self._publish_args(events, event_id, fence, _NO_SNAPSHOT)
        with redis_available():
            reply = await self._batcher.run_script(PUBLISH_TOUCHING_EVENTS, keys, args)
        return _published(reply, task_id, fence=fence)

    def chunk_sink(
        self, task_id: str, *, owner: str, fence: Fence | None, retry: WriteRetry
    ) -> ChunkSink:
        """Chunks written behind the turn, in batches: each write waits for a round trip."""

        def write(batch: Sequence[bytes], event_id: str) -> Awaitable[int]:
            return self.publish_chunks(task_id, batch, owner=owner, event_id=event_id, fence=fence)

        return WritingBehind(write, retry=retry)

    def _publish_args(
        self,
        events: Sequence[bytes],
        event_id: str | None,
        fence: Fence | None,
        snapshot: Sequence[Any],
        if_position: int | None = None,
        indexes: Sequence[Any] = _NO_INDEXES,
    ) -> builtins.list[Any]:
        """`PUBLISH_TOUCHING_EVENTS`'s arguments: `snapshot` is its five snapshot fields, or
        `_NO_SNAPSHOT`; `if_position` the journal position the write expects ('' for none);
        `indexes` the task id, the indexes' ttl and the task's by-state score when they are among
        the keys."""
        holder, epoch = (fence.holder, fence.epoch) if fence is not None else ("", 0)
        expected = "" if if_position is None else if_position
        fenced = (self._ttl_ms, self._journal_max, event_id or "", holder, epoch, expected)
        return [*fenced, *snapshot, *indexes, *events]

    async def _run_indexed(
        self,
        script: LuaScript,
        keys: builtins.list[str],
        args: builtins.list[Any],
        task: Task,
        owner: str,
        *,
        add: bool,
    ) -> Any:
        """The script's reply, with the task indexed (`add`) or moved in the list indexes: by
        the script itself on one Redis (given the index keys: four commands fewer), in the same
        pipeline on a cluster (the indexes hash to other slots than the task)."""
        if self._single_node:
            indexed = [*keys, *self._lists.index_keys(owner, task.context_id)]
            return await self._batcher.run_script(script, indexed, args)

        def build(pipe: AnyPipeline) -> None:
            script.queue(pipe, keys, args)
            self._lists.queue_index(pipe, task, owner, add=add)

        return (await self._batcher.run_pipeline(build, scripts=[script]))[0]

    def _publish_keys(self, owner: str, task_id: str) -> builtins.list[str]:
        return [
            self._keys.task(owner, task_id),
            self._keys.journal(owner, task_id),
            self._keys.lease(owner, task_id),
        ]

    async def read(
        self, task_id: str, *, owner: str, after: int, timeout_s: float
    ) -> builtins.list[JournalEntry]:  # `list` is the method above, in this class body
        journal = self._keys.journal(owner, task_id)
        start = f"{max(after, 0)}-1"  # entry ids are "<position>-1": XREAD returns ids > start
        with redis_available():
            if timeout_s <= 0:
                return _entries(await self._redis.xread({journal: start}))
            key = (journal, start)
            mux = self._mux
            if mux is not None and (mux.waiting or len(self._waits)) and key not in self._waits:
                return await mux.read(journal, max(after, 0), timeout_s)
            # A reader alone reads for itself: one round trip, no hand-over from a shared read
            # (a third more events/s for a single stream); readers of its journal at its position
            # join that read. On a cluster every journal and position has a read of its own.
            return await self._waits.read(
                key,
                lambda: self._blocking_read(journal, start, timeout_s),
                timeout_s=timeout_s + _JOIN_GRACE_S,
                nothing=[],
            )

    async def aclose(self) -> None:
        """Stop the journal reader (the clients are the caller's to close)."""
        if self._mux is not None:
            await self._mux.aclose()
        if self._read_watch is not None:
            await self._read_watch.aclose()

    async def _blocking_read(
        self, journal: str, start: str, timeout_s: float
    ) -> builtins.list[JournalEntry]:
        """It answers at once when entries are already there. (A task that does not exist just
        waits out the timeout; readers check the task between reads.)"""
        block_ms = max(1, int(timeout_s * 1000))
        with redis_available():
            try:
                async with asyncio.timeout(timeout_s + _READ_TIMEOUT_MARGIN_S) as deadline:
                    with watched(self._read_watch, deadline):
                        found = await self._read_redis.xread({journal: start}, block=block_ms)
            except TimeoutError as exc:  # silent past its block, or Redis stopped answering pings
                raise StoreUnavailable("Redis did not answer a blocking read") from exc
            except ResponseError as exc:
                if not str(exc).startswith("UNBLOCKED"):
                    raise
                # The shard's master became a replica (a failover): nothing was read; the next
                # read is redirected (MOVED) to the new master, from the same position.
                return []
        return _entries(found)

    def _listing_fields(self, task: Task) -> builtins.list[Any]:
        moment = task.status.timestamp
        return [task.status.state.value, timestamp_ms(moment), timestamp_us(moment)]


def _entries(reply: Any) -> list[JournalEntry]:
    """XREAD's reply for one journal as journal entries."""
    return [entry for _, raw in xread_streams(reply) for entry in journal_entries(raw)]


def _published(
    reply: Any,
    task_id: str,
    *,
    fence: Fence | None,
    if_state: TaskState | None = None,
    if_position: int | None = None,
) -> int:
    """A publish script's reply: the position, or what refused the write."""
    if isinstance(reply, list):  # {-3, last position}: not at the expected position
        assert if_position is not None
        raise PositionConflict(task_id, expected=if_position, current=int(reply[1]))
    position = int(reply)
    if position == 0:
        raise TaskGone(f"task {task_id!r} does not exist (or expired)")
    if position == -2:
        assert fence is not None
        raise LeaseLost(task_id, fence)
    if position < 0:
        raise StateConflict(f"task {task_id!r} is no longer in state {if_state}")
    return position
