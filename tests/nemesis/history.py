"""The recorded history of a nemesis run: what the clients did and were told (written as they go),
what the faults did, and what the system holds at the end (read from Redis, or from PostgreSQL's
rows, once it is quiet).

Times are `time.monotonic()` (one clock for every process of the machine: the tool's records and
the model's use it too).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from tests.e2e_chaos.postgres_view import PostgresView
from tests.e2e_chaos.redis_view import RedisView


@dataclass
class StreamRecord:
    """One SSE response a client read: SendStreamingMessage or SubscribeToTask."""

    method: str
    replica: str
    task_id: str | None
    after: int | None  # the Last-Event-ID it was opened with
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    ended: str = "open"  # "final", "error: ...", "cut: ...", "closed" (the client left)
    joined: bool = False  # a subscriber that joined a turn another client was following


@dataclass
class TurnRecord:
    """One turn a client played: its attempts (one key each) until one settled."""

    session: str
    context_id: str
    number: int
    kind: str
    keys: list[str] = field(default_factory=list)
    task_ids: dict[str, str] = field(default_factory=dict)  # task id -> key it was created for
    final_state: str | None = None
    final_task: str | None = None
    answer: str | None = None
    canceled: bool = False
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None


@dataclass
class ErrorRecord:
    at: float
    op: str
    replica: str
    expected: bool
    detail: str


@dataclass
class BusyRecord:
    """A -32004 refusal: the task it named, and whether that task could be read then."""

    at: float
    context_id: str
    named: str | None
    readable: bool


@dataclass
class FaultRecord:
    kind: str
    target: str
    started: float
    ended: float | None = None
    detail: str = ""


@dataclass
class History:
    turns: list[TurnRecord] = field(default_factory=list)
    streams: list[StreamRecord] = field(default_factory=list)
    errors: list[ErrorRecord] = field(default_factory=list)
    busy: list[BusyRecord] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    acknowledged: dict[str, str] = field(default_factory=dict)  # task id -> key

    def acknowledge(self, task_id: str, key: str) -> None:
        self.acknowledged.setdefault(task_id, key)

    def error(self, op: str, replica: str, expected: bool, detail: str) -> None:
        self.errors.append(ErrorRecord(time.monotonic(), op, replica, expected, detail[:500]))

    def dump(self) -> dict[str, Any]:
        return {
            "turns": [asdict(t) for t in self.turns],
            "streams": [asdict(s) for s in self.streams],
            "errors": [asdict(e) for e in self.errors],
            "busy": [asdict(b) for b in self.busy],
            "faults": [asdict(f) for f in self.faults],
            "acknowledged": self.acknowledged,
        }


@dataclass
class JournalEntry:
    position: int
    event: dict[str, Any]


@dataclass
class StoredTask:
    task_id: str
    state: str | None
    task: dict[str, Any] | None
    journal: list[JournalEntry]
    lease_live: bool


@dataclass
class FinalState:
    """What Redis holds at the end, and what the tool and the model recorded."""

    tasks: dict[str, StoredTask]
    conversations: dict[str, list[dict[str, Any]]]  # context id -> messages
    claims: dict[str, str | None]  # context id -> the task its claim names
    tool_runs: list[dict[str, Any]]
    model_calls: list[dict[str, Any]]
    readiness: dict[str, str]
    replicas: list[str] = field(default_factory=list)  # their URLs, by index
    # time.time() - time.monotonic() when read: journals stamp wall-clock times, records monotonic
    wall_offset: float = 0.0


def read_final_state(
    client: Any,
    prefix: str,
    contexts: list[str],
    tool_runs: list[dict[str, Any]],
    model_calls: list[dict[str, Any]],
    readiness: dict[str, str],
    replicas: list[str],
) -> FinalState:
    view = RedisView(client, prefix)
    keys = RedisKeys(prefix)
    tasks = {}
    for task_id in view.task_ids():
        journal = [
            JournalEntry(int(row.position.split("-")[0]), row.event)
            for row in view.journal(task_id)
        ]
        tasks[task_id] = StoredTask(
            task_id, view.task_state(task_id), view.task(task_id), journal, view.lease_live(task_id)
        )
    claims: dict[str, str | None] = {}
    for context_id in contexts:
        raw = client.get(keys.claim(ANONYMOUS, context_id))
        claims[context_id] = _claim_task(raw)
    return FinalState(
        tasks=tasks,
        conversations={c: view.conversation(c) for c in contexts},
        claims=claims,
        tool_runs=tool_runs,
        model_calls=model_calls,
        readiness=readiness,
        replicas=replicas,
        wall_offset=time.time() - time.monotonic(),
    )


def read_postgres_final_state(
    url: str,
    contexts: list[str],
    tool_runs: list[dict[str, Any]],
    model_calls: list[dict[str, Any]],
    readiness: dict[str, str],
    replicas: list[str],
) -> FinalState:
    """`read_final_state` from the PostgreSQL stores' rows (tests/e2e_chaos/postgres_view.py):
    the journal's `position` column is the position the Redis entry id carries."""
    view = PostgresView(url)
    journals = view.journals()
    tasks = {}
    for task_id, state, snapshot, live in view.tasks_at_end():
        journal = [JournalEntry(int(row.position), row.event) for row in journals.get(task_id, [])]
        tasks[task_id] = StoredTask(task_id, state, snapshot, journal, live)
    return FinalState(
        tasks=tasks,
        conversations={c: view.conversation(c) for c in contexts},
        claims={c: view.claim_task(c) for c in contexts},
        tool_runs=tool_runs,
        model_calls=model_calls,
        readiness=readiness,
        replicas=replicas,
        wall_offset=time.time() - time.monotonic(),
    )


def _claim_task(raw: Any) -> str | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed.get("task") if isinstance(parsed, dict) else text
