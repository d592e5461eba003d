"""Stores, and what one replica runs, accepts and holds open."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

from agent.runtime.admission import MAX_RUNNING_TURNS
from agent.runtime.turn_gate import TURN_SLICE_S
from app.settings.database import DatabaseUrl
from app.settings.fields import (
    RedisUrl,
)
from stores.base import DEFAULT_TASK_TTL_S
from stores.memory.support import MAX_TASKS as MEMORY_MAX_TASKS


class CapacitySettings(BaseSettings):
    # --- stores
    redis_url: RedisUrl = Field(
        None,
        description="Redis URL (`redis://` or `rediss://`; a cluster:"
        " `redis+cluster://host:port,host:port`); unset = DATABASE_URL, or in-memory stores.",
    )
    redis_cluster: bool = Field(
        False, description="REDIS_URL names seed nodes of a Redis Cluster (as `redis+cluster://`)."
    )
    redis_key_prefix: str = Field(
        "a2a", min_length=1, description="Prefix of every Redis key the server writes."
    )
    database_url: DatabaseUrl = Field(
        None,
        description="Every store in one SQL database: PostgreSQL"
        " (`postgresql://user:password@host:port/db`, or `postgres://`; any replica count) or"
        " SQLite (`sqlite:///relative.db`, `sqlite:////absolute.db`; one server only); not with"
        " REDIS_URL (docs/storage.md).",
    )
    # Unset: sized from the replica's turn limit (stores.postgres.factory.pool_size_for).
    database_pool_size: int | None = Field(
        None,
        ge=1,
        description="PostgreSQL connections each replica may open; unset:"
        " A2A_MAX_RUNNING_TURNS + 4, at most 20 (replicas x this must stay under the server's"
        " max_connections).",
    )
    database_command_timeout_s: float = Field(
        2.0,
        gt=0,
        description="A PostgreSQL statement (or connection attempt) without an answer after this"
        " long fails (store unavailable); the readiness probe waits as long.",
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        description="Lease of a running turn; another server takes over once it expires.",
    )
    task_ttl_s: int = Field(
        DEFAULT_TASK_TTL_S, gt=0, description="Idle time after which a task expires."
    )
    # --- capacity: what one replica runs and accepts
    a2a_max_running_turns: int = Field(
        MAX_RUNNING_TURNS,
        ge=1,
        description="Turns running at once on this replica; more sends are refused (503, retry).",
    )
    a2a_turn_slice_ms: float = Field(
        TURN_SLICE_S * 1000,
        ge=0,
        description="Loop time turns may use in one event-loop pass; beyond it they wait for a"
        " later pass and new requests are read first (a blocking send's turn never waits;"
        " 0: no limit).",
    )
    a2a_max_streams: int = Field(
        10_000,
        ge=1,
        description="Open streams and blocking sends on this replica; more are refused (503).",
    )
    a2a_max_json_depth: int = Field(
        32,
        ge=4,
        le=128,  # the stores read back (pydantic's JSON reader) to about 190 levels
        description="Deepest nesting of JSON objects and arrays in a request (-32602 beyond).",
    )
    a2a_max_parts: int = Field(100, ge=1, description="Parts in one message (-32602 / 400 beyond).")
    a2a_max_text_chars: int = Field(
        100_000, ge=1, description="Characters in one text part (-32602 / 400 beyond)."
    )
    a2a_max_file_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1,
        description="Bytes of one inline file part (`raw`, decoded; -32602 / 400 beyond).",
    )
    a2a_max_metadata_bytes: int = Field(
        16 * 1024,
        ge=2,
        description="Bytes of one `metadata` object, as compact JSON (-32602 / 400 beyond).",
    )
    a2a_max_history_length: int = Field(
        1000,
        ge=1,
        description="Largest `historyLength` a request may ask for (-32602 / 400 beyond).",
    )
    a2a_max_streams_per_principal: int = Field(
        100,
        ge=1,
        description="Open streams and blocking sends of one principal on this replica"
        " (503 beyond).",
    )
    a2a_max_turns_per_principal: int = Field(
        16, ge=1, description="Turns of one principal running at once on this replica (503 beyond)."
    )
    # --- connections and shutdown
    a2a_shutdown_grace_s: float = Field(
        20.0,
        gt=0,
        description="On SIGTERM: time to drain (streams end, turns hand over) before the process"
        " exits; keep Kubernetes' `terminationGracePeriodSeconds` above it.",
    )
    a2a_max_connections: int = Field(
        12_000,
        ge=1,
        description="Concurrent connections (and requests) this replica serves; beyond, 503"
        " (above A2A_MAX_STREAMS, so a replica full of streams still answers other calls).",
    )
    a2a_stream_keepalive_s: float = Field(
        15.0,
        gt=0,
        description="An open stream without an event for this long gets an SSE comment, so that"
        " proxies and load balancers keep its connection open.",
    )
    a2a_long_poll_max_s: float = Field(
        30.0,
        ge=0,
        description="Longest an A2A 1.1 GetTask with `currentGeneration` is held waiting for the"
        " task to move on before it answers with the task as it stands (counted as an open"
        " stream; 0: answered at once).",
    )
    a2a_body_timeout_s: float = Field(
        30.0, gt=0, description="A request body that stops arriving for this long is refused (408)."
    )
    a2a_header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A connection whose request headers are not complete after this long"
        " is closed.",
    )
    a2a_keep_alive_timeout_s: int = Field(
        5, ge=1, description="An idle keep-alive connection is closed after this many seconds."
    )
    a2a_max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="Largest request line and headers in bytes; beyond, the connection gets 400.",
    )
    a2a_memory_max_tasks: int = Field(
        MEMORY_MAX_TASKS,
        ge=1,
        description="Tasks the in-memory store keeps (with their journals, checkpoints, push"
        " configs and leases), and as many conversations (each its last AGENT_HISTORY_MAX_MESSAGES"
        " to twice as many messages: what a turn reads); beyond, the oldest ended tasks and the"
        " conversations written to longest ago are dropped (503 if no task has ended).",
    )
    redis_command_timeout_s: float = Field(
        1.5,
        gt=0,
        description="A Redis command without an answer after this long fails (store unavailable);"
        " while streams are open Redis is pinged this often, and a ping unanswered for twice this"
        " long ends them with the store-unavailable error (clients resume elsewhere).",
    )

    @model_validator(mode="after")
    def _one_store_backend(self) -> Self:
        if self.redis_url and self.database_url is not None:
            raise ValueError(
                "REDIS_URL and DATABASE_URL are both set: every store is in one backend;"
                " unset one of them"
            )
        return self
