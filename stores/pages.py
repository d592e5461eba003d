"""What `TaskStore.list` takes and gives: a query and one page of its answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from stores.models import Task, TaskState


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskQuery:
    context_id: str | None = None
    state: TaskState | None = None
    status_after: datetime | None = None
    page_size: int = 50
    page_token: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskPage:
    tasks: list[Task]
    next_page_token: str
    total_size: int
    positions: list[int] = field(default_factory=list)
    """The journal position each task's snapshot reflects (its A2A 1.1 generation), in the order
    of `tasks`: every store fills it (a page without it is listed without generations)."""
