"""Reading a client's answer to a suspended turn (a question, or a tool call to approve), and
taking it at a generation (A2A 1.1's `ifGenerationMatch`: TaskRequest's `if_generation`), checked
first against the snapshot, then by the compare-and-set that takes the answer
(`JournalWrite.if_position`: the generation is the journal position)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.runtime.errors import AnswerRejected, GenerationMismatch, TaskMovedOn
from agent.state import Awaiting
from agent.tools.client import read_tool_results
from stores.base import Fence, PositionConflict, StateConflict, TaskStore
from stores.models import Message, Task, TaskRecord, TaskState

if TYPE_CHECKING:
    from agent.runtime.runner import TaskRunner

__all__ = ["Answer", "AnswerRejected", "check_generation", "moved_past", "read_answer", "settle"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    text: str = ""
    approved: bool | None = None
    reason: str = ""
    tool_results: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """client_tools: by call id, what the model reads and whether the call succeeded."""


def read_answer(awaiting: Awaiting, message: Message) -> Answer:
    if awaiting.kind in ("ask_user", "tool_input"):
        return Answer(text=message.text())
    if awaiting.kind == "client_tools":
        try:
            return Answer(tool_results=read_tool_results(message, awaiting.calls))
        except ValueError as exc:
            raise AnswerRejected(str(exc)) from exc
    for part in message.parts:
        if (
            "data" in part.model_fields_set
            and isinstance(part.data, dict)
            and "approved" in part.data
        ):
            approved = part.data["approved"]
            if not isinstance(approved, bool):
                raise AnswerRejected('"approved" must be true or false')
            return Answer(approved=approved, reason=str(part.data.get("reason") or ""))
        if part.text is not None and part.text.strip().casefold() in ("approve", "deny"):
            return Answer(approved=part.text.strip().casefold() == "approve")
    raise AnswerRejected(
        f"Task waits for approval of the call of {awaiting.call.name!r}: answer with a text part"
        ' "approve" or "deny", or a data part {"approved": true|false, "reason": "..."}'
    )


def check_generation(record: TaskRecord, expected: int) -> None:
    """GenerationMismatch unless the task may be at `expected`. A snapshot past it is a task past
    it; an interrupted or ended task's snapshot is its last event, so it must be at it (an active
    task's may lag its journal: chunks, progress)."""
    position, state = record.position, record.task.status.state
    if position > expected or (position != expected and not state.is_active):
        raise GenerationMismatch(record.task.id, expected=expected, current=position)


async def moved_past(
    tasks: TaskStore, task_id: str, expected: int, *, owner: str, cause: Exception
) -> None:
    """Raise GenerationMismatch once the task's journal is past `expected` (the answer that
    took the lease first is writing it); return if it is not within a moment."""
    entries = await tasks.read(task_id, owner=owner, after=expected, timeout_s=1.0)
    if entries:
        raise GenerationMismatch(
            task_id, expected=expected, current=entries[-1].position
        ) from cause


async def settle(
    runner: TaskRunner,
    task: Task,
    state: TaskState,
    *,
    owner: str,
    if_state: TaskState,
    fence: Fence,
    if_position: int | None = None,
) -> int:
    """Record a state change made by the lifecycle rather than by a running turn: over the
    state seen (TaskMovedOn otherwise) and, with `if_position`, at that generation."""
    try:
        return await runner.record_state(
            task, state, owner=owner, if_state=if_state, fence=fence, if_position=if_position
        )
    except PositionConflict as exc:
        raise GenerationMismatch(task.id, expected=exc.expected, current=exc.current) from exc
    except StateConflict as exc:
        raise TaskMovedOn(task.id) from exc
