#!/usr/bin/env python
"""ListTasks on Redis: a page of 50 for an owner of 100 tasks and for one of 10,000, same run.

Two owners are filled on the local Redis (a key prefix of this run's own, deleted at the end) with
the same mix: 60% of the tasks in one context, 60% COMPLETED, 60% with a status after the
`status_after` used, so that every query below returns a full page of 50 for either owner. Each
query is timed `--repeat` times per owner (interleaved, after a warm-up), the median reported, and
the ratio of the 10,000-task owner's median to the 100-task owner's: the cost of a page should not
grow with the number of tasks.

    .venv/bin/python bench/list_pages.py [--repeat 200] [--redis-url redis://127.0.0.1:6379/0]
    .venv/bin/python bench/list_pages.py --code /path/to/another/checkout   # its stores package

Not part of the test suite. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (100, 10_000)
PAGE = 50


def tasks_of(count: int, start: datetime, rng: random.Random) -> list[Any]:
    from stores.models import Task, TaskState, TaskStatus

    others = [TaskState.WORKING, TaskState.SUBMITTED, TaskState.FAILED, TaskState.INPUT_REQUIRED]
    tasks = []
    for _ in range(count):
        recent = rng.random() < 0.6  # after the status_after of the queries
        moment = start + timedelta(minutes=30 if recent else 0, milliseconds=rng.randrange(600_000))
        state = TaskState.COMPLETED if rng.random() < 0.6 else rng.choice(others)
        context = "ctx-main" if rng.random() < 0.6 else f"ctx-{rng.randrange(20)}"
        tasks.append(
            Task(
                id=str(uuid.UUID(int=rng.getrandbits(128))),
                context_id=context,
                status=TaskStatus(state=state, timestamp=moment),
            )
        )
    return tasks


async def fill(store: Any, owner: str, tasks: list[Any]) -> None:
    for offset in range(0, len(tasks), 200):
        batch = tasks[offset : offset + 200]
        await asyncio.gather(*(store.create(task, owner=owner) for task in batch))


async def time_page(store: Any, owner: str, query: Any) -> float:
    started = time.perf_counter()
    page = await store.list(query, owner=owner)
    elapsed = time.perf_counter() - started
    assert len(page.tasks) == PAGE, (query, len(page.tasks))
    return elapsed


async def run(redis_url: str, repeat: int) -> None:
    from redis.asyncio import Redis

    from stores.base import TaskQuery
    from stores.models import TaskState
    from stores.redis.tasks import RedisTaskStore

    prefix = f"bench-lists-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(redis_url)
    store = RedisTaskStore(client, prefix=prefix, ttl_s=3600)
    start = datetime.now(UTC) - timedelta(hours=1)
    rng = random.Random(44)
    owners = {size: f"owner-{size}" for size in SIZES}
    try:
        for size, owner in owners.items():
            began = time.perf_counter()
            await fill(store, owner, tasks_of(size, start, rng))
            print(f"filled {size:>6} tasks in {time.perf_counter() - began:.1f} s", flush=True)
        after = start + timedelta(minutes=30)
        queries: dict[str, TaskQuery] = {
            "no filter": TaskQuery(page_size=PAGE),
            "state = COMPLETED": TaskQuery(state=TaskState.COMPLETED, page_size=PAGE),
            "context (60% of the tasks)": TaskQuery(context_id="ctx-main", page_size=PAGE),
            "status_after (60% after it)": TaskQuery(status_after=after, page_size=PAGE),
        }
        # The second page, by the first one's token (of each owner's own first page).
        tokens = {
            size: (await store.list(TaskQuery(page_size=PAGE), owner=owner)).next_page_token
            for size, owner in owners.items()
        }
        print(f"\nmedian ms per page of {PAGE} ({repeat} runs each), {prefix}")
        print(f"| query | {SIZES[0]:,} tasks | {SIZES[1]:,} tasks | ratio |")
        print("|---|---|---|---|")
        rows = [*queries.items(), ("no filter, 2nd page (cursor)", None)]
        for name, query in rows:
            samples: dict[int, list[float]] = {size: [] for size in SIZES}
            for n in range(repeat + 5):  # the first 5: warm-up
                for size, owner in owners.items():
                    asked = query or TaskQuery(page_size=PAGE, page_token=tokens[size])
                    elapsed = await time_page(store, owner, asked)
                    if n >= 5:
                        samples[size].append(elapsed)
            small, large = (statistics.median(samples[size]) * 1000 for size in SIZES)
            print(f"| {name} | {small:.2f} | {large:.2f} | {large / small:.2f}x |", flush=True)
    finally:
        await store.aclose()
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for offset in range(0, len(keys), 1000):
            await client.delete(*keys[offset : offset + 1000])
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose stores to time")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    asyncio.run(run(args.redis_url, args.repeat))


if __name__ == "__main__":
    main()
