"""A fenced write's refusal: the write functions (stores.postgres.write_functions) check the
lease in the statement that writes (the lease row read `FOR SHARE`, so a takeover waits for the
write to commit, and the write is wholly before the takeover or refused after it, as the Redis
scripts order them) and say why they refused; here that becomes the store's error."""

from __future__ import annotations

from stores.errors import LeaseLost, TaskVoided
from stores.writes import Fence


def fence_args(fence: Fence | None) -> tuple[str | None, int | None]:
    """A write function's (holder, epoch) arguments: (NULL, NULL) for an unfenced write."""
    return (None, None) if fence is None else (fence.holder, fence.epoch)


def refuse_creation(outcome: str, task_id: str, fence: Fence, voided_by: str | None) -> None:
    """TaskVoided if the task was given up before it existed, LeaseLost if the fence lost."""
    if outcome == "voided":
        raise TaskVoided(task_id, fence, by=str(voided_by))
    raise LeaseLost(task_id, fence)
