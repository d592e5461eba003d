"""TaskRunner: the turn scheduler. Runs each task's turn in the background, independent of any
HTTP connection, and owns the jobs, the running-turn slots and the leases.

    SendMessage / SendStreamingMessage
            |  starting(task): a slot here, the task's lease (fenced by its epoch)
            v
    TaskRunner --(asyncio task per turn)--> Agent.run --> AgentLoop --> LLM, tools
            |  every agent event: TurnPublisher.on_event (agent/runtime/publisher.py)
            v
    per-task journal (positions 1, 2, 3, ...) ----> readers: SSE streams, blocking sends,
                                                     subscribers (on any replica, with Redis)

Nothing reads events from the runner directly: a client that disconnects only stops its reader,
and the turn goes on. The TurnSupervisor (agent/runtime/supervisor.py) keeps the leases alive, hears
cancels and takes over orphaned turns; together they are the scheduler, entered and left with the
app's lifespan (`async with TurnSupervisor(runner)`).

A turn starts inside `starting()`: a running-turn slot of this replica is reserved (or the request
is refused with Overloaded before anything is written) and the task's lease is taken before the
first write, so no task is ever active without a lease. Every write of a turn (journal entries,
checkpoints) carries the lease's fence (holder, epoch): once another process has taken the turn
over, the store refuses the write (LeaseLost) and the turn stops here without recording anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from agent.agent import Agent
from agent.runtime.admission import Slots
from agent.runtime.answers import read_answer
from agent.runtime.observer import TurnObserver
from agent.runtime.publisher import TurnPublisher
from agent.runtime.turn import Turn, TurnCheckpoint
from agent.runtime.turn_gate import TurnGate
from agent.state import LoopState
from agent.tools.client import ClientTool
from agent.tracing import Carrier, context_from, context_of, start_span
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
from stores.codec import copy_task
from stores.models import ChatMessage, Message, Task, TaskState

logger = logging.getLogger(__name__)


# Each use of a lease is a holder of its own: the process's name and a number unique in the process.
_LEASE_USES = itertools.count(1)


class LeaseTaken(Exception):
    """Another process holds the task's lease: it runs the turn."""


class NoCheckpoint(Exception):
    """A suspended or orphaned turn has no saved state to go on from."""


@dataclass(kw_only=True)
class TurnStart:
    """A turn about to start here: a reserved slot and the task's lease (see `starting`)."""

    task_id: str
    owner: str
    fence: Fence | None = None
    launched: bool = False


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
        turn_slice_s: float = 0.0,
        observer: TurnObserver | None = None,
    ) -> None:
        self._agent = agent
        self._checkpoints = checkpoints
        self.leases = leases
        self.publisher = TurnPublisher(
            tasks=tasks,
            messages=messages,
            checkpoints=checkpoints,
            leases=leases,
            observer=observer or TurnObserver(),
        )
        self.holder = holder
        self.lease_ttl_s = lease_ttl_s
        self.slots = Slots(max_running_turns, what="running turns", per_key=max_turns_per_owner)
        self.gate = TurnGate(turn_slice_s)
        self._running: dict[tuple[str, str], tuple[asyncio.Task[None], Turn]] = {}
        self._letting_go: set[asyncio.Task[None]] = set()
        self.on_launch: Callable[[str, str], None] = lambda task_id, owner: None
        """Called with each turn launched here (task id, owner) that push delivery follows: every
        resumed turn, and a new task's only if it was launched `followed` (its first message
        came with a push config: no other can exist before its first turn)."""

    @property
    def observer(self) -> TurnObserver:
        return self.publisher.observer

    @observer.setter
    def observer(self, observer: TurnObserver) -> None:
        self.publisher.observer = observer

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
        holder = f"{self.holder}/{next(_LEASE_USES)}"
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
        client_tools: list[ClientTool] | None = None,
        followed: bool = True,
        hand_over: bool = False,
        awaited: bool = False,
    ) -> None:
        """Run a new turn for the task (created inside `starting`) in the background. With
        `hand_over` the turn takes `task` itself (the caller does not read it while the turn runs),
        else a copy. `awaited`: the requester waits for the turn's end (a blocking send), so the
        turn does not wait at the gate (its client has nothing yet); see `TurnGate`."""
        turn = self._turn(
            start,
            task if hand_over else copy_task(task),
            trace_carrier=trace_carrier or {},
            client_tools=client_tools or [],
        )
        begin = ChatMessage(role="user", content=user_message.text())
        self._launch(start, turn, begin, followed=followed, awaited=awaited)

    def launch_resumed(
        self,
        start: TurnStart,
        task: Task,
        checkpoint: TurnCheckpoint,
        *,
        recovered: bool = False,
        awaited: bool = False,
    ) -> None:
        """Go on with a turn from a checkpoint, in the background.

        `recovered`: the process that ran the turn died; clients may hold answer text that the
        checkpoint does not, so the answer so far is re-sent whole (append false) first.
        """
        answer = checkpoint.loop.answer
        turn = self._turn(
            start,
            copy_task(task),
            trace_carrier=checkpoint.trace_carrier,
            artifact_id=checkpoint.artifact_id,
            chunks_sent=0 if recovered else checkpoint.chunks_sent,
            resent="".join(answer) if recovered and answer else None,
        )
        self._launch(start, turn, checkpoint.loop, awaited=awaited)

    def _turn(self, start: TurnStart, task: Task, **fields: object) -> Turn:
        """The turn's running state, over `task` (the turn's own: it changes it as it goes)."""
        assert start.fence is not None and task.id == start.task_id
        return self.publisher.turn(
            task,
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
            checkpoint.loop,
            approved=answer.approved,
            answer=answer.text,
            reason=answer.reason,
            tool_results=answer.tool_results,
        )
        await self._checkpoints.save(
            task.id, checkpoint.model_dump_json(), owner=owner, fence=fence
        )
        return checkpoint

    async def saved_turn(self, task_id: str, *, owner: str) -> LoopState | None:
        """The loop state a suspended task's turn saved (None: there is none)."""
        saved = await self._checkpoints.load(task_id, owner=owner)
        return TurnCheckpoint.model_validate_json(saved).loop if saved is not None else None

    def abandon(self, state: LoopState) -> None:
        """A suspended turn was canceled: what it waited on lets go (in the background: a
        sub-agent that is slow to hear of it must not hold the cancel up)."""
        job = asyncio.create_task(self._agent.loop.abandon(state))
        self._letting_go.add(job)
        job.add_done_callback(self._letting_go.discard)

    def running(self) -> list[TaskRef]:
        return [TaskRef(owner, task_id) for owner, task_id in self._running]

    async def until_local_turn_ends(self, task_id: str, *, owner: str) -> Turn | None:
        """Wait until the task's turn running in this process (if any) is over here: finished,
        suspended, cancelled, or gone to another process. Waiting does not affect the turn.
        The turn (its `settled` says how it ended, if it recorded that); None if no turn of the
        task was running here."""
        running = self._running.get((owner, task_id))
        if running is None:
            return None
        job, turn = running
        if job.done():
            return turn
        # Woken by the turn's last step (`_let_waiters_go`), not through the job's end: the job's
        # done callbacks run a pass of the loop later, and `asyncio.wait`'s waiter one more, so a
        # blocking send answered two passes after its turn ended. A future per waiter: one that
        # is cancelled (its client left) neither touches the turn nor wakes the others.
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        turn.end_waiters.append(ended)
        try:
            await ended
        finally:
            with contextlib.suppress(ValueError):
                turn.end_waiters.remove(ended)
        return turn

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

    def _launch(
        self,
        start: TurnStart,
        turn: Turn,
        begin: ChatMessage | LoopState,
        *,
        followed: bool = True,
        awaited: bool = False,
    ) -> None:
        """Start the turn's job; from now on the job owns the slot and the lease."""
        key = (turn.owner, turn.task.id)
        gate = None if awaited else self.gate
        job = asyncio.create_task(self._run(turn, begin, gate), name=f"turn-{turn.task.id}")
        self._running[key] = (job, turn)
        start.launched = True
        if followed:
            self.on_launch(turn.task.id, turn.owner)

        def done(_: asyncio.Task[None]) -> None:
            # A suspended job can end after its successor (the resumed turn) took the key.
            if self._running.get(key, (None,))[0] is job:
                del self._running[key]
            self.slots.give_back(start.owner)
            _let_waiters_go(turn)  # a job cancelled before its first step never ran `_run`

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
                await self.publisher.set_state(turn, TaskState.CANCELED, "The task was canceled.")
                await self.publisher.end(turn)
        return True

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

    async def _admit(self, gate: TurnGate) -> None:
        """Through the gate (at once, or after waiting for a later pass: counted)."""
        if await gate.admit():
            self.observer.on_turn_held()

    async def _run(self, turn: Turn, start: ChatMessage | LoopState, gate: TurnGate | None) -> None:
        task = turn.task
        span = start_span(
            "agent.turn",
            context_from(turn.trace_carrier),
            **{"a2a.task_id": task.id, "a2a.context_id": task.context_id},
        )
        turn.trace = context_of(span)
        began = time.monotonic()
        try:
            if gate is not None:
                await self._admit(gate)
            await self.publisher.set_state(turn, TaskState.WORKING)
            context = turn.context  # made once: it walks the task's history
            if isinstance(start, LoopState):
                state = start
            else:
                state = await self._agent.start_turn(context, start, client_tools=turn.client_tools)

            async def on_text(text: str) -> None:
                await self.publisher.on_text(turn, text)
                if gate is not None and gate.overrun():
                    await self._admit(gate)

            async for event in self._agent.run(context, state, on_text=on_text):
                await self.publisher.on_event(turn, event)
                if gate is not None and gate.overrun():
                    await self._admit(gate)
        except asyncio.CancelledError:
            if not turn.cancel_requested:
                turn.suspended = True  # shutdown or lease lost: all is left for the next holder
                raise
            with contextlib.suppress(LeaseLost):
                await self.publisher.set_state(turn, TaskState.CANCELED, "The task was canceled.")
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
                await self.publisher.set_state(
                    turn, TaskState.FAILED, "The agent hit an internal error."
                )
        finally:
            turn.finished = True
            span.set_attribute("a2a.task_state", turn.task.status.state.value)
            span.end()
            self.publisher.report(turn, time.monotonic() - began)
            try:
                await self.publisher.stop_writing(turn)  # an ended turn wrote all: nothing to stop
                if not turn.suspended:
                    await self.publisher.end(turn)
            finally:
                _let_waiters_go(turn)


def _let_waiters_go(turn: Turn) -> None:
    """The turn is over here: whoever waits for that (`until_local_turn_ends`) goes on."""
    for ended in turn.end_waiters:
        if not ended.done():
            ended.set_result(None)
