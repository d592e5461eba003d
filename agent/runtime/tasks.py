"""TaskLifecycle: the task-start protocol under leases, asked once per operation.

    start(new message)   runner.starting: a running-turn slot, then the task's lease
                             -> the context's claim (one task at a time per conversation)
                             -> the task, its webhook, the turn's launch
    start(answer)        the task's lease -> the answer applied to its saved turn (checkpoint)
                             -> SUBMITTED by compare-and-set (one answer wins) -> launch
    start_and_wait       start, then JournalFollower.until_settled (a blocking send)
    cancel               a turn here: the runner stops it; one elsewhere: asked through its
                         lease; one nobody runs: recorded here, over the state seen

The order is what keeps the store consistent when a process dies at any step: a task never
exists without a lease, nor a context claim without one. Refusals are TaskRuntimeErrors; the
app maps them to the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from agent.runtime.answers import check_generation, moved_past, settle
from agent.runtime.errors import (
    AnswerRejected,
    ContextBusy,
    ContextMismatch,
    LeaseTaken,
    NoCheckpoint,
    TaskMovedOn,
    TaskNotCancelable,
    TaskNotFound,
    TaskNotWaiting,
)
from agent.runtime.journal import JournalFollower
from agent.runtime.runner import TaskFollower, TaskRunner
from agent.runtime.turn import TurnRequested, TurnStart
from agent.tools.client import ClientTool
from agent.tracing import Carrier
from stores.base import (
    CheckpointStore,
    Fence,
    LeaseLost,
    MessageStore,
    PushConfigStore,
    StateConflict,
    StoreUnavailable,
    TaskStore,
    TaskVoided,
)
from stores.codec import dump_task
from stores.ids import new_id
from stores.models import Message, PushConfig, Task, TaskRecord, TaskState, TaskStatus

_CANCELED = "The task was canceled."
_SAVED_TURN_GONE = "The task's saved turn is gone, so it cannot go on; start a new task."
_CREATION_LAPSED = "The task could not be created before its lease lapsed; send the message again."
_NOT_STARTED = "The task could not be started (the store failed meanwhile); send the message again."


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskRequest:
    """A message for the runtime, validated: a new task's, or an answer to a waiting one."""

    message: Message
    client_tools: list[ClientTool] = field(default_factory=list)
    trace_carrier: Carrier = field(default_factory=dict)
    """The client's W3C trace context: the turn joins its trace."""
    push_config: PushConfig | None = None
    """A webhook given with the message (its `task_id` is filled in once the task is known)."""
    extensions: frozenset[str] = frozenset()
    """The A2A extensions the request activated: on for the turn it starts or resumes."""
    if_generation: int | None = None
    """A2A 1.1's `ifGenerationMatch`: an answer is taken only while the task is at this
    generation (its last journal position), checked in the write that takes it; ignored by a
    message that starts a task."""


class TaskLifecycle:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        runner: TaskRunner,
        journal: JournalFollower,
        checkpoints: CheckpointStore,
        pushes: PushConfigStore | None = None,
        follower: TaskFollower | None = None,
    ) -> None:
        """`checkpoints`: where a new turn's request is kept until its first checkpoint
        (TurnRequested); `pushes`: where a message's webhook is stored (None: push notifications
        are off); `follower`: told of each state change recorded here (a cancel), as push
        delivery is."""
        self._tasks = tasks
        self._checkpoints = checkpoints
        self._messages = messages
        self._runner = runner
        self._journal = journal
        self._pushes = pushes
        self._follower = follower

    async def get(self, task_id: str, *, owner: str) -> TaskRecord:
        """The task with the journal position its snapshot reflects (TaskNotFound if none)."""
        record = await self._tasks.get(task_id, owner=owner)
        if record is None:
            raise TaskNotFound(task_id)
        return record

    async def start(
        self,
        request: TaskRequest,
        *,
        owner: str,
        hand_over: bool = False,
        awaited: bool = False,
    ) -> TaskRecord:
        """Start a new task, or go on with the waiting one the message names; the turn runs in
        the background. `hand_over`: the turn may take the new task itself (the caller does
        not read it while the turn runs); `awaited`: the caller waits for the turn's end."""
        if request.message.task_id:
            return await self._continue(request, owner=owner, awaited=awaited)
        return await self._begin(request, owner=owner, hand_over=hand_over, awaited=awaited)

    async def start_and_wait(self, request: TaskRequest, *, owner: str) -> TaskRecord:
        """Start, then wait for the task to settle (end, or wait for input). A drain cuts the
        wait short: the task as it stands (its id, at least), and another server finishes it."""
        # The turn may take the new task itself: nothing here reads it while the turn runs.
        record = await self.start(request, owner=owner, hand_over=True, awaited=True)
        task_id = record.task.id
        try:
            settled = await self._journal.until_settled(
                task_id, owner=owner, after=record.position, until_drain=True
            )
            if settled is None:
                try:
                    settled = await self._tasks.get(task_id, owner=owner)
                except StoreUnavailable:
                    if not self._journal.draining:
                        raise
                    # on the way out: what we know beats an error without the task id
        except StoreUnavailable as exc:
            # Whichever read failed (PostgreSQL's journal wait fails first when its listening
            # connection is lost), the client is told its task: it reads it, never resends.
            raise StoreUnavailable(*exc.args, task_id=exc.task_id or task_id) from exc
        if settled is None:  # the turn has the task: its stored form is no longer its own
            return TaskRecord(task=record.task, owner=owner, position=record.position)
        return settled

    async def cancel(self, task_id: str, *, owner: str) -> TaskRecord:
        """Cancel the task wherever its turn runs; TaskNotCancelable once it has ended.

        A cancel is judged by the state it finds: a task already ended, canceled included, is
        not cancelable (the spec's list). Cancels that find the same task still running (two
        clients at once, or a retry of one that timed out) all wait for the same end, and each
        answers with the canceled task: one effect, the same answer; one that ends otherwise
        (it completed first) answers TaskNotCancelable to each of them.
        """
        record = await self.get(task_id, owner=owner)
        state = record.task.status.state
        if state.is_terminal:
            raise TaskNotCancelable(
                f"Task {task_id!r} is in terminal state {state.value}", task_id=task_id
            )
        if not await self._runner.cancel(task_id, owner=owner):
            await self._cancel_elsewhere(record, owner=owner)
        settled = await self.get(task_id, owner=owner)
        if self._follower is not None:
            self._follower.start(task_id, owner=owner)
        if settled.task.status.state != TaskState.CANCELED:
            raise TaskNotCancelable(
                f"Task {task_id!r} finished ({settled.task.status.state.value})"
                " before it could be canceled",
                task_id=task_id,
            )
        return settled

    async def _cancel_elsewhere(self, record: TaskRecord, *, owner: str) -> None:
        """Cancel a task whose turn does not run in this process."""
        task, runner = record.task, self._runner
        state = task.status.state
        if state.is_interrupted:
            # Nobody runs it (waiting for input): record the cancel here, unless an answer has
            # just moved it on (then it runs somewhere: ask that process below).
            saved = await runner.saved_turn(task.id, owner=owner)  # the cancel deletes it
            with contextlib.suppress(StateConflict):
                await runner.record_state(
                    task, TaskState.CANCELED, owner=owner, text=_CANCELED, if_state=state
                )
                if saved is not None:
                    runner.abandon(saved, owner=owner)
                return
        fence = await runner.take_lease(task.id, owner=owner)
        if fence is not None:
            # Its process died (or it just ended): record the cancel under our lease, but only
            # over the state we saw; a task that finished meanwhile stays finished.
            try:
                await runner.record_state(
                    task,
                    TaskState.CANCELED,
                    owner=owner,
                    text=_CANCELED,
                    if_state=state,
                    fence=fence,
                )
            except (StateConflict, LeaseLost):
                await runner.release_lease(task.id, owner=owner, fence=fence)
            return
        # Another process runs it: it hears the request at once and records the cancel itself.
        await runner.request_cancel(task.id, owner=owner)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2 * runner.lease_ttl_s):
                await self._journal.until_settled(task.id, owner=owner, after=record.position)

    async def _begin(
        self, request: TaskRequest, *, owner: str, hand_over: bool, awaited: bool
    ) -> TaskRecord:
        message = request.message
        context_id = message.context_id or new_id()
        task_id = new_id()
        task = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.SUBMITTED),
            history=[message.model_copy(update={"task_id": task_id, "context_id": context_id})],
        )
        # A slot here and the task's lease first (Overloaded: nothing written), then the context,
        # then the task: a task never exists without a lease, nor a context claim without one.
        async with self._runner.starting(task_id, owner=owner) as start:
            assert start.fence is not None
            claims, fence = self._runner.claims, start.fence
            try:
                holder = await claims.take(context_id, task_id, owner=owner, fence=fence)
            except StoreUnavailable:
                with contextlib.suppress(StoreUnavailable):  # tidying: found stale else
                    await claims.release(context_id, task_id, owner=owner, fence=fence)
                raise
            if holder is not None:
                raise ContextBusy(context_id, holder)
            try:
                record = await self._create(task, request, owner=owner, fence=fence)
                if record.stored is None:  # taken before the turn can change the task
                    record.stored = dump_task(task)
                await self._register_push(request, task_id, owner=owner)
                self._runner.launch_new(
                    start,
                    record.task,
                    message,
                    hand_over=hand_over,
                    awaited=awaited,
                    trace_carrier=request.trace_carrier,
                    client_tools=request.client_tools,
                    extensions=request.extensions,
                    # Push delivery looks for configs (a store read) only if there can be one.
                    followed=request.push_config is not None and self._pushes is not None,
                )
            except BaseException:
                if not start.launched:
                    await self._abandon(task, start)
                raise
        return record

    async def _create(
        self, task: Task, request: TaskRequest, *, owner: str, fence: Fence
    ) -> TaskRecord:
        """The new task, created under its lease: refused (nothing written) once another request
        voided it, finding the context claimed by it before it existed, or once its lease lapsed
        and was taken (this request was held longer than the lease). Beside it (written at the
        same time: no round trip more), what its turn was asked with, when a takeover before the
        turn's first checkpoint would lose some."""
        requested = TurnRequested(
            not_begun=True,
            trace_carrier=request.trace_carrier,
            extensions=sorted(request.extensions),
            client_tools=request.client_tools,
        )
        try:
            if not requested.needed:
                return await self._tasks.create(task, owner=owner, fence=fence)
            record, _ = await asyncio.gather(
                self._tasks.create(task, owner=owner, fence=fence),
                self._checkpoints.save(
                    task.id, requested.model_dump_json(), owner=owner, fence=fence
                ),
            )
            return record
        except TaskVoided as exc:
            raise ContextBusy(task.context_id, exc.by) from exc
        except LeaseLost as exc:
            raise StoreUnavailable(_CREATION_LAPSED) from exc

    async def _abandon(self, task: Task, start: TurnStart) -> None:
        """A new task that will not run after all (its creation failed, or what followed it):
        make sure it never appears later, or, created, that it ends; then give its context up.

        Its creation may still land (held by a cut) or may have landed unanswered: voided, it is
        refused whenever it lands; found created, it is failed under its lease, never left a
        task that no replica runs. With the store gone, its lease is left to lapse: the sweep
        then finds the task if its creation lands, and another request voids it if it does not.
        """
        owner, fence = start.owner, start.fence
        assert fence is not None
        try:
            if await self._tasks.void(task.id, owner=owner, by=task.id):
                await self._runner.claims.release(
                    task.context_id, task.id, owner=owner, fence=fence
                )
            else:
                await self._runner.record_state(
                    task, TaskState.FAILED, owner=owner, text=_NOT_STARTED, fence=fence
                )
        except StoreUnavailable:
            start.let_lapse = True
        except (LeaseLost, StateConflict):
            pass  # another request, or the sweep, has it: nothing of ours to tidy

    async def _register_push(self, request: TaskRequest, task_id: str, *, owner: str) -> None:
        """The webhook given with the message, stored before the turn starts: its first event
        is delivered too."""
        if request.push_config is None or self._pushes is None:
            return
        config = request.push_config.model_copy(update={"task_id": task_id})
        await self._pushes.put(config, owner=owner)

    async def _continue(self, request: TaskRequest, *, owner: str, awaited: bool) -> TaskRecord:
        """A message on an existing task: only an interrupted task (waiting for input) takes one.

        With `if_generation` the answer is taken only at that generation: refused at once when
        the snapshot says otherwise, and checked again, atomically, by the compare-and-set that
        takes it (`if_position`)."""
        message = request.message
        assert message.task_id is not None
        record = await self.get(message.task_id, owner=owner)
        task, expected = record.task, request.if_generation
        if message.context_id and message.context_id != task.context_id:
            raise ContextMismatch(
                f"contextId {message.context_id!r} does not match the context {task.context_id!r}"
                f" of task {task.id!r}",
                task_id=task.id,
            )
        state = task.status.state
        if expected is not None:
            check_generation(record, expected)
        if state.is_terminal:
            raise TaskNotWaiting(
                f"Task {task.id!r} is in terminal state {state.value}; start a new task instead",
                task_id=task.id,
            )
        if not state.is_interrupted:
            raise TaskNotWaiting(
                f"Task {task.id!r} is still working; wait for it to finish or cancel it",
                task_id=task.id,
            )
        runner = self._runner
        try:
            async with runner.starting(task.id, owner=owner) as start:
                assert start.fence is not None
                # The context under the new lease before the turn writes: the conversation is
                # this epoch's from now on (and taken back from a stale holder, if any).
                holder = await runner.claims.take(
                    task.context_id, task.id, owner=owner, fence=start.fence
                )
                if holder is not None:
                    raise ContextBusy(task.context_id, holder)
                try:
                    checkpoint = await runner.prepare_resume(
                        task, message, owner=owner, fence=start.fence, extensions=request.extensions
                    )
                except AnswerRejected as exc:
                    raise AnswerRejected(str(exc), task_id=task.id) from exc
                except NoCheckpoint as exc:
                    await settle(
                        runner,
                        task,
                        TaskState.FAILED,
                        owner=owner,
                        if_state=state,
                        fence=start.fence,
                        if_position=expected,
                    )
                    raise NoCheckpoint(_SAVED_TURN_GONE, task_id=task.id) from exc
                task.history.append(message.model_copy(update={"context_id": task.context_id}))
                # Compare-and-set out of the waiting state, under the lease: one answer wins.
                position = await settle(
                    runner,
                    task,
                    TaskState.SUBMITTED,
                    owner=owner,
                    if_state=state,
                    fence=start.fence,
                    if_position=expected,
                )
                await self._register_push(request, task.id, owner=owner)
                runner.launch_resumed(start, task, checkpoint, awaited=awaited)
        except (LeaseTaken, LeaseLost) as exc:
            if expected is not None:  # another answer is being taken: say where it got to
                await moved_past(self._tasks, task.id, expected, owner=owner, cause=exc)
            raise TaskMovedOn(task.id) from exc
        return TaskRecord(task=task, owner=owner, position=position)
