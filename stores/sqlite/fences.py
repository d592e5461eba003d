"""Fence checks against the lease row, made inside the writing transaction (as the Redis scripts
check the lease hash in the script that writes): the write and its check are one atomic step."""

from __future__ import annotations

from stores.base import Fence, LeaseLost, TaskVoided
from stores.sqlite.database import Step

_LEASE = (
    "SELECT holder, epoch, voided_by FROM leases WHERE owner = ? AND task_id = ? AND expires_at > ?"
)


def check_fence(step: Step, owner: str, task_id: str, fence: Fence) -> None:
    """LeaseLost unless the lease still has the fence's holder at its epoch (an expired lease
    that no one took over still holds: only another holder's acquire ends a fence)."""
    row = step.connection.execute(_LEASE, (owner, task_id, step.now_ms)).fetchone()
    if row is None or row[0] != fence.holder or row[1] != fence.epoch:
        raise LeaseLost(task_id, fence)


def check_creation(step: Step, owner: str, task_id: str, fence: Fence) -> None:
    """TaskVoided if the task was given up before it existed (`TaskStore.void`), else as
    `check_fence`."""
    row = step.connection.execute(_LEASE, (owner, task_id, step.now_ms)).fetchone()
    if row is not None and row[2] is not None:
        raise TaskVoided(task_id, fence, by=row[2])
    if row is None or row[0] != fence.holder or row[1] != fence.epoch:
        raise LeaseLost(task_id, fence)
