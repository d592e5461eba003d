"""TurnPublisher: a turn's agent events become journal events; what a turn saves is saved here.

    Agent.run --AgentEvent--> TurnPublisher.on_event
        TextDelta             --> artifact chunk (one held back, so the last can say lastChunk)
        ToolCallStarted/...   --> WORKING status update with a short progress message
        CheckpointReached     --> checkpoint (loop state + answer stream position), fenced
        TurnSuspended         --> INPUT_REQUIRED with the question; the lease is released
        TurnCompleted/Failed  --> final chunk, snapshot and terminal state
    every write: TaskStore.publish(event [, snapshot], fence) -- retried while the store is down

State changes made outside a running turn (a cancel, an answer, a takeover's failure) go through
`record_state`, so there is one way a task's state is written. The scheduler (`TaskRunner`)
decides when turns run; this module only turns what they do into stored facts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

import orjson
from opentelemetry.context import Context
from pydantic import BaseModel

from agent.context import TurnContext
from agent.events import (
    AgentEvent,
    ArtifactProduced,
    CheckpointReached,
    IterationStarted,
    LLMCallFinished,
    LLMCallStarted,
    MessagesCommitted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    TurnSuspended,
)
from agent.retry import persistently
from agent.runtime.messages import question_message, text_message
from agent.runtime.observer import TurnObserver, TurnReport
from agent.state import LoopState
from agent.tools.client import ClientTool
from agent.tracing import Carrier, carrier_of, trace_id_of
from stores.base import CheckpointStore, Fence, LeaseStore, MessageStore, TaskStore
from stores.codec import ArtifactChunks, dump_task
from stores.ids import new_id
from stores.models import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    Role,
    StatusUpdate,
    Task,
    TaskRecord,
    TaskState,
    TaskStatus,
)

logger = logging.getLogger(__name__)

ANSWER_ARTIFACT_NAME = "answer"
# Chunks a turn may run ahead of the store by before it waits for the write under way.
MAX_UNWRITTEN_CHUNKS = 256


class TurnCheckpoint(BaseModel):
    """What a process needs to go on with a turn: the loop's state and the answer stream's."""

    loop: LoopState
    artifact_id: str
    chunks_sent: int
    trace_carrier: Carrier = {}
    """The turn's trace context, so the turn goes on in the same trace wherever it resumes."""

    @staticmethod
    def saved(
        loop_state: str, *, artifact_id: str, chunks_sent: int, trace_carrier: Carrier
    ) -> str:
        """The stored form (`model_dump_json`) of a checkpoint of `loop_state`, itself already
        in its stored form (`CheckpointReached.saved`): written around it, not parsed again."""
        checkpoint = {
            "loop": orjson.Fragment(loop_state),
            "artifact_id": artifact_id,
            "chunks_sent": chunks_sent,
            "trace_carrier": trace_carrier,
        }
        return orjson.dumps(checkpoint).decode()


@dataclass(kw_only=True)
class Turn:
    """The running state of one task's turn: its snapshot and the answer artifact being streamed."""

    task: Task
    owner: str
    fence: Fence
    holds_lease: bool = True  # False once released (the turn suspended or ended) or lost
    artifact_id: str = field(default_factory=new_id)
    chunks_sent: int = 0
    held_chunk: str | None = None  # one chunk of lookahead, so the last one can say lastChunk
    chunk_form: ArtifactChunks | None = None  # the answer's chunks' stored form, once streaming
    # Chunks sent and not yet written, and the task writing them (see `_send_chunk`).
    unwritten: list[bytes] = field(default_factory=list)
    chunk_writer: asyncio.Task[None] | None = None
    write_error: Exception | None = None  # of an in-process write, raised at `written`
    settled: TaskRecord | None = None  # the snapshot that ended or paused the turn, once stored
    cancel_requested: bool = False
    suspended: bool = False
    finished: bool = False
    trace_carrier: Carrier = field(default_factory=dict)  # the parent: the client's, or saved
    trace: Context | None = None  # this process's `agent.turn` span, once started
    model_call_started: float | None = None  # monotonic time of the model call under way
    model_calls: int = 0
    tool_calls: int = 0
    # Waiters for the turn to be over here (TaskRunner.until_local_turn_ends), woken by the
    # turn's last step.
    end_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    client_tools: list[ClientTool] = field(default_factory=list)  # declared with the message

    @property
    def context(self) -> TurnContext:
        user = next((m for m in reversed(self.task.history) if m.role == Role.USER), None)
        return TurnContext(
            owner=self.owner,
            context_id=self.task.context_id,
            task_id=self.task.id,
            trace=self.trace,
            message_id=user.message_id if user is not None else None,
            call_depth=_call_depth(user),
        )


class TurnPublisher:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        checkpoints: CheckpointStore,
        leases: LeaseStore,
        observer: TurnObserver,
    ) -> None:
        self._tasks = tasks
        self._messages = messages
        self._checkpoints = checkpoints
        self._leases = leases
        self.observer = observer

    async def on_text(self, turn: Turn, text: str) -> None:
        """A chunk of the answer (a TextDelta's text, or handed over by the loop directly)."""
        if turn.held_chunk is not None:
            await self._send_chunk(turn, turn.held_chunk, last=False)
        turn.held_chunk = text

    async def on_event(self, turn: Turn, event: AgentEvent) -> None:
        # The cases in the order a turn meets them most (each is a type check until one holds).
        match event:
            case TextDelta(text=text):
                await self.on_text(turn, text)
            case TurnStarted() | IterationStarted() | MessagesCommitted():
                pass  # the loop's bookkeeping (the conversation is stored by the Agent)
            case CheckpointReached(saved=loop_state):
                await self._save_checkpoint(turn, loop_state)
            case LLMCallStarted():
                turn.model_call_started = time.monotonic()
            case LLMCallFinished(usage=usage):
                turn.model_calls += 1
                self.observer.on_model_call(
                    duration_s=_model_call_time(turn),
                    ok=True,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                )
            case TurnCompleted():
                await self._complete(turn, event)
            case ToolCallStarted(call_id=call_id, name=name, arguments=arguments):
                call: dict[str, object] = {"id": call_id, "name": name, "state": "started"}
                call["arguments"] = _json_or_text(arguments)
                await self._progress(turn, f"calling {name}", metadata={"toolCall": call})
            case ToolCallFinished(call_id=call_id, name=name, ok=ok):
                turn.tool_calls += 1
                self.observer.on_tool_call(name, ok=ok)
                done: dict[str, object] = {"id": call_id, "name": name, "state": "finished"}
                done |= {"ok": ok, "result": event.result}
                done["durationMs"] = round(event.duration_s * 1000)
                text = f"{name} finished" if ok else f"{name} failed"
                await self._progress(turn, text, metadata={"toolCall": done})
            case ToolProgress(name=name, text=text):
                await self._progress(turn, f"{name}: {text}")
            case ArtifactProduced(artifact=artifact):
                await self._produce(turn, artifact)
            case TurnSuspended(awaiting=awaiting):
                await self._flush(turn)
                turn.suspended = True
                await self.set_state(
                    turn, TaskState.INPUT_REQUIRED, message=question_message(turn.task, awaiting)
                )
                # Waiting for a human holds no process: the answer may arrive at any replica.
                turn.holds_lease = False
                await self._leases.release(turn.task.id, owner=turn.owner, holder=turn.fence.holder)
            case TurnFailed(reason=reason, rejected=rejected):
                if turn.model_call_started is not None:  # the model call under way failed
                    turn.model_calls += 1
                    self.observer.on_model_call(duration_s=_model_call_time(turn), ok=False)
                turn.task.metadata = {**(turn.task.metadata or {}), "usage": _usage(event)}
                ended = TaskState.REJECTED if rejected else TaskState.FAILED
                await self.set_state(turn, ended, reason, metadata={"usage": _usage(event)})
            case _:
                pass

    async def set_state(
        self,
        turn: Turn,
        state: TaskState,
        text: str | None = None,
        *,
        message: Message | None = None,
        metadata: dict[str, object] | None = None,
    ) -> None:
        """A state change of the running turn, with the snapshot, fenced and retried."""
        task = turn.task
        if text is not None:
            message = text_message(task, text)
        task.status = TaskStatus(state=state, message=message)
        update = StatusUpdate(
            task_id=task.id, context_id=task.context_id, status=task.status, metadata=metadata
        )
        # Serialized here (for the store too): a blocking send returns it, written as it is.
        stored = dump_task(task)
        position = await self._publish(turn, update, task, stored)
        if state.is_terminal or state.is_interrupted:
            # Taken by the store: a blocking send returns this rather than read it back.
            turn.settled = TaskRecord(task=task, owner=turn.owner, position=position, stored=stored)
        self.observer.on_state_changed(state.value)
        # DEBUG: a turn's outcome is its INFO line (`report`); the steps are in the journal.
        logger.debug("task_id=<%s>, state=<%s> | task state changed", task.id, state.value)

    async def record_state(
        self,
        task: Task,
        state: TaskState,
        *,
        owner: str,
        text: str | None = None,
        if_state: TaskState | None = None,
        fence: Fence | None = None,
    ) -> int:
        """Record a state change made outside a running turn (a cancel, an answer, a takeover);
        a terminal state also drops what the turn held. `if_state` makes it a compare-and-set
        (StateConflict if the task has moved on); `fence`, a write of a lease holder (LeaseLost
        if it no longer holds). Returns the event's journal position."""
        task.status = TaskStatus(
            state=state, message=text_message(task, text) if text is not None else None
        )
        update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=task.status)
        position = await self._tasks.publish(
            task.id, update, owner=owner, snapshot=task, if_state=if_state, fence=fence
        )
        self.observer.on_state_changed(state.value)
        if state.is_terminal:
            await self.forget(task, owner=owner, holder=fence.holder if fence else None)
        return position

    async def forget(self, task: Task, *, owner: str, holder: str | None) -> None:
        """Drop what a turn that will never go on holds (its claim, checkpoint and its lease, if
        `holder` holds it)."""
        await self._checkpoints.delete(task.id, owner=owner)
        await self._messages.release(task.context_id, task.id, owner=owner)
        if holder is not None:
            await self._leases.release(task.id, owner=owner, holder=holder)

    async def end(self, turn: Turn) -> None:
        """The turn is over for good: release what it held."""
        turn.holds_lease = False
        await self.forget(turn.task, owner=turn.owner, holder=turn.fence.holder)

    def report(self, turn: Turn, duration_s: float) -> None:
        """The turn's outcome line (INFO, no message text) and its metrics."""
        report = TurnReport(
            task_id=turn.task.id,
            context_id=turn.task.context_id,
            trace_id=trace_id_of(turn.trace),
            state=turn.task.status.state.value,
            duration_s=duration_s,
            model_calls=turn.model_calls,
            tool_calls=turn.tool_calls,
        )
        logger.info(
            "task_id=<%s>, context_id=<%s>, trace_id=<%s>, state=<%s>, duration_s=<%.3f>,"
            " model_calls=<%d>, tool_calls=<%d> | turn ended",
            report.task_id,
            report.context_id,
            report.trace_id,
            report.state,
            report.duration_s,
            report.model_calls,
            report.tool_calls,
        )
        self.observer.on_turn_ended(report)

    async def _save_checkpoint(self, turn: Turn, loop_state: str) -> None:
        await self._flush(turn)  # the checkpoint's chunk count must cover every chunk sent
        saved = TurnCheckpoint.saved(
            loop_state,
            artifact_id=turn.artifact_id,
            chunks_sent=turn.chunks_sent,
            trace_carrier=carrier_of(turn.trace) or turn.trace_carrier,
        )
        await self.written(turn)
        await persistently(
            lambda: self._checkpoints.save(turn.task.id, saved, owner=turn.owner, fence=turn.fence),
            what="checkpoint save",
            on_unavailable=self.observer.on_store_unavailable,
        )

    async def _publish(
        self,
        turn: Turn,
        event: StatusUpdate | ArtifactUpdate,
        snapshot: Task | None,
        snapshot_stored: bytes | None = None,
    ) -> int:
        # The journal keeps the order the turn made its events in: the chunks a write under way
        # has taken are written first; those sent since go with this event, in its write (an
        # answer's last chunk and its COMPLETED, say: one store round trip, not two).
        chunks: list[bytes] = []
        if not self._tasks.writes_in_process:
            chunks, turn.unwritten = turn.unwritten, []
        await self.written(turn)
        task_id, owner, fence = turn.task.id, turn.owner, turn.fence
        event_id = next(_EVENT_IDS)  # the same for every retry: the store journals it once
        return await persistently(
            lambda: self._tasks.publish(
                task_id,
                event,
                owner=owner,
                snapshot=snapshot,
                event_id=event_id,
                fence=fence,
                snapshot_stored=snapshot_stored,
                chunks=chunks,
            ),
            what="event publish",
            on_unavailable=self.observer.on_store_unavailable,
        )

    async def written(self, turn: Turn) -> None:
        """Wait until every chunk sent is in the journal; raises what writing them raised."""
        if self._tasks.writes_in_process:
            self._write_in_process(turn)
            error, turn.write_error = turn.write_error, None
            if error is not None:
                raise error
            return
        writer = turn.chunk_writer
        if writer is None:
            return
        try:
            await writer
        except asyncio.CancelledError:
            # The turn itself cancelled while it waited (the write went with it: the chunks are
            # dropped, as a canceled turn's next ones would be), or the write alone was stopped.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            if writer.done() and turn.chunk_writer is writer:
                turn.chunk_writer = None

    async def stop_writing(self, turn: Turn) -> None:
        """A turn stopped without ending (shutdown, a lost lease): chunks not yet written are
        left, as a crash would leave them (the next holder resumes from the checkpoint)."""
        writer, turn.chunk_writer = turn.chunk_writer, None
        turn.unwritten = []
        if writer is None:
            return
        if not writer.done():
            writer.cancel()
            await asyncio.wait([writer])
        if not writer.cancelled():
            writer.exception()  # seen: a lost lease, say, is the turn's end already

    def _write_in_process(self, turn: Turn) -> None:
        """Write the chunks sent to a store that `writes_in_process`; what it raises is kept for
        the turn's next `written` (this also runs as a callback, where it would be lost)."""
        batch, turn.unwritten = turn.unwritten, []
        if not batch or turn.write_error is not None:
            return  # after an error the turn stops at its next event: nothing more is written
        try:
            self._tasks.publish_chunks_now(turn.task.id, batch, owner=turn.owner, fence=turn.fence)
        except Exception as exc:  # whatever it is, the turn raises it
            turn.write_error = exc

    async def _publish_chunks(self, turn: Turn, batch: list[bytes]) -> None:
        task_id, owner, fence = turn.task.id, turn.owner, turn.fence
        event_id = next(_EVENT_IDS)  # the batch's, the same for every retry
        await persistently(
            lambda: self._tasks.publish_chunks(
                task_id, batch, owner=owner, event_id=event_id, fence=fence
            ),
            what="event publish",
            on_unavailable=self.observer.on_store_unavailable,
        )

    async def _write_chunks(self, turn: Turn) -> None:
        """Write the chunks sent, in order, each batch in one store call, until none is left."""
        try:
            while turn.unwritten:
                batch, turn.unwritten = turn.unwritten, []
                await self._publish_chunks(turn, batch)
        except BaseException:
            turn.unwritten = []  # the turn stops: `written` raises this to it
            raise
        turn.chunk_writer = None

    async def _flush(self, turn: Turn) -> None:
        if turn.held_chunk is not None:
            await self._send_chunk(turn, turn.held_chunk, last=False)
            turn.held_chunk = None

    async def _send_chunk(self, turn: Turn, text: str, *, last: bool) -> None:
        if turn.chunk_form is None:
            task = turn.task
            turn.chunk_form = ArtifactChunks(
                task_id=task.id,
                context_id=task.context_id,
                artifact_id=turn.artifact_id,
                name=ANSWER_ARTIFACT_NAME,
            )
        chunk = turn.chunk_form.render(text, append=turn.chunks_sent > 0, last=last)
        turn.chunks_sent += 1
        turn.unwritten.append(chunk)
        if self._tasks.writes_in_process:
            # Nothing to wait for, so no task writing behind the turn: the chunks of a burst go
            # in one write when the turn's step ends (or before its next event, `written`), and
            # by the time a stream's reader wakes the journal holds them all.
            if turn.write_error is not None:
                await self.written(turn)  # raises it: the turn stops
            elif len(turn.unwritten) == 1:
                asyncio.get_running_loop().call_soon(self._write_in_process, turn)
            return
        # Written behind the turn: the chunks that come while a write is out go together in the
        # next one (a model that streams faster than the store writes costs one write per burst,
        # not one per chunk; a slow one, one per chunk as before). Every other event, checkpoint
        # and the turn's end wait for them (`written`), so the journal keeps the turn's order.
        writer = turn.chunk_writer
        if writer is None:
            turn.chunk_writer = asyncio.create_task(self._write_chunks(turn))
        elif writer.done() or len(turn.unwritten) >= MAX_UNWRITTEN_CHUNKS:
            await self.written(turn)  # its error, or back-pressure from a slow store

    async def _complete(self, turn: Turn, event: TurnCompleted) -> None:
        task = turn.task
        task.metadata = {**(task.metadata or {}), "usage": _usage(event)}
        if event.answer or turn.chunks_sent or turn.held_chunk:
            task.artifacts.append(
                Artifact(
                    artifact_id=turn.artifact_id,
                    name=ANSWER_ARTIFACT_NAME,
                    parts=[Part(text=event.answer)],
                )
            )
            task.history.append(text_message(task, event.answer))
            final_chunk, turn.held_chunk = turn.held_chunk or "", None
            # No snapshot with it: the COMPLETED update right after records the task with the
            # answer (a reader of the snapshot before then follows the journal from its position).
            await self._send_chunk(turn, final_chunk, last=True)
        # else: no text at all (a tool's file was the answer): no empty answer artifact
        await self.set_state(turn, TaskState.COMPLETED, metadata={"usage": _usage(event)})

    async def _produce(self, turn: Turn, artifact: Artifact) -> None:
        """A tool's file or data, whole: one artifact update, and the snapshot that holds it."""
        await self._flush(turn)
        task = turn.task
        task.artifacts.append(artifact)
        update = ArtifactUpdate(
            task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
        )
        await self._publish(turn, update, task)

    async def _progress(
        self, turn: Turn, text: str, *, metadata: dict[str, object] | None = None
    ) -> None:
        """A WORKING status update with a short message (and, for a tool call, its details in
        `metadata.toolCall`); not a state change, so no snapshot."""
        task = turn.task
        update = StatusUpdate(
            task_id=task.id,
            context_id=task.context_id,
            status=TaskStatus(state=TaskState.WORKING, message=text_message(task, text)),
            metadata=metadata,
        )
        await self._publish(turn, update, None)


# Unique across processes (a random prefix) and cheap (a counter): one is drawn per event, and
# uuid4's system call per event showed in the profile.
_EVENT_ID_PREFIX = uuid.uuid4().hex
_EVENT_IDS = (f"{_EVENT_ID_PREFIX}-{n}" for n in itertools.count())


def _json_or_text(arguments: str) -> object:
    """A call's arguments as JSON when they parse (what the model wrote, else)."""
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments


def _call_depth(message: Message | None) -> int:
    """The depth an incoming message says it was sent at (metadata `a2aCallDepth`; 0 if none)."""
    depth = (message.metadata or {}).get("a2aCallDepth") if message is not None else None
    return depth if isinstance(depth, int) and depth >= 0 else 0


def _model_call_time(turn: Turn) -> float:
    started, turn.model_call_started = turn.model_call_started, None
    return time.monotonic() - started if started is not None else 0.0


def _usage(event: TurnCompleted | TurnFailed) -> dict[str, int]:
    return {
        "promptTokens": event.usage.prompt_tokens,
        "completionTokens": event.usage.completion_tokens,
        "llmCalls": event.llm_calls,
        "toolCalls": event.tool_calls,
    }
