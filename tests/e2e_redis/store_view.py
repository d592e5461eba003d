"""What the multi-replica tests ask the shared stores behind the replicas' backs, for each backend
the scenarios run on (the `store_view` fixture):

* `RedisView`: the keys themselves (tests/e2e_redis, tests/e2e_redis_cluster): who holds a turn's
  lease, whether a cancel flag was left behind, the push configs and cursor;
* `StoreApiView`: the same questions through the stores' own API (tests/e2e_postgres), for a
  backend whose rows the tests do not read: the API says whether a lease is held, not by whom,
  so a takeover is seen in the successor's log (the supervisor's "taking over" line).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from stores.base import ANONYMOUS, StoreSet
from stores.redis.keys import RedisKeys
from tests.e2e.harness import ServerProcess

T = TypeVar("T")


class RedisView:
    def __init__(self, client: Any, prefix: str) -> None:
        self.client, self.prefix, self.keys = client, prefix, RedisKeys(prefix)

    def holder(self, task_id: str) -> str | None:
        """`<name>-<pid>-<n>` of the (anonymous) task's lease holder, or None."""
        raw = self.client.hget(self.keys.lease(ANONYMOUS, task_id), "holder")
        return raw.decode() if raw is not None else None

    def assert_runs_on(self, server: ServerProcess, task_id: str) -> None:
        assert server.proc is not None
        holder = self.holder(task_id)
        assert holder is not None, "no lease for a running turn"
        assert f"-{server.proc.pid}-" in holder, f"lease holder {holder!r} is not {server.proc.pid}"

    def wait_for_holder(self, server: ServerProcess, task_id: str, timeout: float) -> float:
        """Until `server`'s process holds the task's lease; the moment it was seen (monotonic)."""
        assert server.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            holder = self.holder(task_id)
            if holder is not None and f"-{server.proc.pid}-" in holder:
                return time.monotonic()
            assert time.monotonic() < deadline, (
                f"lease of {task_id} held by {holder!r}, not pid {server.proc.pid}, after {timeout}s"
            )
            time.sleep(0.05)

    def assert_released(self, task_id: str) -> None:
        """No lease left held, no cancel request left behind."""
        assert self.holder(task_id) is None, "lease left held"
        assert not self.client.exists(self.keys.cancel_flag(ANONYMOUS, task_id)), (
            "cancel flag left behind"
        )

    def push_config_ids(self, task_id: str) -> list[str]:
        raw = self.client.hkeys(self.keys.push_configs(ANONYMOUS, task_id))
        return sorted(key.decode() for key in raw)

    def push_cursor(self, task_id: str) -> int:
        return int(self.client.get(self.keys.push_cursor(ANONYMOUS, task_id)) or 0)


class StoreApiView:
    """The questions of `RedisView` through a StoreSet of the test's own on the same backend
    (`open_stores` makes one; each question opens, asks and closes it)."""

    def __init__(
        self, open_stores: Callable[[], StoreSet], servers: Callable[[], list[ServerProcess]]
    ):
        self.open_stores = open_stores
        self.servers = servers

    def _ask(self, question: Callable[[StoreSet], Coroutine[Any, Any, T]]) -> T:
        async def ask() -> T:
            stores = self.open_stores()
            try:
                return await question(stores)
            finally:
                await stores.aclose()

        return asyncio.run(ask())

    def is_held(self, task_id: str) -> bool:
        return self._ask(lambda stores: stores.leases.is_held(task_id, owner=ANONYMOUS))

    @staticmethod
    def took_over(server: ServerProcess, task_id: str) -> bool:
        return f"task_id=<{task_id}> | taking over an orphaned turn" in server.log_since(0)

    def assert_runs_on(self, server: ServerProcess, task_id: str) -> None:
        """The lease is held, and no other replica has said it took the turn over (a turn runs
        where it was sent until then)."""
        assert self.is_held(task_id), "no lease for a running turn"
        others = [s.url for s in self.servers() if s is not server and self.took_over(s, task_id)]
        assert others == [], f"taken over by {others}"

    def wait_for_holder(self, server: ServerProcess, task_id: str, timeout: float) -> float:
        """Until `server` logs that it took the turn over (and the lease is held again)."""
        deadline = time.monotonic() + timeout
        while not self.took_over(server, task_id):
            assert time.monotonic() < deadline, (
                f"{server.url} did not take {task_id} over within {timeout}s\n{server.logs()}"
            )
            time.sleep(0.05)
        seen = time.monotonic()
        assert self.is_held(task_id), "taken over, yet no lease is held"
        return seen

    def assert_released(self, task_id: str) -> None:
        assert not self.is_held(task_id), "lease left held"

    def push_config_ids(self, task_id: str) -> list[str]:
        configs = self._ask(lambda stores: stores.pushes.list(task_id, owner=ANONYMOUS))
        return sorted(config.id for config in configs)

    def push_cursor(self, task_id: str) -> int:
        return self._ask(lambda stores: stores.pushes.cursor(task_id, owner=ANONYMOUS))
