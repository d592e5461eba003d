"""RequestHandler: the A2A operations, transport-neutral.

    bindings (JSON-RPC, HTTP+JSON, 0.3) --parse--> RequestHandler --one call--> TaskLifecycle
                                                          |                   (agent/runtime/tasks)
                                                          +--> JournalFollower: streams, waits

It knows nothing of JSON-RPC or HTTP routes: bindings parse their wire format into these calls and
render the results. Here are the protocol's rules about a message (its role, media types, client
tools: errors that name a field of the request) and its limits (open streams, the drain); the
task's protocol under leases is the runtime's, whose refusals are mapped to A2A errors in
app/errors.py.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from agent.runtime.admission import Slots
from agent.runtime.drain import Drain
from agent.runtime.errors import TaskNotFound
from agent.runtime.journal import EntryStream, JournalFollower, LastEntries
from agent.runtime.tasks import TaskLifecycle, TaskRequest
from agent.tools.client import ClientToolsInvalid, parse_client_tools
from app.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    UnsupportedOperationError,
    runtime_refusals,
)
from stores.base import InvalidPageToken, TaskPage, TaskQuery, TaskStore
from stores.ids import new_id
from stores.models import (
    JournalEntry,
    Message,
    MessageReply,
    Part,
    PushConfig,
    Role,
    Task,
    TaskBytes,
    TaskRecord,
)

SUPPORTED_INPUT_MODES = ("text/plain", "application/json")
"""The media types a message part may carry (the card's `defaultInputModes`); others: -32005."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SendRequest:
    message: Message
    return_immediately: bool = False
    trace_carrier: dict[str, str] = field(default_factory=dict)
    """The client's W3C trace context (`traceparent`, `tracestate`): the turn joins its trace."""
    push_config: PushConfig | None = None
    """A webhook given with the message (its `task_id` is filled in once the task is known)."""
    extensions: frozenset[str] = frozenset()
    """The A2A extensions the request activated (the turn's hooks and tools read them)."""
    if_generation: int | None = None
    """A2A 1.1's `ifGenerationMatch` (None: none, or not served in 1.1)."""


DirectReplier = Callable[[str, Message], Awaitable[str | None]]
"""Owner and message -> the text of a direct reply (a Message, no task), or None."""


async def _only(entry: JournalEntry) -> AsyncGenerator[list[JournalEntry], None]:
    yield LastEntries([entry])


class RequestHandler:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        lifecycle: TaskLifecycle,
        journal: JournalFollower,
        streams: Slots,
        drain: Drain,
        reply_directly: DirectReplier | None = None,
    ) -> None:
        """`streams`: open streams and blocking sends (A2A_MAX_STREAMS); `tasks` is read for
        lists; everything else about a task goes through `lifecycle`."""
        self._tasks = tasks
        self._lifecycle = lifecycle
        self._journal = journal
        self._streams = streams
        self._drain = drain
        self._reply_directly = reply_directly

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
        with runtime_refusals():
            if request.return_immediately:
                return await self._lifecycle.start(_task_request(request), owner=owner)
            with self._streams.held(owner):
                return await self._lifecycle.start_and_wait(_task_request(request), owner=owner)

    async def stream_message(
        self, request: SendRequest, *, owner: str
    ) -> AsyncIterator[list[JournalEntry] | None]:
        """Validate and start the task now (errors surface before any event), then stream it."""

        async def start() -> AsyncGenerator[list[JournalEntry] | None, None]:
            if (reply := await self._direct_reply(request, owner=owner)) is not None:
                return _only(JournalEntry(position=1, event=MessageReply(message=reply)))
            # The turn may take the new task itself: the stream's first event is written from
            # the record's stored form, which the turn does not change.
            task_request = _task_request(request)
            record = await self._lifecycle.start(task_request, owner=owner, hand_over=True)
            return self._journal.snapshot_then_tail(record, owner=owner, at_interrupt=True)

        return await self._open_stream(start, owner=owner)

    async def get_record(self, task_id: str, *, owner: str) -> TaskRecord:
        """The task with the journal position its snapshot reflects (TaskNotFound if none)."""
        with runtime_refusals():
            return await self._lifecycle.get(task_id, owner=owner)

    async def get_task(self, task_id: str, *, owner: str) -> Task:
        return (await self.get_record(task_id, owner=owner)).task

    async def get_task_bytes(self, task_id: str, *, owner: str) -> TaskBytes:
        """The task's stored form and position, for writing it out as it is (TaskNotFound if
        none): read straight from the store, as nothing of the runtime is asked of a read."""
        with runtime_refusals():
            found = await self._tasks.get_bytes(task_id, owner=owner)
            if found is None:
                raise TaskNotFound(task_id)
            return found

    async def get_record_past(
        self, task_id: str, generation: int, *, owner: str, timeout_s: float
    ) -> TaskRecord:
        """A2A 1.1's long poll: the task once its generation is past `generation` (at once if it
        already is), or as it stands after `timeout_s`, or at once when this server drains.
        The wait holds a stream slot (A2A_MAX_STREAMS, and the principal's share of them)."""
        record = await self.get_record(task_id, owner=owner)
        if record.position > generation or timeout_s <= 0:
            return record
        self._drain.refuse_new_work()
        with self._streams.held(owner), runtime_refusals():
            past = await self._journal.until_past(record, generation, timeout_s=timeout_s)
            return past if past is not None else await self._lifecycle.get(task_id, owner=owner)

    async def list_tasks(self, query: TaskQuery, *, owner: str) -> TaskPage:
        try:
            return await self._tasks.list(query, owner=owner)
        except InvalidPageToken as exc:
            raise InvalidParamsError(str(exc)) from exc

    async def cancel_task(self, task_id: str, *, owner: str) -> Task:
        return (await self.cancel_record(task_id, owner=owner)).task

    async def cancel_record(self, task_id: str, *, owner: str) -> TaskRecord:
        """`cancel_task`, the canceled task with the journal position it is at."""
        with runtime_refusals():
            return await self._lifecycle.cancel(task_id, owner=owner)

    async def subscribe(
        self, task_id: str, *, owner: str, last_event_id: int | None = None
    ) -> AsyncIterator[list[JournalEntry] | None]:
        """The current task, then its live events; or, after a reconnect, just the missed events."""

        async def start() -> AsyncGenerator[list[JournalEntry] | None, None]:
            record = await self._lifecycle.get(task_id, owner=owner)
            if record.task.status.state.is_terminal and last_event_id is None:
                raise UnsupportedOperationError(
                    f"Task {task_id!r} is in terminal state {record.task.status.state.value}",
                    taskId=task_id,
                )
            if last_event_id is not None:
                return self._journal.tail(
                    task_id, owner=owner, after=last_event_id, at_interrupt=False
                )
            return self._journal.snapshot_then_tail(record, owner=owner, at_interrupt=False)

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
            with runtime_refusals():
                entries = await start()
        except BaseException:
            self._streams.give_back(owner)
            raise
        return EntryStream(entries, self._streams, owner)

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


def _task_request(request: SendRequest) -> TaskRequest:
    """The message checked against what this agent takes (InvalidParams, ContentTypeNotSupported:
    errors that name a field of the request), as the runtime takes it."""
    message = request.message
    if message.role != Role.USER:
        raise InvalidParamsError("message.role must be ROLE_USER")
    for part in message.parts:
        if part.media_type and part.media_type.split(";")[0].strip() not in SUPPORTED_INPUT_MODES:
            raise ContentTypeNotSupportedError(
                f"Media type {part.media_type!r} is not supported;"
                f" supported: {', '.join(SUPPORTED_INPUT_MODES)}",
                mediaType=part.media_type,
            )
    client_tools = []
    if not message.task_id:  # an answer's tools were declared with the task's first message
        try:
            client_tools = parse_client_tools(message.metadata)
        except ClientToolsInvalid as exc:
            raise InvalidParamsError(str(exc), field="message.metadata.clientTools") from exc
    return TaskRequest(
        message=message,
        client_tools=client_tools,
        trace_carrier=request.trace_carrier,
        push_config=request.push_config,
        extensions=request.extensions,
        if_generation=request.if_generation,
    )
