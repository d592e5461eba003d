"""What the Redis stores hold, read the way an auditor reads them (key layout: stores/redis_keys).

    p:task:<owner>:{<task>}             HASH    task (snapshot JSON), state, pos, ...
    p:journal:<owner>:{<task>}          STREAM  field e = event JSON, field epoch = writer's lease
                                                epoch (entries written by a running turn)
    p:lease:<owner>:{<task>}            HASH    holder, expires (ms, Redis server time)
    p:conversation:<owner>:{<context>}  LIST    ChatMessage JSON (`role`: user/assistant/tool)

A task is *stuck* when it is SUBMITTED or WORKING and nobody holds a live lease on it: no server
runs its turn, and none will unless something recovers it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys, decode

ACTIVE_STATES = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
TERMINAL_STATES = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}


def _s(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass(frozen=True)
class JournalRow:
    position: str
    event: dict[str, Any]
    epoch: int | None

    @property
    def state(self) -> str | None:
        ev = self.event
        if ev.get("kind") == "status":
            return ev["status"]["state"]
        if ev.get("kind") == "task":
            return ev["task"]["status"]["state"]
        return None

    def describe(self) -> str:
        ev = self.event
        what = ev.get("kind", "?")
        if ev.get("kind") == "artifact":
            text = "".join(p.get("text", "") for p in ev["artifact"]["parts"])
            what = f"artifact(append={ev.get('append', False)}, {text!r})"
        elif self.state:
            what = f"{what}({self.state})"
        return f"[{self.position} epoch={self.epoch}] {what}"


class RedisView:
    def __init__(self, client: redis.Redis, prefix: str, owner: str = ANONYMOUS) -> None:
        self.r = client
        self.prefix = prefix
        self.keys = RedisKeys(prefix)
        self.owner = owner

    def now_ms(self) -> int:
        seconds, micros = self.r.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # --- leases ---

    def lease(self, task_id: str) -> dict[str, str]:
        raw = self.r.hgetall(self.keys.lease(self.owner, task_id))
        return {_s(k): _s(v) for k, v in raw.items()}

    def holder(self, task_id: str) -> str:
        return self.lease(task_id).get("holder", "")

    def lease_live(self, task_id: str) -> bool:
        expires = self.lease(task_id).get("expires")
        return expires is not None and int(float(expires)) > self.now_ms()

    # --- tasks ---

    def task_state(self, task_id: str) -> str | None:
        raw = self.r.hget(self.keys.task(self.owner, task_id), "state")
        return None if raw is None else _s(raw)

    def task_ids(self) -> list[str]:
        """Every task of the owner under the prefix (SCAN; fine in a test)."""
        head = self.keys.task(self.owner, "x").split("{", 1)[0]
        out = []
        for key in self.r.scan_iter(match=f"{head}{{*", count=1000):
            out.append(decode(_s(key).split("{", 1)[1].rstrip("}")))
        return out

    def task(self, task_id: str) -> dict[str, Any] | None:
        raw = self.r.hget(self.keys.task(self.owner, task_id), "task")
        return None if raw is None else json.loads(raw)

    def active(self) -> list[str]:
        """Tasks under the prefix still SUBMITTED or WORKING (a turn is, or should be, running)."""
        return [t for t in self.task_ids() if self.task_state(t) in ACTIVE_STATES]

    def stuck(self, task_ids: list[str] | None = None) -> list[str]:
        """Tasks SUBMITTED or WORKING without a live lease, each described."""
        out = []
        for task_id in self.task_ids() if task_ids is None else task_ids:
            state = self.task_state(task_id)
            if state in ACTIVE_STATES and not self.lease_live(task_id):
                out.append(f"{task_id} {state} lease={self.lease(task_id) or 'none'}")
        return out

    # --- journals and conversations ---

    def journal(self, task_id: str) -> list[JournalRow]:
        rows = []
        for entry_id, fields in self.r.xrange(self.keys.journal(self.owner, task_id)):
            f = {_s(k): v for k, v in fields.items()}
            epoch = f.get("epoch")
            rows.append(
                JournalRow(_s(entry_id), json.loads(f["e"]), None if epoch is None else int(epoch))
            )
        return rows

    def conversation(self, context_id: str) -> list[dict[str, Any]]:
        raw = self.r.lrange(self.keys.conversation(self.owner, context_id), 0, -1)
        return [json.loads(m) for m in raw]

    def context_leftovers(self, context_id: str) -> list[str]:
        """Keys a context has in Redis (its claim, conversation, units)."""
        keys = [
            self.keys.claim(self.owner, context_id),
            self.keys.conversation(self.owner, context_id),
            self.keys.units(self.owner, context_id),
        ]
        return [k for k in keys if self.r.exists(k)]


def journal_problems(rows: list[JournalRow], expected_answer: str | None) -> list[str]:
    """What a journal shows of a double writer.

    * the epoch never goes down (a smaller epoch after a larger one: a replica that had lost the
      lease wrote), and every entry a running turn wrote (artifacts, statuses after the first)
      carries one;
    * exactly one terminal status, and nothing after it;
    * the answer rebuilt from the artifact chunks (append semantics) is the expected text.
    """
    problems = []
    highest: int | None = None
    for row in rows:
        if row.epoch is None:
            continue
        if highest is not None and row.epoch < highest:
            problems.append(f"epoch went down from {highest} at {row.describe()}")
        highest = row.epoch if highest is None else max(highest, row.epoch)
    unfenced = [r for r in rows if r.event.get("kind") == "artifact" and r.epoch is None]
    if unfenced:
        problems.append(f"{len(unfenced)} artifact entries carry no writer epoch (no fencing)")
    terminal = [n for n, r in enumerate(rows) if r.state in TERMINAL_STATES]
    if len(terminal) != 1:
        problems.append(f"{len(terminal)} terminal statuses in the journal (want exactly 1)")
    elif terminal[0] != len(rows) - 1:
        problems.append(f"{len(rows) - 1 - terminal[0]} entries after the terminal status")
    if expected_answer is not None:
        text = ""
        for r in rows:
            if r.event.get("kind") == "artifact":
                piece = "".join(p.get("text", "") for p in r.event["artifact"]["parts"])
                text = text + piece if r.event.get("append") else piece
        if text != expected_answer:
            problems.append(f"answer rebuilt from the journal is {text!r}, not {expected_answer!r}")
    return problems
