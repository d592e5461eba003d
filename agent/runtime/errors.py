"""The task runtime's refusals: what it will not do with a task, and the ids a client needs to act
on that. The runtime never raises the app's wire errors (that import would run back up): the app
maps these to A2A errors in one table (app/errors.py)."""

from __future__ import annotations


class TaskRuntimeError(Exception):
    """Base for a refused task operation; the message is written for the client."""

    def __init__(
        self, message: str, *, task_id: str | None = None, context_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.context_id = context_id


class TaskNotFound(TaskRuntimeError):
    """No such task for this owner (never created, expired, or another principal's)."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"Task {task_id!r} not found", task_id=task_id)


class TaskMovedOn(TaskRuntimeError):
    """Another message (or a cancel) changed the task first: this one came too late."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"Task {task_id!r} has already moved on (another message was taken first)",
            task_id=task_id,
        )


class ContextBusy(TaskRuntimeError):
    """The context already has a task at work: one task at a time per conversation."""

    def __init__(self, context_id: str, holder: str) -> None:
        super().__init__(
            f"Context {context_id!r} already has a task in progress ({holder!r});"
            " wait for it to finish, or cancel it, before sending another message",
            context_id=context_id,
            task_id=holder,
        )


class TaskNotWaiting(TaskRuntimeError):
    """A message for a task that waits for none: it has ended, or its turn is still working."""


class ContextMismatch(TaskRuntimeError):
    """A message names a task and a context the task is not in."""


class TaskNotCancelable(TaskRuntimeError):
    """The task ended (or ended while the cancel was under way) in a state other than canceled."""


class AnswerRejected(TaskRuntimeError, ValueError):
    """The message does not answer what the task waits for; the task keeps waiting."""


class NoCheckpoint(TaskRuntimeError):
    """A suspended or orphaned turn has no saved state to go on from."""


class LeaseTaken(TaskRuntimeError):
    """Another process holds the task's lease: it runs the turn."""


class GenerationMismatch(TaskRuntimeError):
    """A follow-up's `ifGenerationMatch` (A2A 1.1) names a generation the task is no longer at:
    it moved on (another message, a cancel, an event) since the client last read it."""

    def __init__(self, task_id: str, *, expected: int, current: int) -> None:
        super().__init__(
            f"Task generation mismatch: expected {expected} but current generation is {current}",
            task_id=task_id,
        )
        self.expected = expected
        self.current = current
