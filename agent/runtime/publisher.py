"""TurnPublisher: a turn's agent events become journal events; what a turn saves is saved here.

    Agent.run --AgentEvent--> TurnPublisher.on_event
        TextDelta             --> the answer's next chunk (AnswerStream, agent/runtime/chunks.py)
        ToolCallStarted/...   --> WORKING status update with a short progress message
        CheckpointReached     --> checkpoint (loop state + answer stream position), fenced
        TurnSuspended         --> INPUT_REQUIRED with the question; the lease is released
        TurnCompleted/Failed  --> final chunk, snapshot and terminal state
    every write: TaskStore.publish(JournalWrite(event [, snapshot], fence, chunks not yet
                 written)) -- retried while the store is down (and `on_store_unavailable` told)

State changes made outside a running turn (a cancel, an answer, a takeover's failure) go through
`record_state`, so there is one way a task's state is written. The scheduler (`TaskRunner`)
decides when turns run; this module turns what they do into stored facts."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import assert_never

from agent.events import (
    AgentEvent,
    ArtifactProduced,
    CheckpointReached,
    IterationStarted,
    LLMCallFinished,
    LLMCallStarted,
    MessagesCommitted,
    ReasoningDelta,
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
from agent.runtime.chunks import ANSWER_ARTIFACT_NAME, AnswerStream
from agent.runtime.messages import json_or_text, question_message, text_message
from agent.runtime.observer import TurnObserver, TurnReport
from agent.runtime.thoughts import thought_update
from agent.runtime.turn import Turn, TurnCheckpoint
from agent.runtime.usage import usage_metadata
from agent.tools.client import ClientTool
from agent.tracing import Carrier, carrier_of, trace_id_of
from stores.base import (
    CheckpointStore,
    Fence,
    JournalWrite,
    LeaseStore,
    MessageStore,
    StoreUnavailable,
    TaskStore,
)
from stores.codec import dump_task
from stores.ids import new_event_id, new_id
from stores.models import (
    Artifact,
    ArtifactUpdate,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskRecord,
    TaskState,
    TaskStatus,
)

__all__ = ["ANSWER_ARTIFACT_NAME", "TurnPublisher"]

logger = logging.getLogger(__name__)


class TurnPublisher:
    def __init__(
        self,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        checkpoints: CheckpointStore,
        leases: LeaseStore,
        observer: TurnObserver,
        on_store_unavailable: Callable[[str], None] | None = None,
    ) -> None:
        self._tasks = tasks
        self._messages = messages
        self._checkpoints = checkpoints
        self._leases = leases
        self.observer = observer
        self._unavailable = on_store_unavailable or observer.on_store_unavailable

    def turn(
        self,
        task: Task,
        *,
        owner: str,
        fence: Fence,
        artifact_id: str | None = None,
        chunks_sent: int = 0,
        resent: str | None = None,
        trace_carrier: Carrier | None = None,
        client_tools: list[ClientTool] | None = None,
        extensions: frozenset[str] = frozenset(),
    ) -> Turn:
        """A turn over `task` (the turn's own: it changes it as it goes), its answer streaming
        into the task store's chunk sink. A resumed turn goes on with its checkpoint's
        `artifact_id` and `chunks_sent`; `resent` is answer text to send again first."""
        sink = self._tasks.chunk_sink(task.id, owner=owner, fence=fence, retry=self._persist)
        answer = AnswerStream(
            sink,
            task_id=task.id,
            context_id=task.context_id,
            artifact_id=artifact_id or new_id(),
            chunks_sent=chunks_sent,
            held=resent,
        )
        return Turn(
            task=task,
            owner=owner,
            fence=fence,
            answer=answer,
            trace_carrier=trace_carrier or {},
            client_tools=client_tools or [],
            extensions=extensions,
        )

    async def on_text(self, turn: Turn, text: str) -> None:
        """A chunk of the answer (a TextDelta's text, or handed over by the loop directly)."""
        await turn.answer.text(text)

    async def on_event(self, turn: Turn, event: AgentEvent) -> None:
        # The cases in the order a turn meets them most (each is a type check until one holds).
        match event:
            case TextDelta(text=text):
                await self.on_text(turn, text)
            case ReasoningDelta(text=text):  # AGENT_REASONING=stream: a thought, no answer
                await turn.answer.flush()  # the journal keeps the order the model made them in
                await self._publish(turn, thought_update(turn.task, text), None)
            case TurnStarted() | IterationStarted() | MessagesCommitted():
                pass  # the loop's bookkeeping (the conversation is stored by the Agent)
            case CheckpointReached(saved=loop_state):
                await self._save_checkpoint(turn, loop_state)
            case LLMCallStarted():
                turn.calls.model_call_started = time.monotonic()
            case LLMCallFinished(usage=usage):
                turn.calls.model_calls += 1
                self.observer.on_model_call(
                    duration_s=turn.calls.model_call_ended(),
                    ok=True,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                    model=usage.model,
                    cost_usd=usage.cost_usd,
                    owner=turn.owner,
                )
            case TurnCompleted():
                await self._complete(turn, event)
            case ToolCallStarted(call_id=call_id, name=name, arguments=arguments):
                call: dict[str, object] = {"id": call_id, "name": name, "state": "started"}
                call["arguments"] = json_or_text(arguments)
                await self._progress(turn, f"calling {name}", metadata={"toolCall": call})
            case ToolCallFinished(call_id=call_id, name=name, ok=ok):
                turn.calls.tool_calls += 1
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
                await turn.answer.flush()
                turn.suspended = True
                await self.set_state(
                    turn, TaskState.INPUT_REQUIRED, message=question_message(turn.task, awaiting)
                )
                # Waiting for a human holds no process: the answer may arrive at any replica.
                turn.holds_lease = False
                with contextlib.suppress(StoreUnavailable):  # it lapses: the task is not active
                    await self._leases.release(
                        turn.task.id, owner=turn.owner, holder=turn.fence.holder
                    )
            case TurnFailed(reason=reason, rejected=rejected):
                if turn.calls.model_call_started is not None:  # the model call under way failed
                    turn.calls.model_calls += 1
                    self.observer.on_model_call(duration_s=turn.calls.model_call_ended(), ok=False)
                turn.task.metadata = {**(turn.task.metadata or {}), "usage": usage_metadata(event)}
                ended = TaskState.REJECTED if rejected else TaskState.FAILED
                await self.set_state(turn, ended, reason, metadata={"usage": usage_metadata(event)})
            case _:
                assert_never(event)

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
        if_position: int | None = None,
    ) -> int:
        """Record a state change made outside a running turn (a cancel, an answer, a takeover);
        a terminal state also drops what the turn held. `if_state` makes it a compare-and-set
        (StateConflict if the task has moved on), `if_position` one on the journal's last
        position (PositionConflict); `fence`, a write of a lease holder (LeaseLost if it no
        longer holds). Returns the event's journal position."""
        task.status = TaskStatus(
            state=state, message=text_message(task, text) if text is not None else None
        )
        update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=task.status)
        write = JournalWrite(
            update, snapshot=task, if_state=if_state, fence=fence, if_position=if_position
        )
        position = await self._tasks.publish(task.id, write, owner=owner)
        self.observer.on_state_changed(state.value)
        if state.is_terminal:
            await self.forget(task, owner=owner, fence=fence)
        return position

    async def forget(self, task: Task, *, owner: str, fence: Fence | None) -> None:
        """Drop what a turn that will never go on holds: its checkpoint, its claim and its lease
        (with a `fence`, only while they are that fence's: a turn whose lease was taken over
        frees neither its successor's context nor its lease). Tidying: with the store
        unavailable all is left, found stale later."""
        try:
            await self._checkpoints.delete(task.id, owner=owner)
            await self._messages.release(task.context_id, task.id, owner=owner, fence=fence)
            if fence is not None:
                await self._leases.release(task.id, owner=owner, holder=fence.holder)
        except StoreUnavailable as exc:
            logger.warning("task_id=<%s> | tidying left for later: %s", task.id, exc)

    async def end(self, turn: Turn) -> None:
        """The turn is over for good: release what it held."""
        turn.holds_lease = False
        await self.forget(turn.task, owner=turn.owner, fence=turn.fence)

    def report(self, turn: Turn, duration_s: float) -> None:
        """The turn's outcome line (INFO, no message text) and its metrics."""
        report = TurnReport(
            task_id=turn.task.id,
            context_id=turn.task.context_id,
            trace_id=trace_id_of(turn.trace),
            state=turn.task.status.state.value,
            duration_s=duration_s,
            model_calls=turn.calls.model_calls,
            tool_calls=turn.calls.tool_calls,
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
        answer = turn.answer
        await answer.flush()  # the checkpoint's chunk count must cover every chunk sent
        saved = TurnCheckpoint.saved(
            loop_state,
            artifact_id=answer.artifact_id,
            chunks_sent=answer.chunks_sent,
            trace_carrier=carrier_of(turn.trace) or turn.trace_carrier,
            extensions=turn.extensions,
        )
        await answer.written()
        await persistently(
            lambda: self._checkpoints.save(turn.task.id, saved, owner=turn.owner, fence=turn.fence),
            what="checkpoint save",
            on_unavailable=self._unavailable,
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
        chunks = turn.answer.take()
        await turn.answer.written()
        task_id, owner = turn.task.id, turn.owner
        write = JournalWrite(
            event,
            snapshot=snapshot,
            event_id=new_event_id(),  # the same for every retry: the store journals it once
            fence=turn.fence,
            snapshot_stored=snapshot_stored,
            chunks=chunks,
        )
        return await self._persist(lambda: self._tasks.publish(task_id, write, owner=owner))

    async def stop_writing(self, turn: Turn) -> None:
        """A turn stopped without ending (shutdown, a lost lease): chunks not yet written are
        left, as a crash would leave them (the next holder resumes from the checkpoint)."""
        await turn.answer.stop()

    def _persist(self, write: Callable[[], Awaitable[int]]) -> Awaitable[int]:
        """A journal write of the turn, retried while the store is unavailable."""
        return persistently(write, what="event publish", on_unavailable=self._unavailable)

    async def _complete(self, turn: Turn, event: TurnCompleted) -> None:
        task = turn.task
        task.metadata = {**(task.metadata or {}), "usage": usage_metadata(event)}
        # The hooks' metadata for the answer (an extension's, under its URI) goes on each
        # form of it a client may read: the artifact, the message, the final update.
        extra = event.metadata
        if event.answer or turn.answer.started:
            task.artifacts.append(
                Artifact(
                    artifact_id=turn.answer.artifact_id,
                    name=ANSWER_ARTIFACT_NAME,
                    parts=[Part(text=event.answer)],
                    metadata=dict(extra) if extra else None,
                )
            )
            answer = text_message(task, event.answer)
            answer.metadata = dict(extra) if extra else None
            task.history.append(answer)
            # No snapshot with it: the COMPLETED update right after records the task with the
            # answer (a reader of the snapshot before then follows the journal from its position).
            await turn.answer.finish()
        # else: no text at all (a tool's file was the answer): no empty answer artifact
        metadata = {**(extra or {}), "usage": usage_metadata(event)}
        await self.set_state(turn, TaskState.COMPLETED, metadata=metadata)

    async def _produce(self, turn: Turn, artifact: Artifact) -> None:
        """A tool's file or data, whole: one artifact update, and the snapshot that holds it."""
        await turn.answer.flush()
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
