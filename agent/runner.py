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

A turn starts inside `starting()`: a running-turn slot of this replica is reserved (or the request
is refused with Overloaded before anything is written) and the task's lease is taken before the
first write, so no task is ever active without a lease. Every write of a turn (journal entries,
checkpoints) carries the lease's fence (holder, epoch): once another process has taken the turn
over, the store refuses the write (LeaseLost) and the turn stops here without recording anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from opentelemetry.context import Context
from pydantic import BaseModel

from agent.admission import Slots
from agent.agent import Agent
from agent.answers import read_answer
from agent.events import (
    AgentEvent,
    CheckpointReached,
    LLMCallFinished,
    LLMCallStarted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnSuspended,
)
from agent.hooks import TurnContext
from agent.messages import question_message, text_message
from agent.observer import TurnObserver, TurnReport
from agent.retry import persistently
from agent.state import LoopState
from agent.tracing import Carrier, carrier_of, context_from, context_of, start_span, trace_id_of
from stores.base import (
    CheckpointStore,
    Fence,
    LeaseLost,
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
class TurnStart:
    """A turn about to start here: a reserved slot and the task's lease (see `starting`)."""

    task_id: str
    owner: str
    fence: Fence | None = None
    launched: bool = False


@dataclass(kw_only=True)
class _Turn:
    """The running state of one task's turn: its snapshot and the answer artifact being streamed."""

    task: Task
    owner: str
    fence: Fence
    holds_lease: bool = True  # False once released (the turn suspended or ended) or lost
    artifact_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    chunks_sent: int = 0
    held_chunk: str | None = None  # one chunk of lookahead, so the last one can say lastChunk
    cancel_requested: bool = False
    suspended: bool = False
    finished: bool = False
    trace_carrier: Carrier = field(default_factory=dict)  # the parent: the client's, or saved
    trace: Context | None = None  # this process's `agent.turn` span, once started
    model_call_started: float | None = None  # monotonic time of the model call under way
    model_calls: int = 0
    tool_calls: int = 0

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
        max_running_turns: int = 64,
        max_turns_per_owner: int | None = None,
        observer: TurnObserver | None = None,
    ) -> None:
        self._agent = agent
        self.observer = observer or TurnObserver()
        self._tasks = tasks
        self._messages = messages
        self._checkpoints = checkpoints
        self.leases = leases
        self.holder = holder
        self.lease_ttl_s = lease_ttl_s
        self.slots = Slots(max_running_turns, what="running turns", per_key=max_turns_per_owner)
        self._running: dict[tuple[str, str], tuple[asyncio.Task[None], _Turn]] = {}

    @contextlib.asynccontextmanager
    async def starting(self, task_id: str, *, owner: str) -> AsyncIterator[TurnStart]:
        """Reserve a running-turn slot and take the task's lease, for a turn about to start.

        Raises Overloaded (no slot free: nothing was written) or LeaseTaken. Inside the block the
        caller writes what the turn needs (fenced with `start.fence`) and launches it with
        `launch_new` or `launch_resumed`; if the block ends without a launch, the slot is given
        back and the lease released.
        """
        self.slots.take(owner)
        start = TurnStart(task_id=task_id, owner=owner)
        try:
            start.fence = await self.take_lease(task_id, owner=owner)
            if start.fence is None:
                raise LeaseTaken(f"task {task_id!r} is already running elsewhere")
            yield start
        finally:
            if not start.launched:
                self.slots.give_back(owner)
                if start.fence is not None:
                    with contextlib.suppress(StoreUnavailable):
                        await self.leases.release(task_id, owner=owner, holder=start.fence.holder)

    async def take_lease(self, task_id: str, *, owner: str) -> Fence | None:
        """Take the task's lease for one use (a turn, a cancel): None if someone else holds it.

        Each use is a holder of its own (this process's name and a nonce), so two requests in one
        process compete for a lease exactly as two processes do.
        """
        holder = f"{self.holder}/{uuid.uuid4().hex[:8]}"
        epoch = await self.leases.acquire(
            task_id, owner=owner, holder=holder, ttl_s=self.lease_ttl_s
        )
        return Fence(holder, epoch) if epoch else None

    def launch_new(
        self,
        start: TurnStart,
        task: Task,
        user_message: Message,
        *,
        trace_carrier: Carrier | None = None,
    ) -> None:
        """Run a new turn for the task (created inside `starting`) in the background."""
        turn = self._turn(start, task, trace_carrier=trace_carrier or {})
        self._launch(start, turn, ChatMessage(role="user", content=user_message.text()))

    def launch_resumed(
        self, start: TurnStart, task: Task, checkpoint: TurnCheckpoint, *, recovered: bool = False
    ) -> None:
        """Go on with a turn from a checkpoint, in the background.

        `recovered`: the process that ran the turn died; clients may hold answer text that the
        checkpoint does not, so the answer so far is re-sent whole (append false) first.
        """
        turn = self._turn(
            start,
            task,
            trace_carrier=checkpoint.trace_carrier,
            artifact_id=checkpoint.artifact_id,
            chunks_sent=0 if recovered else checkpoint.chunks_sent,
        )
        if recovered and checkpoint.loop.answer:
            turn.held_chunk = "".join(checkpoint.loop.answer)
        self._launch(start, turn, checkpoint.loop)

    @staticmethod
    def _turn(start: TurnStart, task: Task, **fields: object) -> _Turn:
        assert start.fence is not None and task.id == start.task_id
        return _Turn(
            task=task.model_copy(deep=True),
            owner=start.owner,
            fence=start.fence,
            **fields,  # type: ignore[arg-type]
        )

    async def prepare_resume(
        self, task: Task, message: Message, *, owner: str, fence: Fence | None = None
    ) -> TurnCheckpoint:
        """The checkpoint of a suspended turn with the client's answer applied, saved (fenced) so
        that a process taking the turn over goes on with the answer.

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
        await self._checkpoints.save(
            task.id, checkpoint.model_dump_json(), owner=owner, fence=fence
        )
        return checkpoint

    def running(self) -> list[TaskRef]:
        return [TaskRef(owner, task_id) for owner, task_id in self._running]

    def leased(self) -> list[tuple[TaskRef, str]]:
        """The turns running here that hold their lease, with their holder (the ones to renew)."""
        return [
            (TaskRef(owner, task_id), turn.fence.holder)
            for (owner, task_id), (_, turn) in self._running.items()
            if turn.holds_lease and not turn.finished
        ]

    async def drop(self, task_id: str, *, owner: str) -> None:
        """Stop a turn here without recording anything: another process has taken it over."""
        running = self._running.get((owner, task_id))
        if running is not None:
            job, _ = running
            job.cancel()
            await asyncio.wait([job])

    def _launch(self, start: TurnStart, turn: _Turn, begin: ChatMessage | LoopState) -> None:
        """Start the turn's job; from now on the job owns the slot and the lease."""
        key = (turn.owner, turn.task.id)
        job = asyncio.create_task(self._run(turn, begin), name=f"turn-{turn.task.id}")
        self._running[key] = (job, turn)
        start.launched = True

        def done(_: asyncio.Task[None]) -> None:
            # A suspended job can end after its successor (the resumed turn) took the key.
            if self._running.get(key, (None,))[0] is job:
                del self._running[key]
            self.slots.give_back(start.owner)

        job.add_done_callback(done)

    def is_running(self, task_id: str, *, owner: str) -> bool:
        return (owner, task_id) in self._running

    def lease_holder(self, task_id: str, *, owner: str) -> str | None:
        """The holder name under which a turn running here holds its lease."""
        running = self._running.get((owner, task_id))
        return running[1].fence.holder if running is not None else None

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
            with contextlib.suppress(LeaseLost):
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
            await self.leases.release(task.id, owner=owner, holder=holder)

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
            if not turn.holds_lease:
                continue
            try:
                await self.leases.hand_over(
                    turn.task.id, owner=turn.owner, holder=turn.fence.holder
                )
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
        began = time.monotonic()
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
            with contextlib.suppress(LeaseLost):
                await self._set_state(turn, TaskState.CANCELED, "The task was canceled.")
        except LeaseLost:
            # Another process took the turn over: what the turn holds (claim, checkpoint, lease)
            # is the new holder's now, so nothing is recorded or released here.
            logger.warning(
                "task_id=<%s>, epoch=<%d> | lease lost; the turn goes on elsewhere, stopped here",
                task.id,
                turn.fence.epoch,
            )
            turn.suspended, turn.holds_lease = True, False
        except TaskGone:
            logger.warning("task_id=<%s> | the task expired during its turn; turn dropped", task.id)
        except Exception:
            logger.exception("task_id=<%s> | turn crashed", task.id)
            with contextlib.suppress(TaskGone, LeaseLost):
                await self._set_state(turn, TaskState.FAILED, "The agent hit an internal error.")
        finally:
            turn.finished = True
            span.set_attribute("a2a.task_state", turn.task.status.state.value)
            span.end()
            self._report(turn, time.monotonic() - began)
            if not turn.suspended:
                await self._end(turn)

    def _report(self, turn: _Turn, duration_s: float) -> None:
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

    async def _end(self, turn: _Turn) -> None:
        turn.holds_lease = False
        await self.forget(turn.task, owner=turn.owner, holder=turn.fence.holder)

    async def _on_event(self, turn: _Turn, event: AgentEvent) -> None:
        match event:
            case TextDelta(text=text):
                if turn.held_chunk is not None:
                    await self._send_chunk(turn, turn.held_chunk, last=False)
                turn.held_chunk = text
            case LLMCallStarted():
                turn.model_call_started = time.monotonic()
            case LLMCallFinished(usage=usage):
                turn.model_calls += 1
                self.observer.on_model_call(
                    duration_s=self._model_call_time(turn),
                    ok=True,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                )
            case ToolCallStarted(name=name):
                await self._progress(turn, f"calling {name}")
            case ToolCallFinished(name=name, ok=ok):
                turn.tool_calls += 1
                self.observer.on_tool_call(name, ok=ok)
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
                    lambda: self._checkpoints.save(
                        turn.task.id, saved, owner=turn.owner, fence=turn.fence
                    ),
                    what="checkpoint save",
                    on_unavailable=self.observer.on_store_unavailable,
                )
            case TurnSuspended(awaiting=awaiting):
                await self._flush(turn)
                turn.suspended = True
                await self._set_state(
                    turn, TaskState.INPUT_REQUIRED, message=question_message(turn.task, awaiting)
                )
                # Waiting for a human holds no process: the answer may arrive at any replica.
                turn.holds_lease = False
                await self.leases.release(turn.task.id, owner=turn.owner, holder=turn.fence.holder)
            case TurnCompleted():
                await self._complete(turn, event)
            case TurnFailed(reason=reason):
                if turn.model_call_started is not None:  # the model call under way failed
                    turn.model_calls += 1
                    self.observer.on_model_call(duration_s=self._model_call_time(turn), ok=False)
                turn.task.metadata = {**(turn.task.metadata or {}), "usage": _usage(event)}
                await self._set_state(
                    turn, TaskState.FAILED, reason, metadata={"usage": _usage(event)}
                )
            case _:
                pass

    @staticmethod
    def _model_call_time(turn: _Turn) -> float:
        started, turn.model_call_started = turn.model_call_started, None
        return time.monotonic() - started if started is not None else 0.0

    async def _publish(
        self, turn: _Turn, event: StatusUpdate | ArtifactUpdate, snapshot: Task | None
    ) -> None:
        task_id, owner, fence = turn.task.id, turn.owner, turn.fence
        event_id = uuid.uuid4().hex  # the same for every retry: the store journals it once
        await persistently(
            lambda: self._tasks.publish(
                task_id, event, owner=owner, snapshot=snapshot, event_id=event_id, fence=fence
            ),
            what="event publish",
            on_unavailable=self.observer.on_store_unavailable,
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
        self.observer.on_state_changed(state.value)
        logger.info("task_id=<%s>, state=<%s> | task state changed", task.id, state.value)


def _usage(event: TurnCompleted | TurnFailed) -> dict[str, int]:
    return {
        "promptTokens": event.usage.prompt_tokens,
        "completionTokens": event.usage.completion_tokens,
        "llmCalls": event.llm_calls,
        "toolCalls": event.tool_calls,
    }
