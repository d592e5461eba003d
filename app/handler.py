"""RequestHandler: the A2A operations, transport-neutral.

It knows nothing of JSON-RPC or HTTP routes: bindings parse their wire format into these calls and
render the results. Streams are journal readers: a stream is the task snapshot followed by the
journal entries after the position that snapshot reflects.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from agent.answers import AnswerRejected
from agent.runner import NoCheckpoint, TaskRunner
from app.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from stores.base import (
    InvalidPageToken,
    MessageStore,
    StateConflict,
    TaskPage,
    TaskQuery,
    TaskStore,
)
from stores.models import (
    JournalEntry,
    Message,
    Role,
    StatusUpdate,
    Task,
    TaskEvent,
    TaskRecord,
    TaskSnapshot,
    TaskState,
    TaskStatus,
)

SUPPORTED_INPUT_MODES = ("text/plain", "application/json")


@dataclass(frozen=True, kw_only=True, slots=True)
class SendRequest:
    message: Message
    return_immediately: bool = False
    trace_carrier: dict[str, str] = field(default_factory=dict)
    """The client's W3C trace context (`traceparent`, `tracestate`): the turn joins its trace."""


def event_state(event: TaskEvent) -> TaskState | None:
    match event:
        case StatusUpdate(status=status):
            return status.state
        case TaskSnapshot(task=task):
            return task.status.state
        case _:
            return None


def ends_stream(event: TaskEvent, *, at_interrupt: bool) -> bool:
    state = event_state(event)
    return state is not None and (state.is_terminal or (at_interrupt and state.is_interrupted))


class RequestHandler:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        runner: TaskRunner,
        read_block_s: float = 15.0,
    ) -> None:
        self._tasks = tasks
        self._messages = messages
        self._runner = runner
        self._read_block_s = read_block_s

    async def send_message(self, request: SendRequest, *, owner: str) -> Task:
        """Start (or continue) a task; unless asked to return at once, wait for it to settle."""
        record = await self._begin(request, owner=owner)
        if request.return_immediately:
            return record.task
        await self._until_settled(record.task.id, owner=owner, after=record.position)
        settled = await self._tasks.get(record.task.id, owner=owner)
        return settled.task if settled is not None else record.task

    async def stream_message(
        self, request: SendRequest, *, owner: str
    ) -> AsyncIterator[JournalEntry]:
        """Validate and start the task now (errors surface before any event), then stream it."""
        record = await self._begin(request, owner=owner)
        return self._snapshot_then_tail(record, owner=owner, at_interrupt=True)

    async def get_task(self, task_id: str, *, owner: str) -> Task:
        return (await self._require(task_id, owner=owner)).task

    async def list_tasks(self, query: TaskQuery, *, owner: str) -> TaskPage:
        try:
            return await self._tasks.list(query, owner=owner)
        except InvalidPageToken as exc:
            raise InvalidParamsError(str(exc)) from exc

    async def cancel_task(self, task_id: str, *, owner: str) -> Task:
        record = await self._require(task_id, owner=owner)
        state = record.task.status.state
        if state == TaskState.CANCELED:
            return record.task  # cancel is idempotent
        if state.is_terminal:
            raise TaskNotCancelableError(
                f"Task {task_id!r} is in terminal state {state.value}", taskId=task_id
            )
        if not await self._runner.cancel(task_id, owner=owner):
            await self._cancel_elsewhere(record, owner=owner)
        settled = await self._require(task_id, owner=owner)
        if settled.task.status.state != TaskState.CANCELED:
            raise TaskNotCancelableError(
                f"Task {task_id!r} finished ({settled.task.status.state.value})"
                " before it could be canceled",
                taskId=task_id,
            )
        return settled.task

    async def _cancel_elsewhere(self, record: TaskRecord, *, owner: str) -> None:
        """Cancel a task whose turn does not run in this process."""
        task, leases = record.task, self._runner.leases
        if task.status.state.is_interrupted or await leases.acquire(
            task.id, owner=owner, holder=self._runner.holder, ttl_s=self._runner.lease_ttl_s
        ):
            # Nobody runs it (waiting for input, or its process died): record the cancel here.
            await self._settle(task, TaskState.CANCELED, owner=owner)
            return
        # Another process runs it: it hears the request at once and records the cancel itself.
        await leases.request_cancel(task.id, owner=owner)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2 * self._runner.lease_ttl_s):
                await self._until_settled(task.id, owner=owner, after=record.position)

    async def subscribe(
        self, task_id: str, *, owner: str, last_event_id: int | None = None
    ) -> AsyncIterator[JournalEntry]:
        """The current task, then its live events; or, after a reconnect, just the missed events."""
        record = await self._require(task_id, owner=owner)
        if record.task.status.state.is_terminal and last_event_id is None:
            raise UnsupportedOperationError(
                f"Task {task_id!r} is in terminal state {record.task.status.state.value}",
                taskId=task_id,
            )
        if last_event_id is not None:
            return self._tail(task_id, owner=owner, after=last_event_id, at_interrupt=False)
        return self._snapshot_then_tail(record, owner=owner, at_interrupt=False)

    async def _require(self, task_id: str, *, owner: str) -> TaskRecord:
        record = await self._tasks.get(task_id, owner=owner)
        if record is None:
            raise TaskNotFoundError(f"Task {task_id!r} not found", taskId=task_id)
        return record

    async def _begin(self, request: SendRequest, *, owner: str) -> TaskRecord:
        message = request.message
        if message.role != Role.USER:
            raise InvalidParamsError("message.role must be ROLE_USER")
        for part in message.parts:
            if (
                part.media_type
                and part.media_type.split(";")[0].strip() not in SUPPORTED_INPUT_MODES
            ):
                raise ContentTypeNotSupportedError(
                    f"Media type {part.media_type!r} is not supported;"
                    f" supported: {', '.join(SUPPORTED_INPUT_MODES)}",
                    mediaType=part.media_type,
                )
        if message.task_id:
            return await self._continue(message, owner=owner)
        context_id = message.context_id or str(uuid.uuid4())
        task_id = str(uuid.uuid4())
        holder = await self._claim(context_id, task_id, owner=owner)
        if holder is not None:
            raise UnsupportedOperationError(
                f"Context {context_id!r} already has a task in progress ({holder!r});"
                " wait for it to finish, or cancel it, before sending another message",
                contextId=context_id,
                taskId=holder,
            )
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.SUBMITTED),
            history=[message.model_copy(update={"task_id": task_id, "context_id": context_id})],
        )
        try:
            record = await self._tasks.create(task, owner=owner)
            await self._runner.start(
                record.task, message, owner=owner, trace_carrier=request.trace_carrier
            )
        except BaseException:
            await self._messages.release(context_id, task_id, owner=owner)
            raise
        return record

    async def _claim(self, context_id: str, task_id: str, *, owner: str) -> str | None:
        """Claim the context for a new task; a claim left by a task that has ended is taken over."""
        holder = await self._messages.claim(context_id, task_id, owner=owner)
        if holder is None:
            return None
        held_by = await self._tasks.get(holder, owner=owner)
        if held_by is not None and not held_by.task.status.state.is_terminal:
            return holder
        await self._messages.release(context_id, holder, owner=owner)
        return await self._messages.claim(context_id, task_id, owner=owner)

    async def _continue(self, message: Message, *, owner: str) -> TaskRecord:
        """A message on an existing task: only an interrupted task (waiting for input) takes one."""
        assert message.task_id is not None
        record = await self._require(message.task_id, owner=owner)
        task = record.task
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError(
                f"contextId {message.context_id!r} does not match the context {task.context_id!r}"
                f" of task {task.id!r}",
                taskId=task.id,
            )
        state = task.status.state
        if state.is_terminal:
            raise UnsupportedOperationError(
                f"Task {task.id!r} is in terminal state {state.value}; start a new task instead",
                taskId=task.id,
            )
        if not state.is_interrupted:
            raise UnsupportedOperationError(
                f"Task {task.id!r} is still working; wait for it to finish or cancel it",
                taskId=task.id,
            )
        try:
            checkpoint = await self._runner.prepare_resume(task, message, owner=owner)
        except AnswerRejected as exc:
            raise InvalidParamsError(str(exc), taskId=task.id) from exc
        except NoCheckpoint as exc:
            reason = "The task's saved turn is gone, so it cannot go on; start a new task."
            await self._settle(task, TaskState.FAILED, owner=owner, if_state=state)
            raise UnsupportedOperationError(reason, taskId=task.id) from exc
        task.history.append(message.model_copy(update={"context_id": task.context_id}))
        # Compare-and-set out of the waiting state: of answers racing (on any servers), one wins.
        position = await self._settle(task, TaskState.SUBMITTED, owner=owner, if_state=state)
        await self._runner.resume(task, checkpoint, owner=owner)
        return TaskRecord(task=task, owner=owner, position=position)

    async def _settle(
        self, task: Task, state: TaskState, *, owner: str, if_state: TaskState | None = None
    ) -> int:
        """Record a state change made here rather than by a running turn."""
        try:
            return await self._runner.record_state(task, state, owner=owner, if_state=if_state)
        except StateConflict as exc:
            raise UnsupportedOperationError(
                f"Task {task.id!r} has already moved on (another message was taken first)",
                taskId=task.id,
            ) from exc

    async def _until_settled(self, task_id: str, *, owner: str, after: int) -> None:
        """Wait until the task ends or waits for input (read from the journal, not polled)."""
        async for _ in self._tail(task_id, owner=owner, after=after, at_interrupt=True):
            pass

    async def _snapshot_then_tail(
        self, record: TaskRecord, *, owner: str, at_interrupt: bool
    ) -> AsyncIterator[JournalEntry]:
        first = JournalEntry(position=record.position, event=TaskSnapshot(task=record.task))
        yield first
        if ends_stream(first.event, at_interrupt=at_interrupt):
            return
        async for entry in self._tail(
            record.task.id, owner=owner, after=record.position, at_interrupt=at_interrupt
        ):
            yield entry

    async def _tail(
        self, task_id: str, *, owner: str, after: int, at_interrupt: bool
    ) -> AsyncIterator[JournalEntry]:
        """Journal entries after `after` until the task ends (or pauses, with `at_interrupt`)."""
        block_s = 0.0  # the first read does not wait: a reader already at the end must not hang
        while True:
            entries = await self._tasks.read(task_id, owner=owner, after=after, timeout_s=block_s)
            for entry in entries:
                yield entry
                after = entry.position
                if ends_stream(entry.event, at_interrupt=at_interrupt):
                    return
            if not entries:
                record = await self._tasks.get(task_id, owner=owner)
                if record is None:
                    return  # expired while we waited
                if record.position <= after and ends_stream(
                    TaskSnapshot(task=record.task), at_interrupt=at_interrupt
                ):
                    return
                block_s = self._read_block_s
