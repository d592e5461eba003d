"""In-memory checkpoints of running turns (fenced by the lease store, when given one)."""

from __future__ import annotations

from stores.base import CheckpointStore, Fence
from stores.memory.leases import InMemoryLeaseStore


class InMemoryCheckpointStore(CheckpointStore):
    def __init__(self, *, leases: InMemoryLeaseStore | None = None) -> None:
        self._checkpoints: dict[tuple[str, str], str] = {}
        self._leases = leases

    async def save(
        self, task_id: str, checkpoint: str, *, owner: str, fence: Fence | None = None
    ) -> None:
        if fence is not None and self._leases is not None:
            self._leases.check(task_id, owner=owner, fence=fence)
        self._checkpoints[(owner, task_id)] = checkpoint

    async def load(self, task_id: str, *, owner: str) -> str | None:
        return self._checkpoints.get((owner, task_id))

    async def delete(self, task_id: str, *, owner: str) -> None:
        self._checkpoints.pop((owner, task_id), None)

    def forget_task(self, owner: str, task_id: str, context_id: str) -> None:
        """The task store dropped the task (a turn that never got to delete its checkpoint)."""
        self._checkpoints.pop((owner, task_id), None)
