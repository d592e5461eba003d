"""RequestHandler: the A2A operations, transport-neutral.

It knows nothing of JSON-RPC or HTTP routes: bindings parse their wire format into these calls and
render the results. Streams are journal readers: a stream is the task snapshot followed by the
journal entries after the position that snapshot reflects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from agent.runtime.admission import Slots
from agent.runtime.answers import AnswerRejected
from agent.runtime.drain import DRAINED, Drain
from agent.runtime.runner import LeaseTaken, NoCheckpoint, TaskRunner
from agent.tools.client import ClientToolsInvalid, parse_client_tools
from app.a2a.sse import LastEntries
from app.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from stores.base import (
    Fence,
    InvalidPageToken,
    LeaseLost,
    MessageStore,
    PushConfigStore,
    StateConflict,
    StoreUnavailable,
    TaskPage,
    TaskQuery,
    TaskStore,
    TaskUnreadable,
)
from stores.codec import dump_task, snapshot_event, stored_entry
from stores.ids import new_id
from stores.models import (
    JournalEntry,
    Message,
    MessageReply,
    Part,
    PushConfig,
    Role,
    Task,
    TaskRecord,
    TaskSnapshot,
    TaskState,
    TaskStatus,
)

SUPPORTED_INPUT_MODES = ("text/plain", "application/json")
_CANCELED = "The task was canceled."


def _moved_on(task_id: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"Task {task_id!r} has already moved on (another message was taken first)",
        taskId=task_id,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SendRequest:
    message: Message
    return_immediately: bool = False
    trace_carrier: dict[str, str] = field(default_factory=dict)
    """The client's W3C trace context (`traceparent`, `tracestate`): the turn joins its trace."""
    push_config: PushConfig | None = None
    """A webhook given with the message (its `task_id` is filled in once the task is known)."""


def ends_stream(state: TaskState | None, *, at_interrupt: bool) -> bool:
    """Whether an event reporting `state` (None: an artifact update) is a stream's last."""
    return state is not None and (state.is_terminal or (at_interrupt and state.is_interrupted))


DirectReplier = Callable[[str, Message], Awaitable[str | None]]
"""Owner and message -> the text of a direct reply (a Message, no task), or None."""


async def _only(entry: JournalEntry) -> AsyncGenerator[list[JournalEntry], None]:
    yield LastEntries([entry])


class RequestHandler:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        runner: TaskRunner,
        read_block_s: float = 15.0,
        streams: Slots | None = None,
        drain: Drain | None = None,
        reply_directly: DirectReplier | None = None,
        pushes: PushConfigStore | None = None,
    ) -> None:
        self._tasks = tasks
        self._messages = messages
        self._runner = runner
        self._read_block_s = read_block_s
        self._streams = streams or Slots(1000, what="open streams")
        self._drain = drain or Drain()
        self._reply_directly = reply_directly
        self._pushes = pushes
        self.on_state_recorded: Callable[[str, str], None] = lambda task_id, owner: None
        """Called after a state change made outside a turn (a cancel): push delivery sends it."""

    async def _direct_reply(self, request: SendRequest, *, owner: str) -> Message | None:
        """The Message that answers a new message without a task, when a hook gives one."""
        message = request.message
        if self._reply_directly is None or message.task_id is not None:
            return None
        text = await self._reply_directly(owner, message)
        if text is None:
            return None
        return Message(
            message_id=new_id(),
            role=Role.AGENT,
            parts=[Part(text=text)],
            context_id=message.context_id or new_id(),
        )

    async def send_message(self, request: SendRequest, *, owner: str) -> TaskRecord | Message:
        """Start (or continue) a task; unless asked to return at once, wait for it to settle.
        The task comes in its record: its stored form, when known, is the reply's JSON, written
        as it is.

        The wait holds a stream slot for its whole life (beyond A2A_MAX_STREAMS the request is
        refused before anything is written). A drain cuts it short: the client gets the task as
        it stands (its id, at least), and another server finishes the turn.
        """
        self._drain.refuse_new_work()
        if (reply := await self._direct_reply(request, owner=owner)) is not None:
            return reply
        if request.return_immediately:
            return await self._begin(request, owner=owner)
        with self._streams.held(owner):
            # The turn may take the new task itself: nothing here reads it while the turn runs.
            record = await self._begin(request, owner=owner, hand_over=True, awaited=True)
            settled = await self._until_settled(
                record.task.id, owner=owner, after=record.position, until_drain=True
            )
        if settled is None:
            try:
                settled = await self._tasks.get(record.task.id, owner=owner)
            except StoreUnavailable:
                if not self._drain.started:
                    raise
                # on the way out: what we know beats an error without the task id
        if settled is None:  # the turn has the task: its stored form is no longer its own
            return TaskRecord(task=record.task, owner=owner, position=record.position)
        return settled

    async def stream_message(
        self, request: SendRequest, *, owner: str
    ) -> AsyncIterator[list[JournalEntry] | None]:
        """Validate and start the task now (errors surface before any event), then stream it."""

        async def start() -> AsyncGenerator[list[JournalEntry] | None, None]:
            if (reply := await self._direct_reply(request, owner=owner)) is not None:
                return _only(JournalEntry(position=1, event=MessageReply(message=reply)))
            # The turn may take the new task itself: the stream's first event is written from
            # the record's stored form, which the turn does not change.
            record = await self._begin(request, owner=owner, hand_over=True)
            return self._snapshot_then_tail(record, owner=owner, at_interrupt=True)

        return await self._open_stream(start, owner=owner)

    async def get_record(self, task_id: str, *, owner: str) -> TaskRecord:
        """The task with the journal position its snapshot reflects (TaskNotFound if none)."""
        return await self._require(task_id, owner=owner)

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
        self.on_state_recorded(task_id, owner)
        if settled.task.status.state != TaskState.CANCELED:
            raise TaskNotCancelableError(
                f"Task {task_id!r} finished ({settled.task.status.state.value})"
                " before it could be canceled",
                taskId=task_id,
            )
        return settled.task

    async def _cancel_elsewhere(self, record: TaskRecord, *, owner: str) -> None:
        """Cancel a task whose turn does not run in this process."""
        task, runner = record.task, self._runner
        state = task.status.state
        if state.is_interrupted:
            # Nobody runs it (waiting for input): record the cancel here, unless an answer has
            # just moved it on (then it runs somewhere: ask that process below).
            saved = await runner.saved_turn(task.id, owner=owner)  # the cancel deletes it
            with contextlib.suppress(StateConflict):
                await runner.publisher.record_state(
                    task, TaskState.CANCELED, owner=owner, text=_CANCELED, if_state=state
                )
                if saved is not None:
                    runner.abandon(saved)
                return
        fence = await runner.take_lease(task.id, owner=owner)
        if fence is not None:
            # Its process died (or it just ended): record the cancel under our lease, but only
            # over the state we saw; a task that finished meanwhile stays finished.
            try:
                await runner.publisher.record_state(
                    task,
                    TaskState.CANCELED,
                    owner=owner,
                    text=_CANCELED,
                    if_state=state,
                    fence=fence,
                )
            except (StateConflict, LeaseLost):
                await runner.leases.release(task.id, owner=owner, holder=fence.holder)
            return
        # Another process runs it: it hears the request at once and records the cancel itself.
        await runner.leases.request_cancel(task.id, owner=owner)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2 * runner.lease_ttl_s):
                await self._until_settled(task.id, owner=owner, after=record.position)

    async def subscribe(
        self, task_id: str, *, owner: str, last_event_id: int | None = None
    ) -> AsyncIterator[list[JournalEntry] | None]:
        """The current task, then its live events; or, after a reconnect, just the missed events."""

        async def start() -> AsyncGenerator[list[JournalEntry] | None, None]:
            record = await self._require(task_id, owner=owner)
            if record.task.status.state.is_terminal and last_event_id is None:
                raise UnsupportedOperationError(
                    f"Task {task_id!r} is in terminal state {record.task.status.state.value}",
                    taskId=task_id,
                )
            if last_event_id is not None:
                return self._tail(task_id, owner=owner, after=last_event_id, at_interrupt=False)
            return self._snapshot_then_tail(record, owner=owner, at_interrupt=False)

        return await self._open_stream(start, owner=owner)

    async def _open_stream(
        self,
        start: Callable[[], Awaitable[AsyncGenerator[list[JournalEntry] | None, None]]],
        *,
        owner: str,
    ) -> EntryStream:
        """Admit a stream (refused while draining or beyond A2A_MAX_STREAMS, before `start`
        runs, so before anything is written), then start it; it holds its slot until closed."""
        self._drain.refuse_new_work()
        self._streams.take(owner)
        try:
            entries = await start()
        except BaseException:
            self._streams.give_back(owner)
            raise
        return EntryStream(entries, self._streams, owner)

    async def _require(self, task_id: str, *, owner: str) -> TaskRecord:
        record = await self._tasks.get(task_id, owner=owner)
        if record is None:
            raise TaskNotFoundError(f"Task {task_id!r} not found", taskId=task_id)
        return record

    async def _begin(
        self, request: SendRequest, *, owner: str, hand_over: bool = False, awaited: bool = False
    ) -> TaskRecord:
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
            return await self._continue(request, owner=owner, awaited=awaited)
        try:
            client_tools = parse_client_tools(message.metadata)
        except ClientToolsInvalid as exc:
            raise InvalidParamsError(str(exc), field="message.metadata.clientTools") from exc
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
            holder = await self._claim(context_id, task_id, owner=owner)
            if holder is not None:
                raise UnsupportedOperationError(
                    f"Context {context_id!r} already has a task in progress ({holder!r});"
                    " wait for it to finish, or cancel it, before sending another message",
                    contextId=context_id,
                    taskId=holder,
                )
            try:
                record = await self._tasks.create(task, owner=owner)
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
                    client_tools=client_tools,
                    # Push delivery looks for configs (a store read) only if there can be one.
                    followed=request.push_config is not None and self._pushes is not None,
                )
            except BaseException:
                with contextlib.suppress(StoreUnavailable):
                    await self._messages.release(context_id, task_id, owner=owner)
                raise
        return record

    async def _register_push(self, request: SendRequest, task_id: str, *, owner: str) -> None:
        """The webhook given with the message, stored before the turn starts: its first event
        is delivered too."""
        if request.push_config is None or self._pushes is None:
            return
        config = request.push_config.model_copy(update={"task_id": task_id})
        await self._pushes.put(config, owner=owner)

    async def _claim(self, context_id: str, task_id: str, *, owner: str) -> str | None:
        """Claim the context for a new task: None if we have it, else the task that holds it.

        A claim is stale when its task has ended, or when its task does not exist and holds no
        lease (a task takes its lease before its claim, and is created only after both): then it
        is replaced by compare-and-set, so of the requests that found it stale, one wins.
        """
        holder = await self._messages.claim(context_id, task_id, owner=owner)
        if holder is None:
            return None
        if await self._holds_context(holder, owner=owner):
            return holder
        if await self._messages.replace_claim(context_id, holder, task_id, owner=owner):
            return None
        return await self._messages.claim(context_id, task_id, owner=owner)

    async def _holds_context(self, task_id: str, *, owner: str) -> bool:
        """Whether the task holding a context's claim is still at work there (or about to be)."""
        try:
            record = await self._tasks.get(task_id, owner=owner)
        except TaskUnreadable:
            return False  # it can never run again: its claim is stale
        if record is not None:
            return not record.task.status.state.is_terminal
        return await self._runner.leases.is_held(task_id, owner=owner)

    async def _continue(
        self, request: SendRequest, *, owner: str, awaited: bool = False
    ) -> TaskRecord:
        """A message on an existing task: only an interrupted task (waiting for input) takes one."""
        message = request.message
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
            async with self._runner.starting(task.id, owner=owner) as start:
                assert start.fence is not None
                try:
                    checkpoint = await self._runner.prepare_resume(
                        task, message, owner=owner, fence=start.fence
                    )
                except AnswerRejected as exc:
                    raise InvalidParamsError(str(exc), taskId=task.id) from exc
                except NoCheckpoint as exc:
                    reason = "The task's saved turn is gone, so it cannot go on; start a new task."
                    await self._settle(
                        task, TaskState.FAILED, owner=owner, if_state=state, fence=start.fence
                    )
                    raise UnsupportedOperationError(reason, taskId=task.id) from exc
                task.history.append(message.model_copy(update={"context_id": task.context_id}))
                # Compare-and-set out of the waiting state, under the lease: one answer wins.
                position = await self._settle(
                    task, TaskState.SUBMITTED, owner=owner, if_state=state, fence=start.fence
                )
                await self._register_push(request, task.id, owner=owner)
                self._runner.launch_resumed(start, task, checkpoint, awaited=awaited)
        except (LeaseTaken, LeaseLost) as exc:
            raise _moved_on(task.id) from exc
        return TaskRecord(task=task, owner=owner, position=position)

    async def _settle(
        self,
        task: Task,
        state: TaskState,
        *,
        owner: str,
        if_state: TaskState | None = None,
        fence: Fence | None = None,
    ) -> int:
        """Record a state change made here rather than by a running turn."""
        try:
            return await self._runner.publisher.record_state(
                task, state, owner=owner, if_state=if_state, fence=fence
            )
        except StateConflict as exc:
            raise _moved_on(task.id) from exc

    async def _until_settled(
        self, task_id: str, *, owner: str, after: int, until_drain: bool = False
    ) -> TaskRecord | None:
        """Wait until the task ends or waits for input (read from the journal, not polled);
        with `until_drain`, or until this server starts draining.

        A turn running in this process is waited for without reading its journal (a blocking
        send would otherwise cost a store read per event); once it is over here, the snapshot it
        recorded last says how it ended (and is returned), or the journal is followed if it went
        on elsewhere.
        None when the wait ended otherwise (drained, or the journal said it settled)."""
        local_turn = self._runner.until_local_turn_ends(task_id, owner=owner)
        ran_here = await (self._drain.unless_drained(local_turn) if until_drain else local_turn)
        if ran_here is DRAINED:
            return None
        if ran_here is not None:
            if ran_here.settled is not None:
                return ran_here.settled  # as the store took it: not read back
            snapshot = await self._tasks.get(task_id, owner=owner)
            if snapshot is None or ends_stream(snapshot.task.status.state, at_interrupt=True):
                return snapshot
            after = max(after, snapshot.position)  # it went on elsewhere: follow it from here
        async for _ in self._tail(
            task_id, owner=owner, after=after, at_interrupt=True, until_drain=until_drain
        ):
            pass
        return None

    def _snapshot_then_tail(
        self, record: TaskRecord, *, owner: str, at_interrupt: bool
    ) -> AsyncGenerator[list[JournalEntry] | None, None]:
        """The task as it stands, then its events. The snapshot says the task goes on, so the
        first read may wait (it answers at once if entries came meanwhile): one store call per
        new subscriber, not three."""
        if record.stored is None:
            snapshot = JournalEntry(position=record.position, event=TaskSnapshot(task=record.task))
        else:  # written as it is: not parsed, nor serialized again
            snapshot = stored_entry(record.position, snapshot_event(record.stored))
        return self._tail(
            record.task.id,
            owner=owner,
            after=record.position,
            at_interrupt=at_interrupt,
            wait_first=True,
            first=snapshot,
        )

    async def _tail(
        self,
        task_id: str,
        *,
        owner: str,
        after: int,
        at_interrupt: bool,
        until_drain: bool = True,
        wait_first: bool = False,
        first: JournalEntry | None = None,
    ) -> AsyncGenerator[list[JournalEntry] | None, None]:
        """Journal entries after `after` until the task ends (or pauses, with `at_interrupt`),
        after `first` when given (a snapshot: it ends the stream too if its task has ended);
        None after each wait of `read_block_s` that brought nothing (an SSE stream sends a
        keep-alive comment then: no timer of its own per stream).

        Entries come in the lists the store reads them in (up to the stream's last): a stream
        writes what one read brought in one write, not one per event.

        With `until_drain` it also ends, after the entries it has passed on, when this server
        starts draining: a blocked read is given up at once. Unless `wait_first` (the caller knows
        the task was going on at `after`), the first read does not wait: a reader already at the
        end of a task that has ended must not hang.
        """
        # `first` is yielded here, not by a generator around this one: one frame fewer held by
        # every idle stream.
        if first is not None:
            if ends_stream(first.state, at_interrupt=at_interrupt):
                yield LastEntries([first])
                return
            yield [first]
            del first  # an idle stream holds no copy of the task
        block_s = self._read_block_s if wait_first else 0.0
        while True:
            if until_drain and self._drain.started:
                return
            read = self._tasks.read(task_id, owner=owner, after=after, timeout_s=block_s)
            entries = await (self._drain.unless_drained(read) if until_drain and block_s else read)
            if entries is DRAINED:
                return
            if not entries:
                if await self._over_meanwhile(
                    task_id, owner=owner, after=after, at_interrupt=at_interrupt
                ):
                    return
                if block_s:
                    yield None  # a whole wait without news: the stream's keep-alive
                block_s = self._read_block_s
                continue
            for n, entry in enumerate(entries):
                if ends_stream(entry.state, at_interrupt=at_interrupt):
                    yield LastEntries(entries[: n + 1])
                    return
            after = entries[-1].position
            yield entries
            del entry, entries  # a reader waiting for more holds nothing it has passed on

    async def _over_meanwhile(
        self, task_id: str, *, owner: str, after: int, at_interrupt: bool
    ) -> bool:
        """Whether a reader at `after` that found nothing new is done: the task expired, or its
        snapshot (no newer than `after`) says it ended."""
        record = await self._tasks.get(task_id, owner=owner)
        if record is None:
            return True  # expired while we waited
        return record.position <= after and ends_stream(
            record.task.status.state, at_interrupt=at_interrupt
        )


class EntryStream:
    """The journal entries of one stream, holding one of `slots` (the owner's) until it is
    closed (the SSE response closes it however it ends). Close it even if it was never
    iterated: an async generator that never started runs no `finally` of its own."""

    __slots__ = ("_entries", "_owner", "_slots")

    def __init__(
        self, entries: AsyncGenerator[list[JournalEntry] | None, None], slots: Slots, owner: str
    ) -> None:
        self._entries = entries
        self._slots: Slots | None = slots
        self._owner = owner

    def __aiter__(self) -> EntryStream:
        return self

    def __anext__(self) -> Awaitable[list[JournalEntry] | None]:
        # The generator's own step, not a coroutine around it: every idle stream waits in it.
        return self._entries.__anext__()

    async def aclose(self) -> None:
        try:
            await self._entries.aclose()
        finally:
            slots, self._slots = self._slots, None
            if slots is not None:
                slots.give_back(self._owner)
