"""TurnExecutor: the agent's side of a turn: what its job does, from the gate to its last write;
and a suspended turn's saved loop, resumed with an answer or let go.

    gate (A2A_TURN_SLICE_MS) --> WORKING --> Agent.run --> each event to the TurnPublisher
        ends, or asks a question  --> recorded; what the turn held is released
        cancelled by a request    --> CANCELED
        cancelled by a shutdown,  --> nothing recorded: the next lease holder goes on
        or its lease lost             from the checkpoint
        crashes                   --> FAILED

The TaskRunner schedules the jobs (slots, leases); this is the one place a turn's outcome is
decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from agent.agent import Agent
from agent.runtime.answers import read_answer
from agent.runtime.errors import NoCheckpoint
from agent.runtime.observer import TurnObserver
from agent.runtime.publisher import TurnPublisher
from agent.runtime.turn import Turn, TurnCheckpoint
from agent.runtime.turn_gate import TurnGate
from agent.state import LoopState
from agent.tracing import context_from, context_of, start_span
from stores.base import CheckpointStore, Fence, LeaseLost, TaskGone
from stores.models import ChatMessage, Message, Task, TaskState

logger = logging.getLogger(__name__)

CANCELED = "The task was canceled."

AgentOf = Callable[[str], Agent]
"""The agent that runs an owner's turns. A server hosting several agents picks it by the owner's
tenant (stores.tenants.tenant_of), so a new turn, a resumed one and a takeover on another replica
all run with the agent the task was made with."""


class TurnExecutor:
    def __init__(
        self,
        agent: Agent | AgentOf,
        publisher: TurnPublisher,
        observer: TurnObserver,
        *,
        checkpoints: CheckpointStore,
    ) -> None:
        self._agent_of: AgentOf = agent if callable(agent) else lambda _owner: agent
        self._publisher = publisher
        self._observer = observer
        self._checkpoints = checkpoints
        self._letting_go: set[asyncio.Task[None]] = set()

    async def prepare_resume(
        self,
        task: Task,
        message: Message,
        *,
        owner: str,
        fence: Fence | None = None,
        extensions: frozenset[str] | None = None,
    ) -> TurnCheckpoint:
        """The checkpoint of a suspended turn with the client's answer applied, saved (fenced) so
        that a process taking the turn over goes on with the answer; `extensions`: those the
        answering request activated, on for the rest of the turn (None: the saved ones).

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
        self._agent_of(owner).loop.resume(
            checkpoint.loop,
            approved=answer.approved,
            answer=answer.text,
            reason=answer.reason,
            tool_results=answer.tool_results,
        )
        if extensions is not None:
            checkpoint.extensions = sorted(extensions)
        await self._checkpoints.save(
            task.id, checkpoint.model_dump_json(), owner=owner, fence=fence
        )
        return checkpoint

    async def saved_turn(self, task_id: str, *, owner: str) -> LoopState | None:
        """The loop state a suspended task's turn saved (None: there is none)."""
        saved = await self._checkpoints.load(task_id, owner=owner)
        return TurnCheckpoint.model_validate_json(saved).loop if saved is not None else None

    def abandon(self, state: LoopState, *, owner: str) -> None:
        """A suspended turn was canceled: what it waited on lets go (in the background: a
        sub-agent that is slow to hear of it must not hold the cancel up)."""
        job = asyncio.create_task(self._agent_of(owner).loop.abandon(state))
        self._letting_go.add(job)
        job.add_done_callback(self._letting_go.discard)

    async def _admit(self, gate: TurnGate) -> None:
        """Through the gate (at once, or after waiting for a later pass: counted)."""
        if await gate.admit():
            self._observer.on_turn_held()

    async def run(self, turn: Turn, start: ChatMessage | LoopState, gate: TurnGate | None) -> None:
        """The turn, from the gate to its last write; it ends however the turn ends."""
        task = turn.task
        span = start_span(
            "agent.turn",
            context_from(turn.trace_carrier),
            **{"a2a.task_id": task.id, "a2a.context_id": task.context_id},
        )
        turn.trace = context_of(span)
        began = time.monotonic()
        agent = self._agent_of(turn.owner)
        try:
            if gate is not None:
                await self._admit(gate)
            await self._publisher.set_state(turn, TaskState.WORKING)
            context = turn.context  # made once: it walks the task's history
            if isinstance(start, LoopState):
                state = start
            else:
                state = await agent.start_turn(context, start, client_tools=turn.client_tools)

            async def on_text(text: str) -> None:
                await self._publisher.on_text(turn, text)
                if gate is not None and gate.overrun():
                    await self._admit(gate)

            # However the turn ends here (canceled, its lease lost, its job stopped), the engine
            # is closed before the turn is over: its model call and tool calls are cut then, not
            # left to the garbage collector (a stale turn's model streamed on for nobody).
            async with contextlib.aclosing(agent.run(context, state, on_text=on_text)) as events:
                async for event in events:
                    await self._publisher.on_event(turn, event)
                    if gate is not None and gate.overrun():
                        await self._admit(gate)
        except asyncio.CancelledError:
            if not turn.cancel_requested:
                turn.suspended = True  # shutdown or lease lost: all is left for the next holder
                raise
            try:
                await self._publisher.set_state(turn, TaskState.CANCELED, CANCELED)
            except LeaseLost:
                _lost(turn)
        except LeaseLost:
            # Another process took the turn over: what the turn holds (claim, checkpoint, lease)
            # is the new holder's now, so nothing is recorded or released here.
            logger.warning(
                "task_id=<%s>, epoch=<%d> | lease lost; the turn goes on elsewhere, stopped here",
                task.id,
                turn.fence.epoch,
            )
            _lost(turn)
        except TaskGone:
            logger.warning("task_id=<%s> | the task expired during its turn; turn dropped", task.id)
        except Exception:
            logger.exception("task_id=<%s> | turn crashed", task.id)
            try:
                await self._publisher.set_state(
                    turn, TaskState.FAILED, "The agent hit an internal error."
                )
            except LeaseLost:
                _lost(turn)
            except TaskGone:
                pass
        finally:
            turn.finished = True
            span.set_attribute("a2a.task_state", turn.task.status.state.value)
            span.end()
            self._publisher.report(turn, time.monotonic() - began)
            try:
                await self._publisher.stop_writing(turn)  # an ended turn wrote all: nothing to stop
                if not turn.suspended:
                    await self._publisher.end(turn)
            finally:
                let_waiters_go(turn)


def _lost(turn: Turn) -> None:
    """The turn's lease was taken over: what it holds (claim, checkpoint, lease) is the new
    holder's now, so nothing is recorded or released here."""
    turn.suspended, turn.holds_lease = True, False


def let_waiters_go(turn: Turn) -> None:
    """The turn is over here: whoever waits for that (`until_local_turn_ends`) goes on."""
    for ended in turn.end_waiters:
        if not ended.done():
            ended.set_result(None)
