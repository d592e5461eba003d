"""The SQLite schema, versioned: each migration takes the file one version forward, on open.

Times are wall-clock milliseconds (`expires_at`, a lease's `lease_expires`): unlike a monotonic
clock they mean the same after a restart, which is when leases of the crashed process must be
found expired. Every row has its `expires_at` (the TTL after its task, conversation or lease was
last written, as Redis keys have theirs): reads treat a row past it as absent at once, and the
sweep (`stores.sqlite.expiry`) deletes it later, by the `*_expiry` indexes.

The three list indexes carry what a page and its count need (status time, id, the exact
microsecond for `status_after`, the expiry), so ListTasks reads an index range, never the table
(`stores.sqlite.listing`). A migration body never changes once released: a new version is a new
entry at the end.
"""

from __future__ import annotations

import sqlite3

from stores.errors import StoreError

ENDED = (
    "state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED',"
    " 'TASK_STATE_REJECTED')"
)
"""The terminal states, as the `tasks_ended` index and the queries that use it spell them (a
partial index serves only a query whose condition is its own, literally)."""

MIGRATIONS: tuple[str, ...] = (
    # 1: every store.
    """
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        task_id TEXT NOT NULL,
        context_id TEXT NOT NULL,
        state TEXT NOT NULL,
        status_ms INTEGER NOT NULL,
        status_us INTEGER NOT NULL,
        snapshot BLOB NOT NULL,
        snapshot_position INTEGER NOT NULL,
        position INTEGER NOT NULL,
        last_event_id TEXT,
        last_event_position INTEGER,
        expires_at INTEGER NOT NULL,
        UNIQUE (owner, task_id)
    );
    CREATE INDEX tasks_by_owner
        ON tasks (owner, status_ms, task_id, status_us, expires_at);
    CREATE INDEX tasks_by_state
        ON tasks (owner, state, status_ms, task_id, status_us, expires_at);
    CREATE INDEX tasks_by_context
        ON tasks (owner, context_id, status_ms, task_id, state, status_us, expires_at);
    CREATE INDEX tasks_expiry ON tasks (expires_at);
    CREATE INDEX tasks_ended ON tasks (status_ms)
        WHERE state IN ('TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED',
                        'TASK_STATE_REJECTED');

    CREATE TABLE journal (
        task INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        event BLOB NOT NULL,
        kind TEXT,
        state TEXT,
        epoch INTEGER,
        PRIMARY KEY (task, position)
    ) WITHOUT ROWID;

    CREATE TABLE leases (
        owner TEXT NOT NULL,
        task_id TEXT NOT NULL,
        holder TEXT,
        lease_expires INTEGER NOT NULL DEFAULT 0,
        epoch INTEGER NOT NULL DEFAULT 0,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        voided_by TEXT,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (owner, task_id)
    ) WITHOUT ROWID;
    CREATE INDEX leases_running ON leases (lease_expires) WHERE holder IS NOT NULL;
    CREATE INDEX leases_expiry ON leases (expires_at);

    CREATE TABLE checkpoints (
        owner TEXT NOT NULL,
        task_id TEXT NOT NULL,
        checkpoint TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (owner, task_id)
    );
    CREATE INDEX checkpoints_expiry ON checkpoints (expires_at);

    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        context_id TEXT NOT NULL,
        next_seq INTEGER NOT NULL DEFAULT 1,
        expires_at INTEGER NOT NULL,
        UNIQUE (owner, context_id)
    );
    CREATE INDEX conversations_expiry ON conversations (expires_at);
    CREATE TABLE messages (
        conversation INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        message BLOB NOT NULL,
        PRIMARY KEY (conversation, seq)
    ) WITHOUT ROWID;
    CREATE TABLE units (
        conversation INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        unit_id TEXT NOT NULL,
        PRIMARY KEY (conversation, unit_id)
    ) WITHOUT ROWID;

    CREATE TABLE claims (
        owner TEXT NOT NULL,
        context_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        fence_holder TEXT,
        fence_epoch INTEGER,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (owner, context_id)
    ) WITHOUT ROWID;
    CREATE INDEX claims_expiry ON claims (expires_at);

    CREATE TABLE push_configs (
        id INTEGER PRIMARY KEY,
        owner TEXT NOT NULL,
        task_id TEXT NOT NULL,
        config_id TEXT NOT NULL,
        config BLOB NOT NULL,
        expires_at INTEGER NOT NULL,
        UNIQUE (owner, task_id, config_id)
    );
    CREATE INDEX push_configs_expiry ON push_configs (expires_at);
    CREATE TABLE push_cursors (
        owner TEXT NOT NULL,
        task_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (owner, task_id)
    ) WITHOUT ROWID;
    CREATE INDEX push_cursors_expiry ON push_cursors (expires_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

EXPIRING_TABLES: tuple[str, ...] = (
    "tasks",  # its journal goes with it (ON DELETE CASCADE)
    "leases",
    "checkpoints",
    "conversations",  # its messages and unit ids go with it
    "claims",
    "push_configs",
    "push_cursors",
)
"""The tables the sweep deletes expired rows of, each by its `<table>_expiry` index."""


def schema_version(connection: sqlite3.Connection) -> int:
    """The file's version: 0 for a new file."""
    found = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if found is None:
        return 0
    row = connection.execute("SELECT version FROM schema_version").fetchone()
    return 0 if row is None else int(row[0])


def migrate(connection: sqlite3.Connection, path: str) -> int:
    """Take the file to SCHEMA_VERSION, every migration in one transaction (a crash half way
    leaves it at its version before); the version it is at.

    A file of a later version (written by a newer server) is refused rather than written."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = schema_version(connection)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {version}, newer than this server's"
                f" ({SCHEMA_VERSION}): run the newer server, or another file"
            )
        connection.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        if connection.execute("SELECT 1 FROM schema_version").fetchone() is None:
            connection.execute("INSERT INTO schema_version (version) VALUES (0)")
        for number in range(version, SCHEMA_VERSION):
            for statement in _statements(MIGRATIONS[number]):
                connection.execute(statement)
            connection.execute("UPDATE schema_version SET version = ?", (number + 1,))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def _statements(script: str) -> list[str]:
    """A migration's statements (`executescript` would commit the transaction it runs in)."""
    return [statement.strip() for statement in script.split(";") if statement.strip()]
