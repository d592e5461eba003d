"""What a write to a task's journal carries: the writer's fence, and the write itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass

from stores.models import Task, TaskEvent, TaskState


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may write a task's turn: the lease holder and the lease's epoch.

    Every acquire of a task's lease gives a larger epoch. A write that carries a fence is made
    only if the lease still has that holder and that epoch, checked in the same atomic step as the
    write; so a process that lost its lease (paused, partitioned, starved) cannot write, however
    late it wakes up: it gets LeaseLost instead.
    """

    holder: str
    epoch: int


@dataclass(frozen=True, slots=True)
class ContextFence:
    """Who may write a context's conversation: the task holding the context's claim, under its
    lease's fence.

    The claim records the fence of its task (the latest it was given: epochs only grow), so an
    append that carries a ContextFence is made only if the claim still names that task under that
    fence (or an earlier one of the same task, which it replaces), checked in the same atomic step
    as the append. A turn whose lease was taken over, or whose task ended and gave the context up,
    gets LeaseLost instead, however late its append lands.
    """

    task_id: str
    fence: Fence


@dataclass(frozen=True, slots=True)
class JournalWrite:
    """One `TaskStore.publish`: an event, and what is written with it in the same atomic step.

    - `event` (or its stored form, see `stores.codec`) is appended to the task's journal.
    - `chunks` (stored events, as for `publish_chunks`) go before it, under the same `event_id`.
    - `snapshot`, when given, replaces the stored snapshot, recorded as reflecting the event's
      position; chunks are published without one (cheap streaming). `snapshot_stored`, when the
      caller has it, is its stored form (`dump_task(snapshot)`): kept rather than written again.
    - `if_state` (with a snapshot) makes it a compare-and-set: StateConflict, and nothing
      written, unless the stored task is in that state.
    - `if_position` makes it a compare-and-set on the journal: written only if the task's last
      journal position (the position of its last event, chunks included; 1 for a task with
      only its creation) is this one; otherwise PositionConflict (carrying the current
      position), and nothing is written. Checked in the same atomic step as the write, after
      the `event_id` retry check and the `fence` (a retry of a write that was made returns its
      position; a stale fence is LeaseLost) and before `if_state`. A client's
      `ifGenerationMatch` (A2A 1.1) is this check: the generation is the journal position.
    - `event_id` makes a retry safe: publishing again with the id of the task's last event (its
      reply was lost, say) appends nothing and returns the position it got the first time.
    - `fence`: the write happens only if the task's lease still has that holder and epoch
      (checked in the same atomic step); otherwise LeaseLost, and nothing is written.
    """

    event: TaskEvent | bytes
    _: KW_ONLY
    snapshot: Task | None = None
    if_state: TaskState | None = None
    if_position: int | None = None
    event_id: str | None = None
    fence: Fence | None = None
    snapshot_stored: bytes | None = None
    chunks: Sequence[bytes] = ()
