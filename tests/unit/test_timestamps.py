"""Timestamps are made to the millisecond (`utc_now`), the precision they have on the wire and in
every store: a status read back from its stored form equals the one written."""

from __future__ import annotations

import time
from datetime import UTC

from stores.codec import dump_task, load_task
from stores.models import Task, TaskState, TaskStatus, iso_timestamp, utc_now


def test_now_is_utc_whole_milliseconds_between_the_clock_readings_around_it() -> None:
    for _ in range(2_000):  # different sub-millisecond phases of the clock
        before_ms = time.time_ns() // 1_000_000
        now = utc_now()
        after_ms = time.time_ns() // 1_000_000
        assert now.tzinfo is UTC
        assert now.microsecond % 1000 == 0, now
        assert before_ms <= round(now.timestamp() * 1000) <= after_ms


def test_a_status_time_reads_back_equal_from_the_stored_form() -> None:
    task = Task(id="t1", context_id="c1", status=TaskStatus(state=TaskState.WORKING))
    stamp = task.status.timestamp
    assert iso_timestamp(stamp).endswith("Z") and len(iso_timestamp(stamp)) == 24  # ...ss.mmmZ
    assert load_task(dump_task(task)).status.timestamp == stamp
