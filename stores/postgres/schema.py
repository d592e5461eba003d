"""The PostgreSQL schema, as numbered migrations applied forward only (stores.postgres.migrations).

A migration's SQL never changes once released: a database records the versions it has, and a
new table, column or index is a new migration. Replicas of two versions may run on one database
during a rolling deploy, so a migration only adds (what an older replica never reads).

Every row carries its expiry (`expires_at`, server time: `ttl_s` after the task, conversation or
config was last written, as the Redis keys' TTLs); readers treat a row past it as missing, and a
periodic sweep deletes it (stores.postgres.sweep). A journal entry, a conversation's messages and
its unit ids have no expiry of their own: they go with their task's or conversation's row (ON
DELETE CASCADE), and readers check that row, so a publish refreshes one row, not the journal.

Ids are `COLLATE "C"`: lists sort by (status time, task id) descending, and byte order of the id is
what the other backends sort by (Redis by member bytes, memory by code point: the same for UTF-8).
"""

from __future__ import annotations

from stores.postgres.write_functions import WRITE_FUNCTIONS

MIGRATIONS: tuple[str, ...] = (
    # 1: every table of issue 51's first PostgreSQL store.
    """
    CREATE TABLE tasks (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        context_id text COLLATE "C" NOT NULL,
        state text NOT NULL,
        status_ms bigint NOT NULL,         -- the sort key of lists, with the task id
        status_us bigint NOT NULL,         -- `status_after` is checked to the microsecond
        snapshot bytea NOT NULL,           -- the stored form (stores.codec), kept byte for byte
        snapshot_position bigint NOT NULL, -- the journal position the snapshot reflects
        position bigint NOT NULL,          -- the journal's last position
        last_event_id text,                -- so that a retried publish is journaled once
        last_event_position bigint,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, task_id)
    );
    -- ListTasks reads a page of one of these backwards from a keyset cursor (status_ms, task_id).
    CREATE INDEX tasks_by_time ON tasks (owner, status_ms, task_id);
    CREATE INDEX tasks_by_state ON tasks (owner, state, status_ms, task_id);
    CREATE INDEX tasks_by_context ON tasks (owner, context_id, status_ms, task_id);
    CREATE INDEX tasks_expiry ON tasks (expires_at);

    CREATE TABLE journal (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        position bigint NOT NULL,
        event bytea NOT NULL,
        epoch bigint,                      -- the fenced writer's lease epoch (NULL: unfenced)
        PRIMARY KEY (owner, task_id, position),
        FOREIGN KEY (owner, task_id) REFERENCES tasks ON DELETE CASCADE
    );

    -- A row per task that ever had a lease (or was voided), never deleted while its task lives:
    -- the epoch only grows. `voided_by` is here, not in a table of its own, so that one row lock
    -- orders a `void` against a fenced creation (which reads the row FOR SHARE).
    CREATE TABLE leases (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        holder text,                       -- NULL: released
        epoch bigint NOT NULL DEFAULT 0,
        lease_expires_at timestamptz,
        cancel_requested boolean NOT NULL DEFAULT false,
        voided_by text,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, task_id)
    );
    CREATE INDEX leases_running ON leases (lease_expires_at) WHERE holder IS NOT NULL;
    CREATE INDEX leases_expiry ON leases (expires_at);

    CREATE TABLE processes (
        process text PRIMARY KEY,
        expires_at timestamptz NOT NULL    -- when its heartbeat lapses
    );

    CREATE TABLE conversations (
        owner text COLLATE "C" NOT NULL,
        context_id text COLLATE "C" NOT NULL,
        length bigint NOT NULL DEFAULT 0,  -- messages appended: the next one's seq is length + 1
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, context_id)
    );
    CREATE INDEX conversations_expiry ON conversations (expires_at);
    CREATE TABLE messages (
        owner text COLLATE "C" NOT NULL,
        context_id text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        message bytea NOT NULL,
        PRIMARY KEY (owner, context_id, seq),
        FOREIGN KEY (owner, context_id) REFERENCES conversations ON DELETE CASCADE
    );
    CREATE TABLE message_units (
        owner text COLLATE "C" NOT NULL,
        context_id text COLLATE "C" NOT NULL,
        unit_id text NOT NULL,
        PRIMARY KEY (owner, context_id, unit_id),
        FOREIGN KEY (owner, context_id) REFERENCES conversations ON DELETE CASCADE
    );

    -- A context's claim: the task running in it, and that task's latest lease fence.
    CREATE TABLE claims (
        owner text COLLATE "C" NOT NULL,
        context_id text COLLATE "C" NOT NULL,
        task_id text,                      -- NULL: free
        fence_holder text,                 -- NULL: claimed without a fence
        fence_epoch bigint,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, context_id)
    );
    CREATE INDEX claims_expiry ON claims (expires_at);

    CREATE TABLE checkpoints (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        checkpoint text NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, task_id)
    );
    CREATE INDEX checkpoints_expiry ON checkpoints (expires_at);

    CREATE TABLE push_configs (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        config_id text COLLATE "C" NOT NULL,
        added bigint GENERATED ALWAYS AS IDENTITY,  -- lists are oldest first
        config bytea NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, task_id, config_id)
    );
    CREATE INDEX push_configs_expiry ON push_configs (expires_at);
    CREATE TABLE push_cursors (
        owner text COLLATE "C" NOT NULL,
        task_id text COLLATE "C" NOT NULL,
        position bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (owner, task_id)
    );
    CREATE INDEX push_cursors_expiry ON push_cursors (expires_at);

    CREATE TABLE rate_buckets (
        key text PRIMARY KEY,
        tokens double precision NOT NULL,
        at timestamptz NOT NULL,
        granted boolean NOT NULL,          -- whether the last take got a token
        expires_at timestamptz NOT NULL    -- once the bucket is full again
    );
    CREATE INDEX rate_buckets_expiry ON rate_buckets (expires_at);

    -- Who runs the expiry sweep: one replica at a time, for a short lease.
    CREATE TABLE sweeps (
        name text PRIMARY KEY,
        holder text NOT NULL,
        expires_at timestamptz NOT NULL
    );
    """,
    # 2: the fenced writes as functions, one statement each (stores.postgres.write_functions).
    WRITE_FUNCTIONS,
)
"""The schema's migrations: version N is MIGRATIONS[N - 1]."""

LATEST_VERSION = len(MIGRATIONS)

EXPIRING_TABLES: tuple[str, ...] = (
    "tasks",
    "claims",
    "conversations",
    "checkpoints",
    "push_configs",
    "push_cursors",
    "rate_buckets",
    "processes",
)
"""The tables the sweep deletes expired rows from (leases go by a rule of their own: never
while their task lives)."""
