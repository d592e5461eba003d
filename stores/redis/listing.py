"""Task lists on Redis in O(page): sorted-set indexes read by score range, checked against tasks.

Every task is in two pairs of indexes (stores.redis.keys), its owner's and its context's, all in
the owner's slot:

    by time    score = status time (ms)                              no state filter
    by state   score = STATE_CODES[state] * 2^42 + status time (ms)   a state filter: one range

A page is one ZRANGE BYSCORE REV LIMIT on its query's index and range: O(log N + page). Redis
orders equal scores by member bytes, the order of (ms, task id) descending that the in-memory
store sorts by; the cursor, (ms, task id), resumes by rank (ZREVRANK of its task while that is at
its score; else past the members of its millisecond that sort at or above it). `status_after` is
the range's lowest score, its own millisecond checked to the microsecond (the task's `us`);
`total_size` is ZCOUNT of the range. One index by state, not one per state: a state change is a
ZADD of a new score in the same key, with no need to know the old state (on a cluster the index
step follows the task script and cannot read the task), and no entry can be left behind under an
old state in another key.

Entries are checked against the tasks' hashes (state, ms, us), fetched with the snapshots in one
pipeline. An entry whose task is gone (expired) or whose score the hash disagrees with (the index
step after a task write lost to a cut connection on a cluster; a publish by a replica from before
the by-state index, during a rolling deploy) is left out and repaired (REPAIR_LISTING: moved to its
task's scores, or removed), and the list reads on until its page is full. A repair applies only to
an entry still at the score read, so it never undoes a concurrent publish. A task that moved
between the index read and the hash read is listed at the entry's place this once (at its new
place from the next list on): left out, a list racing a task's state change would miss it.
`total_size` leaves out the entries of the range this list found not to match; each list also checks
the oldest entries of its range old enough to have expired (`_TAIL` of them), so that expired tasks
leave the count long before a page reaches them. Until some list meets it, an expired task is still
counted.

A by-state index with fewer entries than its pair (tasks created before it existed, or by a replica
from before it during a rolling deploy) is rebuilt from the by-time index, O(N) once, by the state
filtered list that finds it so. A cluster's index step adds the by-state entry first, so that a list
between the two never finds it short.
"""

from __future__ import annotations

import builtins
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from stores.base import TaskPage, TaskQuery
from stores.codec import load_task
from stores.models import Task, TaskState
from stores.paging import decode_cursor, encode_cursor
from stores.redis.keys import RedisKeys
from stores.redis.scripts import LIST_PAGE, REPAIR_LISTING
from stores.redis.support import (
    AnyPipeline,
    RedisClient,
    redis_available,
    run_pipeline,
    text,
    timestamp_ms,
    timestamp_us,
)

logger = logging.getLogger(__name__)

_S = TaskState
STATE_CODES: Final[dict[str, int]] = {
    state.value: code
    for code, state in enumerate((_S.UNSPECIFIED, _S.SUBMITTED, _S.WORKING, _S.COMPLETED,
                                  _S.FAILED, _S.CANCELED, _S.INPUT_REQUIRED, _S.REJECTED,
                                  _S.AUTH_REQUIRED))
}  # fmt: skip
"""Stored in every by-state score: a state keeps its code forever (a new one takes a new code)."""
_OTHER_STATE = 15  # a state this version does not know (written by a newer one)
_MS_SPAN = 1 << 42  # ms until the year 2109; 16 states * 2^42 < 2^53, exact in a double
_TAIL = 16


def state_score(state: str, ms: int) -> int:
    """The by-state score (a time outside 1970..2109 sorts at its end of the range)."""
    return STATE_CODES.get(state, _OTHER_STATE) * _MS_SPAN + min(max(ms, 0), _MS_SPAN - 1)


@dataclass(frozen=True, slots=True)
class _Fields:
    state: str  # a task's listing fields, from its hash
    ms: int
    us: int


@dataclass(frozen=True, slots=True)
class _Range:
    """The index a query reads and its score range, with what an entry must match."""

    key: str
    by_state: bool
    hi: float
    lo: float
    state: str | None
    after_us: int | None

    def score(self, fields: _Fields) -> int:
        return state_score(fields.state, fields.ms) if self.by_state else fields.ms

    def matches(self, fields: _Fields) -> bool:
        return (self.state is None or fields.state == self.state) and (
            self.after_us is None or fields.us >= self.after_us
        )


@dataclass(slots=True)
class _Scan:
    """What a list saw: the page's tasks (ms, id, snapshot) and their ids, the entries of its
    range that do not match, and those to repair (id -> score read, fields or None if gone)."""

    matching: builtins.list[tuple[int, str, Any]]
    seen: set[str]
    unmatched: set[str]
    repairs: dict[str, tuple[int, _Fields | None]]


class TaskLists:
    """The list indexes of a RedisTaskStore: how a task is indexed, and how a page is read."""

    def __init__(self, client: RedisClient, keys: RedisKeys, *, ttl_ms: int, index_ttl_ms: int):
        self._redis = client
        self._keys = keys
        self._ttl_ms = ttl_ms
        self._index_ttl_ms = index_ttl_ms

    def index_keys(self, owner: str, context_id: str) -> builtins.list[str]:
        """The owner's pair, then the context's: (by time, by state) each."""
        keys = self._keys
        return [
            keys.owner_tasks(owner),
            keys.owner_tasks_by_state(owner),
            keys.context_tasks(owner, context_id),
            keys.context_tasks_by_state(owner, context_id),
        ]

    @staticmethod
    def scores(task: Task) -> tuple[int, int]:
        """The task's by-time and by-state scores."""
        ms = timestamp_ms(task.status.timestamp)
        return ms, state_score(task.status.state.value, ms)

    def queue_index(self, pipe: AnyPipeline, task: Task, owner: str, *, add: bool) -> None:
        """Index the task (create), or move it (publish: XX, so a publish that finds no task,
        e.g. another owner's, leaves no entry behind). By state first: see the docstring."""
        by_time, by_state = self.scores(task)
        keys = self.index_keys(owner, task.context_id)
        for key, score in ((keys[1], by_state), (keys[0], by_time), (keys[3], by_state),
                           (keys[2], by_time)):  # fmt: skip
            pipe.zadd(key, {task.id: score}, xx=not add)
            pipe.pexpire(key, self._index_ttl_ms)

    async def list(self, query: TaskQuery, *, owner: str) -> TaskPage:
        cursor = decode_cursor(query.page_token) if query.page_token else None
        pair = self._pair(owner, query.context_id)
        span = self._range(pair, query)
        need = query.page_size + 1  # one more than the page: is there a next page?
        with redis_available():
            first = await self._first(pair, span, cursor, need)
            if span.by_state and first.short:
                await self._rebuild(pair, owner)
                first = await self._first(pair, span, cursor, need)
            scan = _Scan(matching=[], seen=set(), unmatched=set(), repairs={})
            batch = first.batch
            await self._check(owner, span, scan, batch.entries, first.extras)
            while len(scan.matching) < need and not batch.exhausted:
                # Entries were left out: read on, past the last one read.
                count = need - len(scan.matching) + len(scan.repairs)
                batch = await self._after(span, batch.entries[-1], count)
                await self._check(owner, span, scan, batch.entries, [])
            if scan.repairs:
                owner_pair = self._pair(owner, None) if query.context_id is not None else ()
                await self._repair((*pair, *owner_pair), span, scan.repairs)
        total = max(0, first.total - len(scan.unmatched))
        return _render(scan, query.page_size, total)

    def _pair(self, owner: str, context_id: str | None) -> tuple[str, str]:
        if context_id is None:
            return self._keys.owner_tasks(owner), self._keys.owner_tasks_by_state(owner)
        return (
            self._keys.context_tasks(owner, context_id),
            self._keys.context_tasks_by_state(owner, context_id),
        )

    @staticmethod
    def _range(pair: tuple[str, str], query: TaskQuery) -> _Range:
        after_ms = timestamp_ms(query.status_after) if query.status_after is not None else None
        after_us = timestamp_us(query.status_after) if query.status_after is not None else None
        if query.state is None:
            lo = float("-inf") if after_ms is None else after_ms
            return _Range(pair[0], False, float("inf"), lo, None, after_us)
        state = query.state.value
        base = state_score(state, 0)
        lo = base if after_ms is None else state_score(state, after_ms)
        return _Range(pair[1], True, base + _MS_SPAN - 1, lo, state, after_us)

    async def _first(
        self, pair: tuple[str, str], span: _Range, cursor: tuple[int, str] | None, count: int
    ) -> _First:
        """The first batch of a page, with the range's count and the entries that may not match
        without a page reaching them: its oldest, and those of `status_after`'s millisecond."""
        start: tuple[int, bytes] | None = None
        if cursor is not None:
            moment, task_id = cursor
            score = state_score(span.state, moment) if span.state is not None else moment
            if score <= span.hi:  # one above the range starts at its top, as a sort would
                start = (score, task_id.encode())
        cutoff = int(time.time() * 1000) - self._ttl_ms  # no task of a later status has expired
        tail_hi = state_score(span.state, cutoff) if span.state is not None else cutoff
        args = [
            *_cursor_args(span, start, count),
            _bound(tail_hi) if tail_hi >= span.lo else "",
            _TAIL,
            "1" if span.after_us is not None else "",
        ]
        keys = [span.key, pair[0]] if span.by_state else [span.key]
        reply = await LIST_PAGE(self._redis, keys, args)
        tail = _pairs(reply[3])
        lowest = [(int(span.lo), text(member)) for member in reply[4]] if reply[4] else []
        batch = await self._batch(span, start, count, reply[1], reply[2])
        return _First(
            total=int(reply[0]),
            batch=batch,
            extras=[*tail, *lowest],
            short=int(reply[5]) < int(reply[6]),
        )

    async def _after(self, span: _Range, last: tuple[int, str], count: int) -> _Batch:
        start = (last[0], last[1].encode())
        args = [*_cursor_args(span, start, count), "", 0, ""]
        reply = await LIST_PAGE(self._redis, [span.key], args)
        return await self._batch(span, start, count, reply[1], reply[2])

    async def _batch(
        self,
        span: _Range,
        start: tuple[int, bytes] | None,
        count: int,
        entries: Any,
        bucket: Any,
    ) -> _Batch:
        """LIST_PAGE's entries; when the cursor's task has left its score, those past the
        members of that score that sort at or above it."""
        if entries is None:
            assert start is not None
            skip = sum(1 for member in bucket if text(member).encode() >= start[1])
            entries = await self._redis.execute_command(
                "ZRANGE", span.key, start[0], _bound(span.lo), "BYSCORE", "REV",
                "LIMIT", skip, count, "WITHSCORES",
            )  # fmt: skip
        found = _pairs(entries)
        within = [entry for entry in found if entry[0] >= span.lo]
        return _Batch(entries=within, exhausted=len(found) < count or len(within) < len(found))

    async def _check(
        self,
        owner: str,
        span: _Range,
        scan: _Scan,
        entries: Sequence[tuple[int, str]],
        extras: Sequence[tuple[int, str]],
    ) -> None:
        """Check the entries read (and `extras`, entries of the range that may not match)
        against their tasks, in one pipeline that also fetches the page's snapshots."""
        if not entries and not extras:
            return

        def fetch(pipe: AnyPipeline) -> None:
            for _, task_id in entries:
                pipe.hmget(self._keys.task(owner, task_id), ["state", "ms", "us", "task", "pos"])
            for _, task_id in extras:
                pipe.hmget(self._keys.task(owner, task_id), ["state", "ms", "us"])

        replies = await run_pipeline(self._redis, fetch)
        for index, ((score, task_id), reply) in enumerate(
            zip([*entries, *extras], replies, strict=True)
        ):
            on_page = index < len(entries)
            state, ms, us = reply[:3]
            if state is None:  # expired: drop it from the indexes
                scan.unmatched.add(task_id)
                scan.repairs[task_id] = (score, None)
                continue
            try:
                fields = _Fields(text(state), int(ms), int(us))
            except (TypeError, ValueError):
                scan.unmatched.add(task_id)
                if on_page:
                    _left_out(task_id, "its listing fields cannot be read")
                continue
            if not span.matches(fields):
                scan.unmatched.add(task_id)
            if span.score(fields) != score:
                scan.repairs[task_id] = (score, fields)
            # A task that moved since its entry was read (a publish between the two round trips)
            # is listed this once at the entry's place: left out, it would be on no page of this
            # list (its new place is above the one read). The cursor keeps the entry's time.
            if on_page and task_id not in scan.unmatched and task_id not in scan.seen:
                scan.seen.add(task_id)
                scan.matching.append((score % _MS_SPAN, task_id, (reply[3], reply[4])))

    async def _repair(
        self, keys: Sequence[str], span: _Range, repairs: dict[str, tuple[int, _Fields | None]]
    ) -> None:
        args: builtins.list[Any] = [self._index_ttl_ms, 2 if span.by_state else 1]
        for task_id, (score, fields) in repairs.items():
            if fields is None:
                args += [task_id, score, "", ""]
            else:
                args += [task_id, score, fields.ms, state_score(fields.state, fields.ms)]
        await REPAIR_LISTING(self._redis, keys, args)

    async def _rebuild(self, pair: tuple[str, str], owner: str) -> None:
        """Add to the by-state index the tasks of the by-time index it lacks (O(N), once)."""
        by_time, by_state = pair
        members = [text(m) for m in await self._redis.execute_command("ZRANGE", by_time, 0, -1)]
        indexed = {text(m) for m in await self._redis.execute_command("ZRANGE", by_state, 0, -1)}
        missing = [task_id for task_id in members if task_id not in indexed]
        if not missing:
            return

        def fetch(pipe: AnyPipeline) -> None:
            for task_id in missing:
                pipe.hmget(self._keys.task(owner, task_id), ["state", "ms"])

        scores: dict[str, float] = {}
        gone: list[str] = []
        for task_id, (state, ms) in zip(
            missing, await run_pipeline(self._redis, fetch), strict=True
        ):
            if state is None:
                gone.append(task_id)
                continue
            try:
                scores[task_id] = state_score(text(state), int(ms))
            except (TypeError, ValueError):  # unreadable: no state's range (lists leave it out)
                scores[task_id] = state_score("", 0)

        def write(pipe: AnyPipeline) -> None:
            if scores:
                pipe.zadd(by_state, scores)
                pipe.pexpire(by_state, self._index_ttl_ms)
            if gone:
                pipe.zrem(by_time, *gone)

        await run_pipeline(self._redis, write)
        logger.info("a task list index by state was rebuilt: %d tasks added", len(scores))


@dataclass(frozen=True, slots=True)
class _Batch:
    entries: builtins.list[tuple[int, str]]
    exhausted: bool  # the range has no more entries past these (score, task id), in list order


@dataclass(frozen=True, slots=True)
class _First:
    total: int
    batch: _Batch
    extras: builtins.list[tuple[int, str]]
    short: bool  # the by-state index has fewer entries than its pair: rebuild it


def _cursor_args(span: _Range, start: tuple[int, bytes] | None, count: int) -> list[Any]:
    at, task_id = (str(start[0]), start[1]) if start is not None else ("", b"")
    return [_bound(span.hi), _bound(span.lo), count, at, task_id]


def _bound(score: float) -> str:
    return {float("inf"): "+inf", float("-inf"): "-inf"}.get(score) or str(int(score))


def _pairs(reply: Any) -> builtins.list[tuple[int, str]]:
    """ZRANGE ... WITHSCORES, flat (a script's) or paired (redis-py's), as (score, task id)."""
    if not reply:
        return []
    if isinstance(reply[0], (list, tuple)):
        return [(int(float(score)), text(member)) for member, score in reply]
    return [(int(float(reply[i + 1])), text(reply[i])) for i in range(0, len(reply), 2)]


def _render(scan: _Scan, page_size: int, total: int) -> TaskPage:
    page, more = scan.matching[:page_size], len(scan.matching) > page_size
    token = encode_cursor(page[-1][0], page[-1][1]) if more and page else ""
    tasks: builtins.list[Task] = []
    positions: builtins.list[int] = []  # each task's generation
    for _, task_id, (raw, position) in page:
        try:
            tasks.append(load_task(raw))
            positions.append(int(position or 1))
        except (ValueError, RecursionError, TypeError) as exc:  # left out: the list goes on
            _left_out(task_id, f"its snapshot cannot be loaded ({type(exc).__name__})")
    return TaskPage(tasks=tasks, next_page_token=token, total_size=total, positions=positions)


def _left_out(task_id: str, why: str) -> None:
    logger.warning("task_id=<%s> | left out of a task list: %s", task_id, why)
