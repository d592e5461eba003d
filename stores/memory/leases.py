"""In-memory leases: one process, so nothing else can take a turn over, but the contract (epochs,
fences, cancel requests) holds as it does on Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from stores.base import (
    DEFAULT_TASK_TTL_S,
    Fence,
    LeaseLost,
    LeaseStatus,
    LeaseStore,
    TaskRef,
    TaskVoided,
)
from stores.memory.support import IdleSweeper


@dataclass
class _Lease:
    holder: str | None  # None: released (the epoch is kept, so epochs only grow)
    expires: float
    epoch: int = 0
    cancel_requested: bool = False
    touched: float = field(default_factory=time.monotonic)
    task_gone: bool = False  # its task was dropped while a turn held it: forgotten at release
    voided_by: str | None = None  # the task that gave this one up before it was created


class InMemoryLeaseStore(LeaseStore):
    """Leases within one process: nothing else can take a turn over, but the contract holds."""

    def __init__(self, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        # A lease (and so its epoch) lives as long as its task may: idle for at most the TTL.
        self._sweeper = IdleSweeper(ttl_s)
        self._leases: dict[tuple[str, str], _Lease] = {}
        self._listeners: list[asyncio.Queue[TaskRef]] = []

    async def acquire(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> int:
        self._sweeper.sweep(self._leases)
        lease = self._leases.get((owner, task_id))
        now = time.monotonic()
        if lease is None:
            lease = self._leases[(owner, task_id)] = _Lease(None, now)
        if lease.holder is not None and lease.holder != holder and lease.expires > now:
            return 0
        if lease.holder is None:
            lease.cancel_requested = False
        if lease.holder != holder:  # taken (free, or from an expired holder): a new epoch
            lease.holder, lease.epoch = holder, lease.epoch + 1
        lease.expires, lease.touched = now + ttl_s, now
        return lease.epoch

    async def renew(self, task_id: str, *, owner: str, holder: str, ttl_s: float) -> LeaseStatus:
        lease = self._leases.get((owner, task_id))
        if lease is None or lease.holder != holder:
            return LeaseStatus.LOST
        lease.touched = time.monotonic()
        lease.expires = lease.touched + ttl_s
        return LeaseStatus.CANCEL_REQUESTED if lease.cancel_requested else LeaseStatus.HELD

    async def is_held(self, task_id: str, *, owner: str) -> bool:
        lease = self._leases.get((owner, task_id))
        return lease is not None and lease.holder is not None and lease.expires > time.monotonic()

    def check(self, task_id: str, *, owner: str, fence: Fence) -> None:
        """Raise LeaseLost unless the fence's holder still holds the lease at that epoch."""
        lease = self._leases.get((owner, task_id))
        if lease is None or lease.holder != fence.holder or lease.epoch != fence.epoch:
            raise LeaseLost(task_id, fence)

    def check_creation(self, task_id: str, *, owner: str, fence: Fence) -> None:
        """Raise TaskVoided if the task was given up (`void`), else as `check`."""
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.voided_by is not None:
            raise TaskVoided(task_id, fence, by=lease.voided_by)
        self.check(task_id, owner=owner, fence=fence)

    def void(self, task_id: str, *, owner: str, by: str) -> None:
        """Mark the task given up: its creation is refused from now on (the first voider stays).
        The mark lives as long as a lease does (idle for the TTL)."""
        lease = self._leases.setdefault((owner, task_id), _Lease(None, time.monotonic()))
        if lease.voided_by is None:
            lease.voided_by = by
        lease.touched = time.monotonic()

    def forget_task(self, owner: str, task_id: str, context_id: str) -> None:
        """The task store dropped the task: its lease goes too, at once if released, else when
        its holder releases it. Its epoch goes with it, which fencing does not need (holders
        never reuse a name)."""
        lease = self._leases.get((owner, task_id))
        if lease is None:
            return
        if lease.holder is None:
            del self._leases[(owner, task_id)]
        else:
            lease.task_gone = True

    async def release(self, task_id: str, *, owner: str, holder: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder == holder:
            if lease.task_gone:
                del self._leases[(owner, task_id)]
            else:
                lease.holder, lease.cancel_requested = None, False

    async def hand_over(self, task_id: str, *, owner: str, holder: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder == holder:
            lease.expires = time.monotonic()

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        lease = self._leases.get((owner, task_id))
        if lease is not None and lease.holder is not None:
            lease.cancel_requested = True
        for listener in self._listeners:
            listener.put_nowait(TaskRef(owner, task_id))

    async def cancel_requests(self) -> AsyncIterator[TaskRef]:
        queue: asyncio.Queue[TaskRef] = asyncio.Queue()
        self._listeners.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._listeners.remove(queue)

    async def expired(self, *, limit: int = 100) -> list[TaskRef]:
        now = time.monotonic()
        return [
            TaskRef(owner, task_id)
            for (owner, task_id), lease in self._leases.items()
            if lease.holder is not None and lease.expires <= now
        ][:limit]
