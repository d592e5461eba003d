"""A fenced write's check, made inside the writing transaction: the task's lease row read
`FOR SHARE`, so a takeover (an acquire updates the row) waits for the write to commit, and the
write is wholly before the takeover or refused after it, as the Redis scripts order them."""

from __future__ import annotations

import asyncpg

from stores.errors import LeaseLost, TaskVoided
from stores.writes import Fence

LOCK_LEASE = """
SELECT holder, epoch, voided_by FROM leases
WHERE owner = $1 AND task_id = $2 AND expires_at > now()
FOR SHARE
"""


async def lock_lease(connection: asyncpg.Connection, owner: str, task_id: str) -> asyncpg.Record:
    """The task's live lease row, locked until the transaction ends (None: no lease)."""
    return await connection.fetchrow(LOCK_LEASE, owner, task_id)


def check_fence(lease: asyncpg.Record | None, task_id: str, fence: Fence) -> None:
    """LeaseLost unless the lease still has the fence's holder and epoch (expired or not: only a
    new holder ends a fence, as on Redis)."""
    if lease is None or lease["holder"] != fence.holder or lease["epoch"] != fence.epoch:
        raise LeaseLost(task_id, fence)


def check_creation(lease: asyncpg.Record | None, task_id: str, fence: Fence) -> None:
    """TaskVoided if the task was given up before it existed, else as `check_fence`."""
    if lease is not None and lease["voided_by"] is not None:
        raise TaskVoided(task_id, fence, by=lease["voided_by"])
    check_fence(lease, task_id, fence)


async def hold_fence(
    connection: asyncpg.Connection, owner: str, task_id: str, fence: Fence
) -> None:
    """Lock the lease row and check the fence (LeaseLost)."""
    check_fence(await lock_lease(connection, owner, task_id), task_id, fence)
