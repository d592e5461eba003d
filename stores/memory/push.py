"""In-memory push-notification configs and delivery cursors."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from stores.base import PushConfigStore
from stores.memory.support import MAX_TASKS
from stores.models import PushConfig


@dataclass
class _TaskPushes:
    """A task's configs (in their stored JSON form: a copy costs a serialization) and the
    position its delivery has reached."""

    configs: dict[str, bytes] = field(default_factory=dict)
    cursor: int = 0


class InMemoryPushConfigStore(PushConfigStore):
    """Configs and cursors of the `max_tasks` tasks whose were written last (as many as the task
    store keeps): older tasks' are dropped, and a task's go with it when the task store drops it.
    A cursor is kept with the configs, under the same bound: a delivery that moves one after its
    task was dropped cannot leave it behind for good."""

    def __init__(self, *, max_tasks: int = MAX_TASKS) -> None:
        self._tasks: OrderedDict[tuple[str, str], _TaskPushes] = OrderedDict()
        self._max_tasks = max_tasks

    def _written(self, owner: str, task_id: str) -> _TaskPushes:
        """The task's entry, made the newest (and the oldest dropped beyond the bound)."""
        key = (owner, task_id)
        pushes = self._tasks.get(key)
        if pushes is None:
            pushes = self._tasks[key] = _TaskPushes()
            while len(self._tasks) > self._max_tasks:
                self._tasks.popitem(last=False)
        else:
            self._tasks.move_to_end(key)
        return pushes

    async def put(self, config: PushConfig, *, owner: str) -> None:
        stored = config.model_dump_json(by_alias=True, exclude_none=True).encode()
        self._written(owner, config.task_id).configs[config.id] = stored

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        pushes = self._tasks.get((owner, task_id))
        stored = None if pushes is None else pushes.configs.get(config_id)
        return None if stored is None else PushConfig.model_validate_json(stored)

    async def list(self, task_id: str, *, owner: str) -> list[PushConfig]:
        pushes = self._tasks.get((owner, task_id))
        stored = () if pushes is None else pushes.configs.values()
        return [PushConfig.model_validate_json(raw) for raw in stored]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        pushes = self._tasks.get((owner, task_id))
        return pushes is not None and pushes.configs.pop(config_id, None) is not None

    async def cursor(self, task_id: str, *, owner: str) -> int:
        pushes = self._tasks.get((owner, task_id))
        return 0 if pushes is None else pushes.cursor

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        pushes = self._written(owner, task_id)
        pushes.cursor = max(pushes.cursor, position)

    def forget_task(self, owner: str, task_id: str, context_id: str) -> None:
        """The task store dropped the task: its configs and cursor go with it."""
        self._tasks.pop((owner, task_id), None)
