"""What the stores raise (re-exported by `stores.base`, where callers have always found them)."""

from __future__ import annotations

from stores.writes import Fence


class StoreError(Exception):
    """Base for store failures."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached; the request may be retried later. `task_id`: the task
    the request had made before the store went away (its client can read it later)."""

    def __init__(self, *args: object, task_id: str | None = None) -> None:
        super().__init__(*args)
        self.task_id = task_id


class StoreFull(StoreError):
    """The store holds as many tasks as it may and none can be dropped (all are active): a new
    task is refused; retrying once tasks have ended may succeed."""

    retry_after_s = 5


class TaskGone(StoreError):
    """Publishing to a task that does not exist (it expired, or never did)."""


class StateConflict(StoreError):
    """A compare-and-set publish found the task in another state than expected."""


class PositionConflict(StoreError):
    """A publish guarded by `if_position` found the task's journal at another position: nothing
    was written. `current` is the task's last journal position when the write was refused."""

    def __init__(self, task_id: str, *, expected: int, current: int) -> None:
        super().__init__(f"task {task_id!r} is at journal position {current}, not {expected}")
        self.task_id = task_id
        self.expected = expected
        self.current = current


class LeaseLost(StoreError):
    """A fenced write from a holder that no longer holds the task's lease (another process took
    the turn over): nothing was written, and the writer must stop its turn."""

    def __init__(self, task_id: str, fence: Fence) -> None:
        super().__init__(f"task {task_id!r}: lease epoch {fence.epoch} is no longer held")


class TaskVoided(LeaseLost):
    """A fenced creation of a task that another request gave up for dead (`TaskStore.void`): it
    found the task's context claimed by it before it existed. Nothing was written; `by` is the
    task that voided it (the one that took the context)."""

    def __init__(self, task_id: str, fence: Fence, *, by: str) -> None:
        StoreError.__init__(self, f"task {task_id!r} was given up before it was created ({by!r})")
        self.by = by


class InvalidPageToken(StoreError):
    """A list page token that this store did not issue."""


class TaskUnreadable(StoreError):
    """A stored task that cannot be loaded (corrupt, or written by a version with other limits)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id!r} is stored but cannot be read")
        self.task_id = task_id


class StoreLocked(StoreError):
    """The store is another server's alone (a SQLite file a running server holds): this one
    must not start on it. The message is the one line the server exits with."""
