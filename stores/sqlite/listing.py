"""ListTasks on SQLite: one page read by index range, newest status first, keyset page tokens.

The query's filters pick its index (stores.sqlite.schema), forced with INDEXED BY so that no
plan can fall back to a scan of the tasks:

    no filter, or status_after only    tasks_by_owner   (owner, status_ms, task_id, ...)
    state                              tasks_by_state   (owner, state, status_ms, task_id, ...)
    context (and maybe state)          tasks_by_context (owner, context_id, status_ms, task_id,
                                                         state, ...)

A page is the index range after the cursor, in (status ms, task id) descending order (the order
the other stores page in), `page_size + 1` entries deep (the one more says whether a next page
exists): O(log N + page), the snapshots of the page only. `status_after` is a range on the
millisecond and a check of the exact microsecond; the expiry is checked in the index too. The
count (`total_size`) is a count over the same index range: it reads no table row, but it is
linear in the number of the owner's matching tasks, where Redis's ZCOUNT is logarithmic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from stores.base import TaskPage, TaskQuery
from stores.codec import load_task
from stores.models import Task
from stores.paging import decode_cursor, encode_cursor
from stores.sqlite.database import Step

logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PageQuery:
    """The two statements of a page (its count, its rows) and their arguments."""

    count_sql: str
    count_args: list[object]
    page_sql: str
    page_args: list[object]


def page_query(query: TaskQuery, owner: str, now_ms: int) -> PageQuery:
    """The SQL that reads `query`'s page (InvalidPageToken for a token not ours)."""
    conditions, args = ["owner = ?"], [owner]
    index = "tasks_by_owner"
    if query.context_id is not None:
        conditions.append("context_id = ?")
        args.append(query.context_id)
        index = "tasks_by_context"
    if query.state is not None:
        conditions.append("state = ?")
        args.append(query.state.value)
        if query.context_id is None:
            index = "tasks_by_state"
    bounds: list[object] = [*args, now_ms]
    conditions.append("expires_at > ?")
    if query.status_after is not None:
        after_us = (query.status_after - _EPOCH) // timedelta(microseconds=1)
        conditions.append("status_ms >= ? AND status_us >= ?")
        bounds += [after_us // 1000, after_us]
    where = " AND ".join(conditions)
    count_sql = f"SELECT count(*) FROM tasks INDEXED BY {index} WHERE {where}"
    page_args = [*bounds]
    if query.page_token:
        ms, task_id = decode_cursor(query.page_token)
        where += " AND (status_ms, task_id) < (?, ?)"
        page_args += [ms, task_id]
    page_sql = (
        f"SELECT status_ms, task_id, snapshot, snapshot_position FROM tasks INDEXED BY {index}"
        f" WHERE {where}"
        " ORDER BY status_ms DESC, task_id DESC LIMIT ?"
    )
    # One row more than the page: whether there is a next one.
    return PageQuery(count_sql, bounds, page_sql, [*page_args, max(query.page_size, 0) + 1])


def list_page(step: Step, query: TaskQuery, owner: str) -> TaskPage:
    """The page `query` asks for (run in one read transaction: page and count agree)."""
    sql = page_query(query, owner, step.now_ms)
    (total,) = step.connection.execute(sql.count_sql, sql.count_args).fetchone()
    rows = step.connection.execute(sql.page_sql, sql.page_args).fetchall()
    size = max(query.page_size, 0)
    page, more = rows[:size], len(rows) > size
    token = encode_cursor(int(page[-1][0]), str(page[-1][1])) if more and page else ""
    tasks: list[Task] = []
    positions: list[int] = []
    for _, task_id, snapshot, position in page:
        try:
            tasks.append(load_task(bytes(snapshot)))
        except (ValueError, RecursionError):  # one unreadable task must not fail the list
            logger.warning("task_id=<%s> | left out of a task list: cannot be read", task_id)
            continue
        positions.append(int(position))
    return TaskPage(tasks=tasks, next_page_token=token, total_size=int(total), positions=positions)
