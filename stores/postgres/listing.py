"""ListTasks on PostgreSQL in O(page): one index range read backwards from a keyset cursor.

A page is `ORDER BY status_ms DESC, task_id DESC LIMIT page_size + 1` under the owner's index
that fits the query (tasks_by_time, tasks_by_state, tasks_by_context: each (owner[, state |
context], status_ms, task_id)); the page token is the last task's (status_ms, task_id), and the
next page starts below it by a row comparison the index answers. So a page costs the same at any
number of tasks. This is the order the other backends list in: status time to the millisecond,
then the task id's bytes; `status_after` is checked to the microsecond (`status_us`).

`total_size` is counted exactly up to COUNT_MAX matching tasks (an index range read, bounded);
beyond, it is the planner's estimate for the query (at least COUNT_MAX + 1): counting a million
tasks for every page would make a list O(N) again.
"""

from __future__ import annotations

import builtins
import json
import logging
from datetime import UTC, datetime
from typing import Any

import asyncpg

from stores.base import InvalidPageToken, TaskPage, TaskQuery
from stores.codec import load_task
from stores.models import Task
from stores.paging import decode_cursor, encode_cursor

logger = logging.getLogger(__name__)

COUNT_MAX = 10_000

_BIGINT_MIN, _BIGINT_MAX = -(2**63), 2**63 - 1

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def status_us(moment: datetime) -> int:
    """Microseconds since the epoch (exact: no float on the way)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def status_ms(moment: datetime) -> int:
    """Milliseconds since the epoch, as the other backends sort by (`int(timestamp() * 1000)`)."""
    return int(moment.timestamp() * 1000)


async def list_tasks(connection: asyncpg.Connection, query: TaskQuery, *, owner: str) -> TaskPage:
    statement, args = page_statement(query, owner=owner)
    rows = await connection.fetch(statement, *args)
    where, matching = _matching(query, owner)
    total = await _total(connection, where, matching)
    page = rows[: query.page_size]
    more = len(rows) > query.page_size
    token = encode_cursor(page[-1]["status_ms"], page[-1]["task_id"]) if more and page else ""
    tasks: builtins.list[Task] = []
    positions: builtins.list[int] = []
    for row in page:
        try:
            tasks.append(load_task(row["snapshot"]))
            positions.append(int(row["snapshot_position"]))
        except (ValueError, RecursionError, TypeError) as exc:
            # One task that cannot be loaded must not fail every client's list: it is left out.
            logger.warning(
                "task_id=<%s> | left out of a task list: its snapshot cannot be loaded (%s)",
                row["task_id"],
                type(exc).__name__,
            )
    return TaskPage(tasks=tasks, next_page_token=token, total_size=total, positions=positions)


def page_statement(query: TaskQuery, *, owner: str) -> tuple[str, builtins.list[Any]]:
    """The statement that reads a page (one more row than the page: is there a next one?)."""
    cursor = decode_cursor(query.page_token) if query.page_token else None
    where, args = _matching(query, owner)
    if cursor is not None:
        if not _BIGINT_MIN <= cursor[0] <= _BIGINT_MAX:
            raise InvalidPageToken(f"invalid page token {query.page_token!r}")
        args += [cursor[0], cursor[1]]
        where += f" AND (status_ms, task_id) < (${len(args) - 1}, ${len(args)})"
    args.append(query.page_size + 1)
    statement = (
        f"SELECT task_id, status_ms, snapshot, snapshot_position FROM tasks WHERE {where}"
        f" ORDER BY status_ms DESC, task_id DESC LIMIT ${len(args)}"
    )
    return statement, args


def _matching(query: TaskQuery, owner: str) -> tuple[str, builtins.list[Any]]:
    """The query's conditions (an expired task is not listed, swept or not) and their values."""
    conditions = ["owner = $1", "expires_at > now()"]
    args: builtins.list[Any] = [owner]
    if query.context_id is not None:
        args.append(query.context_id)
        conditions.append(f"context_id = ${len(args)}")
    if query.state is not None:
        args.append(query.state.value)
        conditions.append(f"state = ${len(args)}")
    if query.status_after is not None:
        # The millisecond bounds the index range; the microsecond decides within it.
        args += [status_ms(query.status_after), status_us(query.status_after)]
        conditions.append(f"status_ms >= ${len(args) - 1} AND status_us >= ${len(args)}")
    return " AND ".join(conditions), args


async def _total(connection: asyncpg.Connection, where: str, args: builtins.list[Any]) -> int:
    counted = int(
        await connection.fetchval(
            f"SELECT count(*) FROM (SELECT 1 FROM tasks WHERE {where} LIMIT {COUNT_MAX + 1}) m",
            *args,
        )
    )
    if counted <= COUNT_MAX:
        return counted
    plan = await connection.fetchval(
        f"EXPLAIN (FORMAT JSON) SELECT 1 FROM tasks WHERE {where}", *args
    )
    estimate = int(json.loads(plan)[0]["Plan"]["Plan Rows"])
    return max(estimate, counted)
