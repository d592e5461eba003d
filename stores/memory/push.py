"""In-memory push-notification configs and delivery cursors."""

from __future__ import annotations

from collections import OrderedDict

from stores.base import PushConfigStore
from stores.models import PushConfig


class InMemoryPushConfigStore(PushConfigStore):
    """Configs in their stored JSON form (a copy costs a serialization), for the `max_tasks`
    tasks that got one last (as many as the task store keeps): older tasks' are dropped."""

    def __init__(self, *, max_tasks: int = 10_000) -> None:
        self._configs: OrderedDict[tuple[str, str], dict[str, bytes]] = OrderedDict()
        self._cursors: dict[tuple[str, str], int] = {}
        self._max_tasks = max_tasks

    async def put(self, config: PushConfig, *, owner: str) -> None:
        key = (owner, config.task_id)
        configs = self._configs.setdefault(key, {})
        self._configs.move_to_end(key)
        configs[config.id] = config.model_dump_json(by_alias=True, exclude_none=True).encode()
        while len(self._configs) > self._max_tasks:
            oldest, _ = self._configs.popitem(last=False)
            self._cursors.pop(oldest, None)

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        stored = self._configs.get((owner, task_id), {}).get(config_id)
        return None if stored is None else PushConfig.model_validate_json(stored)

    async def list(self, task_id: str, *, owner: str) -> list[PushConfig]:
        stored = self._configs.get((owner, task_id), {})
        return [PushConfig.model_validate_json(raw) for raw in stored.values()]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        return self._configs.get((owner, task_id), {}).pop(config_id, None) is not None

    async def cursor(self, task_id: str, *, owner: str) -> int:
        return self._cursors.get((owner, task_id), 0)

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        key = (owner, task_id)
        self._cursors[key] = max(self._cursors.get(key, 0), position)
