"""TaskRunner: runs each task's turn in the background, independent of any HTTP connection.

    SendMessage / SendStreamingMessage
            |  start(task)
            v
    TaskRunner --(asyncio task per turn)--> Agent.run_turn --> AgentLoop --> LLM, tools
            |  every event: TaskStore.publish(event [, snapshot])
            v
    per-task journal (positions 1, 2, 3, ...) ----> readers: SSE streams, blocking sends,
                                                     subscribers (on any replica, with Redis)

Nothing reads events from the runner directly: a client that disconnects only stops its reader,
and the turn goes on. Answer text goes out as artifact chunks, each one journal entry; the task
snapshot is rewritten only at state changes and when the artifact is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

from opentelemetry.context import Context
from pydantic import BaseModel

from agent.agent import Agent
from agent.answers import read_answer
from agent.events import (
    AgentEvent,
    CheckpointReached,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnSuspended,
)
from agent.hooks import TurnContext
from agent.messages import question_message, text_message
from agent.retry import persistently
from agent.state import LoopState
from agent.tracing import Carrier, carrier_of, context_from, context_of, start_span
from stores.base import (
    CheckpointStore,
    LeaseStore,
    MessageStore,
    StoreUnavailable,
    TaskGone,
    TaskRef,
    TaskStore,
)
from stores.models import (
    Artifact,
    ArtifactUpdate,
    ChatMessage,
    Message,
    Part,
    StatusUpdate,
    Task,
    TaskState,
    TaskStatus,
)

logger = logging.getLogger(__name__)

ANSWER_ARTIFACT_NAME = "answer"


class LeaseTaken(Exception):
    """Another process holds the task's lease: it runs the turn."""


class NoCheckpoint(Exception):
    """A suspended or orphaned turn has no saved state to go on from."""


class TurnCheckpoint(BaseModel):
    """What a process needs to go on with a turn: the loop's state and the answer stream's."""

    loop: LoopState
    artifact_id: str
    chunks_sent: int
    trace_carrier: Carrier = {}
    """The turn's trace context, so the turn goes on in the same trace wherever it resumes."""


@dataclass(kw_only=True)
class _Turn:
    """The running state of one task's turn: its snapshot and the answer artifact being streamed."""

    task: Task
    owner: str
    artifact_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    chunks_sent: int = 0
    held_chunk: str | None = None  # one chunk of lookahead, so the last one can say lastChunk
    cancel_requested: bool = False
    suspended: bool = False
    finished: bool = False
    trace_carrier: Carrier = field(default_factory=dict)  # the parent: the client's, or saved
    trace: Context | None = None  # this process's `agent.turn` span, once started

    @property
    def context(self) -> TurnContext:
        return TurnContext(
            owner=self.owner,
            context_id=self.task.context_id,
            task_id=self.task.id,
            trace=self.trace,
        )


class TaskRunner:
    def __init__(
        self,
        agent: Agent,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        checkpoints: CheckpointStore,
        leases: LeaseStore,
        holder: str,
        lease_ttl_s: float = 15.0,
    ) -> None:
        self._agent = agent
        self._tasks = tasks
        self._messages = messages
        self._checkpoints = checkpoints
        self.leases = leases
        self.holder = holder
        self.lease_ttl_s = lease_ttl_s
        self._running: dict[tuple[str, str], tuple[asyncio.Task[None], _Turn]] = {}

    async def start(
        self,
        task: Task,
        user_message: Message,
        *,
        owner: str,
        trace_carrier: Carrier | None = None,
    ) -> None:
        """Take the task's lease and run a new turn for it in the background."""
        turn = _Turn(
            task=task.model_copy(deep=True), owner=owner, trace_carrier=trace_carrier or {}
        )
        await self._lease(turn)
        self._launch(turn, ChatMessage(role="user", content=user_message.text()))

    async def _lease(self, turn: _Turn) -> None:
        # Taken before the turn starts: a process that dies at any point leaves a lease to expire.
        if not await self.leases.acquire(
            turn.task.id, owner=turn.owner, holder=self.holder, ttl_s=self.lease_ttl_s
        ):
            raise LeaseTaken(f"task {turn.task.id!r} is already running elsewhere")

    async def prepare_resume(self, task: Task, message: Message, *, owner: str) -> TurnCheckpoint:
        """The checkpoint of a suspended turn with the client's answer applied.

        Raises AnswerRejected (the message does not answer the question) or NoCheckpoint.
        """
        saved = await self._checkpoints.load(task.id, owner=owner)
        if saved is None:
            raise NoCheckpoint(f"task {task.id!r} has no saved turn to resume")
        checkpoint = TurnCheckpoint.model_validate_json(saved)
        awaiting = checkpoint.loop.awaiting
        if awaiting is None:
            raise NoCheckpoint(f"task {task.id!r} is not waiting for an answer")
        answer = read_answer(awaiting, message)
        self._agent.loop.resume(
            checkpoint.loop, approved=answer.approved, answer=answer.text, reason=answer.reason
        )
        return checkpoint

    async def resume(
        self, task: Task, checkpoint: TurnCheckpoint, *, owner: str, recovered: bool = False
    ) -> None:
        """Go on with a turn from a checkpoint, in the background.

        `recovered`: the process that ran the turn died; clients may hold answer text that the
        checkpoint does not, so the answer so far is re-sent whole (append false) first.
        """
        turn = _Turn(
            task=task.model_copy(deep=True),
            owner=owner,
            artifact_id=checkpoint.artifact_id,
            chunks_sent=0 if recovered else checkpoint.chunks_sent,
            trace_carrier=checkpoint.trace_carrier,
        )
        if recovered and checkpoint.loop.answer:
            turn.held_chunk = "".join(checkpoint.loop.answer)
        await self._lease(turn)
        self._launch(turn, checkpoint.loop)

    def running(self) -> list[TaskRef]:
        return [TaskRef(owner, task_id) for owner, task_id in self._running]

    async def drop(self, task_id: str, *, owner: str) -> None:
        """Stop a turn here without recording anything: another process has taken it over."""
        running = self._running.get((owner, task_id))
        if running is not None:
            job, _ = running
            job.cancel()
            await asyncio.wait([job])

    def _launch(self, turn: _Turn, start: ChatMessage | LoopState) -> None:
        key = (turn.owner, turn.task.id)
        job = asyncio.create_task(self._run(turn, start), name=f"turn-{turn.task.id}")
        self._running[key] = (job, turn)
        job.add_done_callback(lambda _: self._running.pop(key, None))

    def is_running(self, task_id: str, *, owner: str) -> bool:
        return (owner, task_id) in self._running

    async def cancel(self, task_id: str, *, owner: str) -> bool:
        """Stop a turn running here, also mid-model-call; True if there was one."""
        running = self._running.get((owner, task_id))
        if running is None:
            return False
        job, turn = running
        if turn.finished or turn.cancel_requested:
            await asyncio.wait([job])
            return True
        turn.cancel_requested = True
        job.cancel()
        await asyncio.wait([job])
        if not turn.finished:
            # Canceled before its first step ran: the job never got to record the cancel itself.
            await self._set_state(turn, TaskState.CANCELED, "The task was canceled.")
            await self._end(turn)
        return True

    async def record_state(
        self,
        task: Task,
        state: TaskState,
        *,
        owner: str,
        text: str | None = None,
        if_state: TaskState | None = None,
    ) -> int:
        """Record a state change made outside a running turn (a cancel, an answer, a takeover);
        a terminal state also drops what the turn held. `if_state` makes it a compare-and-set
        (StateConflict if the task has moved on). Returns the event's journal position."""
        task.status = TaskStatus(
            state=state, message=text_message(task, text) if text is not None else None
        )
        update = StatusUpdate(task_id=task.id, context_id=task.context_id, status=task.status)
        position = await self._tasks.publish(
            task.id, update, owner=owner, snapshot=task, if_state=if_state
        )
        if state.is_terminal:
            await self.forget(task, owner=owner)
        return position

    async def forget(self, task: Task, *, owner: str) -> None:
        """Drop what a turn that will never go on holds (its claim, checkpoint and lease)."""
        await self._checkpoints.delete(task.id, owner=owner)
        await self._messages.release(task.context_id, task.id, owner=owner)
        await self.leases.release(task.id, owner=owner, holder=self.holder)

    async def shutdown(self) -> None:
        """Stop every running turn (the process is going away) and hand each one over.

        Nothing is recorded in the tasks: each lease is made to expire now, and another process
        takes the turn over from its checkpoint at its next look for expired leases.
        """
        running = list(self._running.values())
        for job, _ in running:
            job.cancel()
        if running:
            await asyncio.wait([job for job, _ in running])
        for _, turn in running:
            try:
                await self.leases.hand_over(turn.task.id, owner=turn.owner, holder=self.holder)
            except StoreUnavailable:
                logger.warning("task_id=<%s> | could not hand the turn over", turn.task.id)

    async def _run(self, turn: _Turn, start: ChatMessage | LoopState) -> None:
        task = turn.task
        span = start_span(
            "agent.turn",
            context_from(turn.trace_carrier),
            **{"a2a.task_id": task.id, "a2a.context_id": task.context_id},
        )
        turn.trace = context_of(span)
        try:
            await self._set_state(turn, TaskState.WORKING)
            if isinstance(start, LoopState):
                state = start
            else:
                state = await self._agent.start_turn(turn.context, start)
            async for event in self._agent.run(turn.context, state):
                await self._on_event(turn, event)
        except asyncio.CancelledError:
            if not turn.cancel_requested:
                turn.suspended = True  # shutdown or lease lost: all is left for the next holder
                raise
            await self._set_state(turn, TaskState.CANCELED, "The task was canceled.")
        except TaskGone:
            logger.warning("task_id=<%s> | the task expired during its turn; turn dropped", task.id)
        except Exception:
            logger.exception("task_id=<%s> | turn crashed", task.id)
            with contextlib.suppress(TaskGone):
                await self._set_state(turn, TaskState.FAILED, "The agent hit an internal error.")
        finally:
            turn.finished = True
            span.set_attribute("a2a.task_state", turn.task.status.state.value)
            span.end()
            if not turn.suspended:
                await self._end(turn)

    async def _end(self, turn: _Turn) -> None:
        await self.forget(turn.task, owner=turn.owner)

    async def _on_event(self, turn: _Turn, event: AgentEvent) -> None:
        match event:
            case TextDelta(text=text):
                if turn.held_chunk is not None:
                    await self._send_chunk(turn, turn.held_chunk, last=False)
                turn.held_chunk = text
            case ToolCallStarted(name=name):
                await self._progress(turn, f"calling {name}")
            case ToolCallFinished(name=name, ok=ok):
                await self._progress(turn, f"{name} finished" if ok else f"{name} failed")
            case CheckpointReached(state=state):
                await self._flush(turn)
                checkpoint = TurnCheckpoint(
                    loop=state,
                    artifact_id=turn.artifact_id,
                    chunks_sent=turn.chunks_sent,
                    trace_carrier=carrier_of(turn.trace) or turn.trace_carrier,
                )
                saved = checkpoint.model_dump_json()
                await persistently(
                    lambda: self._checkpoints.save(turn.task.id, saved, owner=turn.owner),
                    what="checkpoint save",
                )
            case TurnSuspended(awaiting=awaiting):
                await self._flush(turn)
                turn.suspended = True
                await self._set_state(
                    turn, TaskState.INPUT_REQUIRED, message=question_message(turn.task, awaiting)
                )
                # Waiting for a human holds no process: the answer may arrive at any replica.
                await self.leases.release(turn.task.id, owner=turn.owner, holder=self.holder)
            case TurnCompleted():
                await self._complete(turn, event)
            case TurnFailed(reason=reason):
                turn.task.metadata = {**(turn.task.metadata or {}), "usage": _usage(event)}
                await self._set_state(
                    turn, TaskState.FAILED, reason, metadata={"usage": _usage(event)}
                )
            case _:
                pass

    async def _publish(
        self, turn: _Turn, event: StatusUpdate | ArtifactUpdate, snapshot: Task | None
    ) -> None:
        task_id, owner = turn.task.id, turn.owner
        event_id = uuid.uuid4().hex  # the same for every retry: the store journals it once
        await persistently(
            lambda: self._tasks.publish(
                task_id, event, owner=owner, snapshot=snapshot, event_id=event_id
            ),
            what="event publish",
        )

    async def _flush(self, turn: _Turn) -> None:
        if turn.held_chunk is not None:
            await self._send_chunk(turn, turn.held_chunk, last=False)
            turn.held_chunk = None

    async def _send_chunk(
        self, turn: _Turn, text: str, *, last: bool, snapshot: Task | None = None
    ) -> None:
        task = turn.task
        update = ArtifactUpdate(
            task_id=task.id,
            context_id=task.context_id,
            artifact=Artifact(
                artifact_id=turn.artifact_id, name=ANSWER_ARTIFACT_NAME, parts=[Part(text=text)]
            ),
            append=turn.chunks_sent > 0,
            last_chunk=last,
        )
        turn.chunks_sent += 1
        await self._publish(turn, update, snapshot)

    async def _complete(self, turn: _Turn, event: TurnCompleted) -> None:
        task = turn.task
        task.artifacts.append(
            Artifact(
                artifact_id=turn.artifact_id,
                name=ANSWER_ARTIFACT_NAME,
                parts=[Part(text=event.answer)],
            )
        )
        task.history.append(text_message(task, event.answer))
        task.metadata = {**(task.metadata or {}), "usage": _usage(event)}
        final_chunk, turn.held_chunk = turn.held_chunk or "", None
        await self._send_chunk(turn, final_chunk, last=True, snapshot=task)
        await self._set_state(turn, TaskState.COMPLETED, metadata={"usage": _usage(event)})

    async def _progress(self, turn: _Turn, text: str) -> None:
        """A WORKING status update with a short message; not a state change, so no snapshot."""
        task = turn.task
        update = StatusUpdate(
            task_id=task.id,
            context_id=task.context_id,
            status=TaskStatus(state=TaskState.WORKING, message=text_message(task, text)),
        )
        await self._publish(turn, update, None)

    async def _set_state(
        self,
        turn: _Turn,
        state: TaskState,
        text: str | None = None,
        *,
        message: Message | None = None,
        metadata: dict[str, object] | None = None,
    ) -> None:
        task = turn.task
        if text is not None:
            message = text_message(task, text)
        task.status = TaskStatus(state=state, message=message)
        update = StatusUpdate(
            task_id=task.id, context_id=task.context_id, status=task.status, metadata=metadata
        )
        await self._publish(turn, update, task)
        logger.info("task_id=<%s>, state=<%s> | task state changed", task.id, state.value)


def _usage(event: TurnCompleted | TurnFailed) -> dict[str, int]:
    return {
        "promptTokens": event.usage.prompt_tokens,
        "completionTokens": event.usage.completion_tokens,
        "llmCalls": event.llm_calls,
        "toolCalls": event.tool_calls,
    }
