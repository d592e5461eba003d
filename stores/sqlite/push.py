"""SQLitePushConfigStore: a task's push-notification configs (a row each, in the order first put)
and its delivery cursor, both expiring the TTL after they were last written (as on Redis)."""

from __future__ import annotations

import builtins

from stores.base import DEFAULT_TASK_TTL_S, PushConfigStore
from stores.models import PushConfig
from stores.sqlite.database import Database, Step
from stores.sqlite.expiry import Ttl


class SQLitePushConfigStore(PushConfigStore):
    def __init__(self, database: Database, *, ttl_s: float = DEFAULT_TASK_TTL_S) -> None:
        self._database = database
        self._ttl = Ttl.of_seconds(ttl_s)

    async def put(self, config: PushConfig, *, owner: str) -> None:
        stored = config.model_dump_json(by_alias=True, exclude_none=True).encode()

        def put(step: Step) -> None:
            connection, now = step.connection, step.now_ms
            key = (owner, config.task_id, config.id)
            connection.execute(
                "DELETE FROM push_configs"
                " WHERE owner = ? AND task_id = ? AND config_id = ? AND expires_at <= ?",
                (*key, now),
            )
            # A replaced config keeps its row (and so its place in the list).
            connection.execute(
                "INSERT INTO push_configs (owner, task_id, config_id, config, expires_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, task_id, config_id) DO UPDATE"
                " SET config = excluded.config, expires_at = excluded.expires_at",
                (*key, stored, self._ttl.expires(now)),
            )

        await self._database.write(put)

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        def get(step: Step) -> bytes | None:
            row = step.connection.execute(
                "SELECT config FROM push_configs"
                " WHERE owner = ? AND task_id = ? AND config_id = ? AND expires_at > ?",
                (owner, task_id, config_id, step.now_ms),
            ).fetchone()
            return None if row is None else bytes(row[0])

        stored = await self._database.read(get)
        return None if stored is None else PushConfig.model_validate_json(stored)

    async def list(self, task_id: str, *, owner: str) -> builtins.list[PushConfig]:
        def configs(step: Step) -> builtins.list[bytes]:
            rows = step.connection.execute(
                "SELECT config FROM push_configs"
                " WHERE owner = ? AND task_id = ? AND expires_at > ? ORDER BY id",
                (owner, task_id, step.now_ms),
            ).fetchall()
            return [bytes(row[0]) for row in rows]

        return [PushConfig.model_validate_json(raw) for raw in await self._database.read(configs)]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        def delete(step: Step) -> bool:
            deleted = step.connection.execute(
                "DELETE FROM push_configs WHERE owner = ? AND task_id = ? AND config_id = ?"
                " RETURNING expires_at",
                (owner, task_id, config_id),
            ).fetchone()
            return deleted is not None and int(deleted[0]) > step.now_ms

        return await self._database.write(delete)

    async def cursor(self, task_id: str, *, owner: str) -> int:
        def cursor(step: Step) -> int:
            row = step.connection.execute(
                "SELECT position FROM push_cursors"
                " WHERE owner = ? AND task_id = ? AND expires_at > ?",
                (owner, task_id, step.now_ms),
            ).fetchone()
            return 0 if row is None else int(row[0])

        return await self._database.read(cursor)

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        def advance(step: Step) -> None:
            connection, now = step.connection, step.now_ms
            connection.execute(
                "DELETE FROM push_cursors WHERE owner = ? AND task_id = ? AND expires_at <= ?",
                (owner, task_id, now),
            )
            # The cursor never moves back: a slower delivery finishing late must not win.
            connection.execute(
                "INSERT INTO push_cursors (owner, task_id, position, expires_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (owner, task_id) DO UPDATE"
                " SET position = max(position, excluded.position),"
                " expires_at = excluded.expires_at",
                (owner, task_id, position, self._ttl.expires(now)),
            )

        await self._database.write(advance)
