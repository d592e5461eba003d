"""ContextClaims: one turn at a time per conversation, under the turn's lease.

    take(context, task, fence)   the claim --free, or the task's own--> held, under the fence
                                          --another task's--> is that task at work there?
                                              yes: its id (the caller refuses: ContextBusy)
                                              no:  replaced by compare-and-set (one wins)

The claim carries the fence of its task's lease (task, holder, epoch), and the store admits a
conversation write or a claim release only under that fence or a later one of the same task
(stores.base.ContextFence). So every start of a turn takes the claim under its new lease before
the turn writes: a new task claims it, an answered task and a takeover fence it again (a larger
epoch). From then on a copy of the turn that lost its lease (paused, cut off from the store)
writes nothing into the conversation and cannot free the context, however late its writes land.

A claim names a task that does not exist while its creator is between its claim and its creation,
or when the creator failed there (the store died, its process was killed, its creation is held
by a cut). Its creation is fenced too (`TaskStore.create`), so such a task is voided in its own
slot (`TaskStore.void`): in one atomic step it is found created (then it is judged as any task),
or marked so that its creation is refused whenever it lands. Then its claim is stale at once:
a client's retry elsewhere is not refused for a whole lease on a task nobody can read, and the
voided creator answers its client that the context is busy, never leaving a second task behind.
Of two messages that race for one context, the one that voids the other wins.

A claim without a fence was taken by a server of an earlier version (a rolling deploy): its
creation checks no void, so its task counts as at work while its lease is held, as before.
"""

from __future__ import annotations

from stores.base import (
    ClaimHolder,
    Fence,
    LeaseStore,
    MessageStore,
    TaskStore,
    TaskUnreadable,
)


class ContextClaims:
    def __init__(self, *, tasks: TaskStore, messages: MessageStore, leases: LeaseStore) -> None:
        self._tasks = tasks
        self._messages = messages
        self._leases = leases

    async def take(self, context_id: str, task_id: str, *, owner: str, fence: Fence) -> str | None:
        """Claim the context for the task under its lease's fence: None if it holds it now,
        else the task at work there. LeaseLost if the claim is the task's under a later fence."""
        messages = self._messages
        holder = await messages.claim(context_id, task_id, owner=owner, fence=fence)
        if holder is None:
            return None
        if await self._at_work(holder, by=task_id, owner=owner):
            return holder.task_id
        if await messages.replace_claim(
            context_id, holder.task_id, task_id, owner=owner, fence=fence
        ):
            return None
        again = await messages.claim(context_id, task_id, owner=owner, fence=fence)
        return again.task_id if again is not None else None

    async def release(self, context_id: str, task_id: str, *, owner: str, fence: Fence) -> None:
        """Give the context up, if the task holds it under this fence (or an earlier one)."""
        await self._messages.release(context_id, task_id, owner=owner, fence=fence)

    async def _at_work(self, holder: ClaimHolder, *, by: str, owner: str) -> bool:
        """Whether the task holding a context's claim is still at work there (or can still be
        created): not when it ended, cannot be read, or was voided here before it existed."""
        tasks, task_id = self._tasks, holder.task_id
        try:
            record = await tasks.get(task_id, owner=owner)
            if record is None:
                if not holder.fenced:
                    return await self._leases.is_held(task_id, owner=owner)
                if await tasks.void(task_id, owner=owner, by=by):
                    return False
                record = await tasks.get(task_id, owner=owner)  # created meanwhile
        except TaskUnreadable:
            return False  # it can never run again: its claim is stale
        return record is not None and not record.task.status.state.is_terminal
