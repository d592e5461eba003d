"""In-memory stores: one process, nothing survives a restart. The embedded default.

They hand out copies, so a caller that forgets to save sees the same thing every other caller does
(as a2a-python's CopyingTaskStoreAdapter does), and they expire idle tasks and conversations after
the TTL so a long-running process does not grow forever. One module per store, as for Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

from stores.memory.checkpoints import InMemoryCheckpointStore
from stores.memory.leases import InMemoryLeaseStore
from stores.memory.messages import InMemoryMessageStore
from stores.memory.push import InMemoryPushConfigStore
from stores.memory.support import MAX_TASKS
from stores.memory.tasks import InMemoryTaskStore
from stores.rate_limit import InMemoryRateLimiter, RateLimit, RateLimiter

__all__ = [
    "InMemoryCheckpointStore",
    "InMemoryLeaseStore",
    "InMemoryMessageStore",
    "InMemoryPushConfigStore",
    "InMemoryStores",
    "InMemoryTaskStore",
]


@dataclass
class InMemoryStores:
    """The embedded default: all four stores in this process."""

    tasks: InMemoryTaskStore
    messages: InMemoryMessageStore
    checkpoints: InMemoryCheckpointStore
    leases: InMemoryLeaseStore
    pushes: InMemoryPushConfigStore

    @classmethod
    def create(
        cls, *, ttl_s: float, max_tasks: int = MAX_TASKS, window_max: int | None = None
    ) -> InMemoryStores:
        """`window_max`: the most messages a turn reads of its conversation (what each keeps)."""
        leases = InMemoryLeaseStore(ttl_s=ttl_s)  # the task and checkpoint stores check fences
        messages = InMemoryMessageStore(
            ttl_s=ttl_s, max_conversations=max_tasks, window_max=window_max
        )
        checkpoints = InMemoryCheckpointStore(leases=leases)
        pushes = InMemoryPushConfigStore(max_tasks=max_tasks)
        # A task the task store drops takes with it what the others keep for it.
        dependents = (leases, checkpoints, pushes, messages)
        tasks = InMemoryTaskStore(
            ttl_s=ttl_s, max_tasks=max_tasks, leases=leases, dependents=dependents
        )
        return cls(tasks, messages, checkpoints, leases, pushes)

    def rate_limiter(self, limit: RateLimit) -> RateLimiter:
        return InMemoryRateLimiter(limit)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
