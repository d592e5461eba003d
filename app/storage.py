"""Which stores a server runs on, from its settings, and what its startup log says of them.

    DATABASE_URL postgresql://  -> stores.postgres (any replica count; `a2a-server migrate`)
    DATABASE_URL sqlite:///     -> stores.sqlite (one server holds the file)
    REDIS_URL                   -> stores.redis (one Redis, or a Redis Cluster)
    neither                     -> stores.memory (one server, nothing survives it)

Each backend's client library is imported only by a server that uses it, so the embedded default
(in memory) never loads redis-py, asyncpg or aiosqlite. docs/storage.md says how to choose.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.settings import Settings
from app.settings.database import Database
from stores.base import StoreError, StoreSet
from stores.errors import StoreLocked
from stores.memory import InMemoryStores


class StorageConfigurationError(Exception):
    """The stores' backend refuses its URL (one line; the server exits 2)."""


def build_stores(settings: Settings) -> StoreSet:
    """The StoreSet the settings name. Raises StoreLocked when the SQLite file is another
    running server's, and StorageConfigurationError when the backend refuses its URL."""
    database = settings.database
    if database is not None:
        return _sql_stores(settings, database)
    if not settings.redis_url:
        return InMemoryStores.create(
            ttl_s=settings.task_ttl_s,
            max_tasks=settings.a2a_memory_max_tasks,
            window_max=settings.agent_history_max_messages,
        )
    from stores.redis.factory import create_redis_stores

    return create_redis_stores(
        settings.redis_url,
        prefix=settings.redis_key_prefix,
        ttl_s=settings.task_ttl_s,
        max_running_turns=settings.a2a_max_running_turns,
        max_streams=settings.a2a_max_streams,
        command_timeout_s=settings.redis_command_timeout_s,
        cluster=settings.redis_cluster,
    )


def _sql_stores(settings: Settings, database: Database) -> StoreSet:
    if database.kind == "postgresql":
        # Nothing connects here: an unreachable database fails calls and the readiness ping
        # (StoreUnavailable), and the schema is migrated at the first connection.
        from stores.postgres.factory import create_postgres_stores, pool_size_for

        pool_size = settings.database_pool_size or pool_size_for(settings.a2a_max_running_turns)
        postgres: StoreSet = create_postgres_stores(
            database.url,
            ttl_s=settings.task_ttl_s,
            pool_size=pool_size,
            command_timeout_s=settings.database_command_timeout_s,
        )
        return postgres
    from stores.sqlite.factory import create_sqlite_stores, sqlite_path

    try:
        path = sqlite_path(database.url)
    except ValueError as exc:
        raise StorageConfigurationError(f"invalid configuration: database_url: {exc}") from None
    # No cap on the tasks kept (A2A_MEMORY_MAX_TASKS is the in-memory store's): the file holds
    # what TASK_TTL_S keeps, on disk.
    try:
        sqlite: StoreSet = create_sqlite_stores(path, ttl_s=settings.task_ttl_s, max_tasks=None)
    except StoreLocked:
        raise  # another server's file: its own one line
    except (ValueError, StoreError) as exc:  # no such directory, not a database, a newer schema
        raise StorageConfigurationError(f"cannot open the SQLite file {path}: {exc}") from None
    return sqlite


def describe_stores(settings: Settings) -> str:
    """The store backend for the startup log: `stores=<memory>`, or the backend with its address
    (scheme, host, port and database, or the SQLite file: never the credentials)."""
    database = settings.database
    if database is not None:
        return f"stores=<{database.kind}>, {database.shown}"
    if not settings.redis_url:
        return "stores=<memory>"
    url = urlsplit(settings.redis_url)
    if settings.redis_cluster or url.scheme.endswith("+cluster"):
        hosts = url.netloc.rpartition("@")[2]  # seed nodes, without the credentials
        return f"stores=<redis-cluster>, url=<{url.scheme}://{hosts}>"
    try:
        where = f"{url.hostname or 'localhost'}:{url.port or 6379}"
    except ValueError:  # an unreadable port: say so rather than echo the URL
        where = "?"
    return f"stores=<redis>, url=<{url.scheme}://{where}{url.path or '/0'}>"
