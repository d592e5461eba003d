"""Push-notification configs and delivery cursors in PostgreSQL, expiring with the task's TTL
(a put refreshes every config of the task, as a put refreshes the whole hash on Redis)."""

from __future__ import annotations

import builtins

from stores.base import PushConfigStore
from stores.models import PushConfig
from stores.postgres.database import Database, rows_affected

_LIVE = "owner = $1 AND task_id = $2 AND expires_at > now()"

_PUT = """
WITH put AS (
    INSERT INTO push_configs AS c (owner, task_id, config_id, config, expires_at)
    VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
    ON CONFLICT (owner, task_id, config_id) DO UPDATE
    SET config = EXCLUDED.config, expires_at = EXCLUDED.expires_at
)
UPDATE push_configs SET expires_at = now() + make_interval(secs => $5)
WHERE owner = $1 AND task_id = $2 AND config_id <> $3 AND expires_at > now()
"""

# The cursor only moves forward: a replica that took the task over and one still finishing a
# delivery may both record progress, and the earlier position must not win.
_ADVANCE = """
INSERT INTO push_cursors AS c (owner, task_id, position, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))
ON CONFLICT (owner, task_id) DO UPDATE SET
    position = CASE WHEN c.expires_at > now() THEN greatest(c.position, EXCLUDED.position)
                    ELSE EXCLUDED.position END,
    expires_at = EXCLUDED.expires_at
"""


class PostgresPushConfigStore(PushConfigStore):
    def __init__(self, database: Database, *, ttl_s: float = 86_400) -> None:
        self._db = database
        self._ttl_s = float(ttl_s)

    async def put(self, config: PushConfig, *, owner: str) -> None:
        stored = config.model_dump_json(by_alias=True, exclude_none=True).encode()
        async with self._db.connection() as connection:
            await connection.execute(_PUT, owner, config.task_id, config.id, stored, self._ttl_s)

    async def get(self, task_id: str, config_id: str, *, owner: str) -> PushConfig | None:
        async with self._db.connection() as connection:
            raw = await connection.fetchval(
                f"SELECT config FROM push_configs WHERE {_LIVE} AND config_id = $3",
                owner,
                task_id,
                config_id,
            )
        return None if raw is None else PushConfig.model_validate_json(raw)

    async def list(self, task_id: str, *, owner: str) -> builtins.list[PushConfig]:
        async with self._db.connection() as connection:
            rows = await connection.fetch(
                f"SELECT config FROM push_configs WHERE {_LIVE} ORDER BY added", owner, task_id
            )
        return [PushConfig.model_validate_json(row["config"]) for row in rows]

    async def delete(self, task_id: str, config_id: str, *, owner: str) -> bool:
        async with self._db.connection() as connection:
            status = await connection.execute(
                f"DELETE FROM push_configs WHERE {_LIVE} AND config_id = $3",
                owner,
                task_id,
                config_id,
            )
        return rows_affected(status) > 0

    async def cursor(self, task_id: str, *, owner: str) -> int:
        async with self._db.connection() as connection:
            position = await connection.fetchval(
                f"SELECT position FROM push_cursors WHERE {_LIVE}", owner, task_id
            )
        return int(position) if position is not None else 0

    async def advance(self, task_id: str, position: int, *, owner: str) -> None:
        async with self._db.connection() as connection:
            await connection.execute(_ADVANCE, owner, task_id, position, self._ttl_s)
