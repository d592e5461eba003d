"""TaskRunner: the turn scheduler. Runs each task's turn in the background, independent of any
HTTP connection, and owns the jobs, the running-turn slots and the leases.

    TaskLifecycle.start (agent/runtime/tasks.py), or a takeover (TurnSupervisor)
            |  starting(task): a slot here, the task's lease (fenced by its epoch)
            v
    TaskRunner --(asyncio task per turn)--> Agent.run --> AgentLoop --> LLM, tools
            |  every agent event: TurnPublisher.on_event (agent/runtime/publisher.py)
            v
    per-task journal (positions 1, 2, 3, ...) ----> JournalFollower (agent/runtime/journal.py):
                                                     streams, blocking sends, subscribers, push
                                                     delivery (on any replica, with Redis)

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
from collections.abc import AsyncIterator
from typing import Protocol

from agent.agent import Agent
from agent.runtime.admission import MAX_RUNNING_TURNS, Slots
from agent.runtime.claims import ContextClaims
from agent.runtime.errors import LeaseTaken
from agent.runtime.observer import TurnObserver
from agent.runtime.publisher import TurnPublisher
from agent.runtime.turn import Turn, TurnCheckpoint, TurnStart
from agent.runtime.turn_gate import TURN_SLICE_S, TurnGate
from agent.runtime.turn_run import CANCELED, AgentOf, TurnExecutor, let_waiters_go
from agent.state import LoopState
from agent.tools.client import ClientTool
from agent.tracing import Carrier
from stores.base import (
    CheckpointStore,
    Fence,
    LeaseLost,
    LeaseStore,
    MessageStore,
    StoreUnavailable,
    TaskRef,
    TaskStore,
)
from stores.codec import copy_task
from stores.models import ChatMessage, Message, Task, TaskState

logger = logging.getLogger(__name__)

UNRECORDED = "the store is unreachable: task %r goes on, and can be read once it is back"


# Each use of a lease is a holder of its own: the process's name and a number unique in the process.
_LEASE_USES = itertools.count(1)


class TaskFollower(Protocol):
    """Follows a task's journal from where it last stopped (push delivery)."""

    def start(self, task_id: str, *, owner: str) -> None: ...


class TaskRunner:
    def __init__(
        self,
        agent: Agent | AgentOf,
        *,
        tasks: TaskStore,
        messages: MessageStore,
        checkpoints: CheckpointStore,
        leases: LeaseStore,
        holder: str,
        lease_ttl_s: float,
        max_running_turns: int = MAX_RUNNING_TURNS,
        max_turns_per_owner: int | None = None,
        turn_slice_s: float = TURN_SLICE_S,
        observer: TurnObserver | None = None,
        follower: TaskFollower | None = None,
    ) -> None:
        """`holder`: this process's name in the leases; `follower` is told of each turn launched
        here that it follows: every resumed turn, and a new task's only if it was launched
        `followed` (its first message came with a push config: no other can exist before);
        `agent`: the one agent, or the lookup of each owner's (AgentOf)."""
        self._leases = leases
        # One turn at a time per context, under the turn's lease (new tasks, answers, takeovers).
        self.claims = ContextClaims(tasks=tasks, messages=messages, leases=leases)
        self._observer = observer or TurnObserver()
        self._publisher = TurnPublisher(
            tasks=tasks,
            messages=messages,
            checkpoints=checkpoints,
            leases=leases,
            observer=self._observer,
            on_store_unavailable=self.store_unreachable,
        )
        self._holder = holder
        self._lease_ttl_s = lease_ttl_s
        self._slots = Slots(max_running_turns, what="running turns", per_key=max_turns_per_owner)
        self._gate = TurnGate(turn_slice_s)
        self._follower = follower
        self._turns = TurnExecutor(agent, self._publisher, self._observer, checkpoints=checkpoints)
        # A state change made outside a running turn (a cancel, an answer) is written the one way
        # a turn's are: see TurnPublisher.record_state.
        self.record_state = self._publisher.record_state
        self._running: dict[tuple[str, str], tuple[asyncio.Task[None], Turn]] = {}

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def lease_ttl_s(self) -> float:
        return self._lease_ttl_s

    @property
    def observer(self) -> TurnObserver:
        return self._observer

    def turns_held(self, owner: str | None = None) -> int:
        """Running-turn slots in use here (by `owner`): a turn's from `starting` to its end."""
        return self._slots.in_use if owner is None else self._slots.held_by(owner)

    @contextlib.asynccontextmanager
    async def starting(self, task_id: str, *, owner: str) -> AsyncIterator[TurnStart]:
        """Reserve a running-turn slot and take the task's lease, for a turn about to start.

        Raises Overloaded (no slot free: nothing was written) or LeaseTaken. Inside the block the
        caller writes what the turn needs (fenced with `start.fence`) and launches it with
        `launch_new` or `launch_resumed`; if the block ends without a launch, the slot is given
        back and the lease released (or left to lapse: `start.let_lapse`).
        """
        self._slots.take(owner)
        start = TurnStart(task_id=task_id, owner=owner)
        try:
            start.fence = await self.take_lease(task_id, owner=owner)
            if start.fence is None:
                raise LeaseTaken(f"task {task_id!r} is already running elsewhere")
            yield start
        finally:
            if not start.launched:
                self._slots.give_back(owner)
                if start.fence is not None and not start.let_lapse:
                    with contextlib.suppress(StoreUnavailable):
                        await self.release_lease(task_id, owner=owner, fence=start.fence)

    async def take_lease(self, task_id: str, *, owner: str) -> Fence | None:
        """Take the task's lease for one use (a turn, a cancel): None if someone else holds it.

        Each use is a holder of its own (this process's name and a nonce), so two requests in one
        process compete for a lease exactly as two processes do.
        """
        holder = f"{self._holder}/{next(_LEASE_USES)}"
        epoch = await self._leases.acquire(
            task_id, owner=owner, holder=holder, ttl_s=self._lease_ttl_s
        )
        return Fence(holder, epoch) if epoch else None

    async def release_lease(self, task_id: str, *, owner: str, fence: Fence) -> None:
        await self._leases.release(task_id, owner=owner, holder=fence.holder)

    async def lease_held(self, task_id: str, *, owner: str) -> bool:
        """Whether some process holds the task's lease (runs its turn, or is about to)."""
        return await self._leases.is_held(task_id, owner=owner)

    async def request_cancel(self, task_id: str, *, owner: str) -> None:
        """Ask the process whose lease the task is under to cancel it (it hears at once)."""
        await self._leases.request_cancel(task_id, owner=owner)

    def launch_new(
        self,
        start: TurnStart,
        task: Task,
        user_message: Message,
        *,
        trace_carrier: Carrier | None = None,
        client_tools: list[ClientTool] | None = None,
        extensions: frozenset[str] = frozenset(),
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
            extensions=extensions,
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
            extensions=frozenset(checkpoint.extensions),
            artifact_id=checkpoint.artifact_id,
            chunks_sent=0 if recovered else checkpoint.chunks_sent,
            resent="".join(answer) if recovered and answer else None,
        )
        self._launch(start, turn, checkpoint.loop, awaited=awaited)

    def _turn(self, start: TurnStart, task: Task, **fields: object) -> Turn:
        """The turn's running state, over `task` (the turn's own: it changes it as it goes)."""
        assert start.fence is not None and task.id == start.task_id
        return self._publisher.turn(
            task,
            owner=start.owner,
            fence=start.fence,
            **fields,  # type: ignore[arg-type]
        )

    async def prepare_resume(
        self,
        task: Task,
        message: Message,
        *,
        owner: str,
        fence: Fence | None = None,
        extensions: frozenset[str] | None = None,
    ) -> TurnCheckpoint:
        """The suspended turn's checkpoint with the answer applied: see TurnExecutor."""
        return await self._turns.prepare_resume(
            task, message, owner=owner, fence=fence, extensions=extensions
        )

    async def saved_turn(self, task_id: str, *, owner: str) -> LoopState | None:
        """The loop state a suspended task's turn saved (None: there is none)."""
        return await self._turns.saved_turn(task_id, owner=owner)

    def abandon(self, state: LoopState, *, owner: str) -> None:
        """A suspended turn was canceled: what it waited on lets go (in the background)."""
        self._turns.abandon(state, owner=owner)

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
        # Woken by the turn's last step (`let_waiters_go`), not through the job's end: the job's
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

    def store_unreachable(self, operation: str) -> None:
        """A write or a lease renewal found the store unreachable: the turns here wait for it,
        but a blocking send waiting on one is told now, with the task's id (cut off from Redis,
        it would wait the whole cut while another replica takes the turn over)."""
        self._observer.on_store_unavailable(operation)
        for (_, task_id), (_, turn) in self._running.items():
            for ended in turn.end_waiters:
                if not ended.done():
                    ended.set_exception(StoreUnavailable(UNRECORDED % task_id, task_id=task_id))

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
        gate = None if awaited else self._gate
        job = asyncio.create_task(self._turns.run(turn, begin, gate), name=f"turn-{turn.task.id}")
        self._running[key] = (job, turn)
        start.launched = True
        if followed and self._follower is not None:
            self._follower.start(turn.task.id, owner=turn.owner)

        def done(_: asyncio.Task[None]) -> None:
            # A suspended job can end after its successor (the resumed turn) took the key.
            if self._running.get(key, (None,))[0] is job:
                del self._running[key]
            self._slots.give_back(start.owner)
            let_waiters_go(turn)  # a job cancelled before its first step never ran its own

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
                await self._publisher.set_state(turn, TaskState.CANCELED, CANCELED)
                await self._publisher.end(turn)
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
                await self._leases.hand_over(
                    turn.task.id, owner=turn.owner, holder=turn.fence.holder
                )
            except StoreUnavailable:
                logger.warning("task_id=<%s> | could not hand the turn over", turn.task.id)
