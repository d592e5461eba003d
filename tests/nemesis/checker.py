"""The check of a whole nemesis history (Jepsen-style: the clients' records against what the
system holds at the end). Each check states a guarantee; `check` returns every violation.

1. every acknowledged task ends (none stuck), and no ghost: a task no client was told of is not
   left SUBMITTED or WORKING;
2. each journal is contiguous (positions 1..n), with one terminal status and nothing after it;
3. each answer exactly once: a completed turn's answer is in its conversation once, no key's
   answer twice, in one completed task at most;
4. every streamed event equals the journal's at its position, each stream without a skip or a
   duplicate (a resumed one starts right after its Last-Event-ID);
5. no checkpointed tool call runs again: no run of a call starts after the model was sent its
   result;
6. no two turns of a context overlap (by the journals' status times);
7. every conversation in order: prompts, tool calls, results and answers of the turns (and
   attempts) in the order they ran, each prompt once;
8. no error a client was not told to expect, and no refusal naming a task that never existed;
9. every replica ready at the end;
10. a stale turn's model call is cut: a model call of a replica that was paused, whose turn was
   taken over or ended during the pause, does not stream on after the replica resumes.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import datetime
from itertools import pairwise
from typing import Any

from tests.nemesis.history import FinalState, History
from tests.nemesis.model import answer_text

ACTIVE = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
TERMINAL = {
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
}
FIELDS = {"status": "statusUpdate", "artifact": "artifactUpdate", "message": "message"}
KEY = re.compile(r"(?:nem|answer|reply|ran|question) (\S+)")


def check(history: History, final: FinalState) -> list[str]:
    return [
        *tasks_end(history, final),
        *journals(final),
        *answers_once(history, final),
        *streams_match(history, final),
        *tools_once(final),
        *turns_apart(final),
        *conversations_in_order(final),
        *errors_expected(history, final),
        *ready(final),
        *stale_calls_cut(history, final),
    ]


def state_of_entry(event: dict[str, Any]) -> str | None:
    if event.get("kind") == "status":
        return event["status"]["state"]
    if event.get("kind") == "task":
        return event["task"]["status"]["state"]
    return None


def tasks_end(history: History, final: FinalState) -> list[str]:
    out = []
    for task_id, key in history.acknowledged.items():
        stored = final.tasks.get(task_id)
        if stored is None:
            out.append(f"stuck: acknowledged task {task_id} ({key}) is not in the store")
        elif stored.state not in TERMINAL:
            out.append(f"stuck: acknowledged task {task_id} ({key}) ends {stored.state}")
    for task_id, stored in final.tasks.items():
        if task_id not in history.acknowledged and stored.state not in TERMINAL:
            text = _task_prompt(stored.task)
            out.append(f"ghost: task {task_id} ({text}) no client was told of, left {stored.state}")
    for turn in history.turns:
        if turn.final_state not in TERMINAL:
            out.append(f"stuck: turn {turn.keys[-1]} ended {turn.final_state} for its client")
    return out


def _task_prompt(task: dict[str, Any] | None) -> str:
    for message in (task or {}).get("history") or []:
        for part in message.get("parts") or []:
            if part.get("text", "").startswith("nem "):
                return part["text"]
    return "?"


def journals(final: FinalState) -> list[str]:
    out = []
    for task_id, stored in final.tasks.items():
        positions = [e.position for e in stored.journal]
        if positions != list(range(1, len(positions) + 1)):
            out.append(f"journal of {task_id} not contiguous: {positions[:40]}")
        ends = [n for n, e in enumerate(stored.journal) if state_of_entry(e.event) in TERMINAL]
        if len(ends) > 1:
            out.append(f"journal of {task_id}: {len(ends)} terminal statuses")
        if ends and ends[0] != len(stored.journal) - 1:
            after = len(stored.journal) - 1 - ends[0]
            out.append(f"journal of {task_id}: {after} entries after its terminal status")
        if stored.state in TERMINAL and not ends:
            out.append(f"journal of {task_id}: task {stored.state} but no terminal status in it")
    return out


def answers_once(history: History, final: FinalState) -> list[str]:
    out = []
    in_conversations: Counter[str] = Counter()
    for messages in final.conversations.values():
        for message in messages:
            if message.get("role") == "assistant":
                found = re.match(r"answer (\S+) ", _text(message))
                if found:
                    in_conversations[found.group(1)] += 1
    completed: defaultdict[str, list[str]] = defaultdict(list)
    for task_id, stored in final.tasks.items():
        if stored.state == "TASK_STATE_COMPLETED":
            text = "".join(
                p.get("text", "")
                for a in (stored.task or {}).get("artifacts") or []
                for p in a.get("parts") or []
            )
            found = re.match(r"answer (\S+) ", text)
            if found:
                completed[found.group(1)].append(task_id)
                if text != answer_text(found.group(1)):
                    out.append(f"answer of {task_id} is {text!r}")
    for key, count in in_conversations.items():
        if count > 1:
            out.append(f"answer of {key} {count} times in its conversation")
    for key, tasks in completed.items():
        if len(tasks) > 1:
            out.append(f"message {key} ran to an answer {len(tasks)} times: tasks {tasks}")
    for turn in history.turns:
        if turn.final_state == "TASK_STATE_COMPLETED":
            key = turn.task_ids.get(turn.final_task or "", "")
            if turn.answer != answer_text(key):
                out.append(f"turn {key}: the client read the answer {turn.answer!r}")
            if in_conversations[key] != 1:
                out.append(
                    f"completed turn {key}: answer {in_conversations[key]} times in the conversation"
                )
    return out


def expected_event(stored: dict[str, Any]) -> dict[str, Any]:
    kind = stored.get("kind")
    if kind == "task":
        return {"task": stored["task"]}
    return {FIELDS.get(kind or "", kind or ""): {k: v for k, v in stored.items() if k != "kind"}}


def streams_match(history: History, final: FinalState) -> list[str]:
    out = []
    for n, stream in enumerate(history.streams):
        if not stream.events:
            continue
        where = f"stream #{n} ({stream.method} on {stream.replica}, task {stream.task_id}, after {stream.after}, joined={stream.joined})"
        ids = [position for position, _ in stream.events]
        first = ids[0]
        if stream.after is not None and first != stream.after + 1:
            out.append(f"{where}: resumed after {stream.after} but began at {first}")
        gaps = [(a, b) for a, b in pairwise(ids) if b != a + 1]
        if gaps:
            out.append(f"{where}: positions skip or repeat at {gaps[:5]} (of {ids[0]}..{ids[-1]})")
        stored = final.tasks.get(stream.task_id or "")
        if stored is None:
            out.append(f"{where}: its task is not in the store")
            continue
        journal = {e.position: e.event for e in stored.journal}
        for position, result in stream.events:
            entry = journal.get(position)
            if "task" in result and (entry is None or entry.get("kind") != "task"):
                continue  # a subscription's first event: the task as it stands, at its position
            if entry is None or expected_event(entry) != result:
                out.append(f"{where}: event at {position} differs from the journal's")
                break
    return out


def tools_once(final: FinalState) -> list[str]:
    out = []
    result_seen: dict[str, float] = {}
    for call in final.model_calls:
        for key in call["tool_results"]:
            result_seen[key] = min(result_seen.get(key, call["received"]), call["received"])
    for run in final.tool_runs:
        key = str(run["key"])
        if run["event"] == "start" and key in result_seen and float(run["at"]) > result_seen[key]:
            out.append(
                f"tool call of {key} ran again (run {run['run']}, pid {run['pid']}) after the model had its result"
            )
    return out


def _stamp(event: dict[str, Any]) -> float | None:
    raw = (event.get("status") or {}).get("timestamp")
    if not raw:
        return None
    return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()


def turns_apart(final: FinalState) -> list[str]:
    spans: defaultdict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for task_id, stored in final.tasks.items():
        stamps = [
            (state_of_entry(e.event), _stamp(e.event))
            for e in stored.journal
            if e.event.get("kind") == "status"
        ]
        working = [t for s, t in stamps if s == "TASK_STATE_WORKING" and t is not None]
        ended = [t for s, t in stamps if s in TERMINAL and t is not None]
        if working and ended and stored.task:
            spans[stored.task["contextId"]].append((min(working), max(ended), task_id))
    out = []
    for context_id, items in spans.items():
        items.sort()
        for (_s1, e1, t1), (s2, _e2, t2) in pairwise(items):
            if s2 < e1:
                out.append(
                    f"context {context_id}: task {t2} began {e1 - s2:.2f}s before task {t1} ended"
                )
    return out


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def conversation_keys(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(key, what) of each message: prompt, call, result, reply, answer."""
    out = []
    for message in messages:
        role, text = message.get("role"), _text(message)
        for call in message.get("tool_calls") or []:
            args = str((call.get("function") or call).get("arguments", ""))
            found = re.search(r"(?:question )?(\S+\.\d{3}\.\d+)", args)
            if found:
                out.append((found.group(1), "call"))
        found = KEY.search(text)
        if found:
            word = text.split()[0]
            what = {"nem": "prompt", "answer": "answer", "ran": "result", "reply": "reply"}.get(
                word, word
            )
            if role == "tool" and word == "reply":
                what = "reply"
            out.append((found.group(1), what))
    return out


def _order(key: str) -> tuple[int, int]:
    _, turn, attempt = key.rsplit(".", 2)
    return int(turn), int(attempt)


def conversations_in_order(final: FinalState) -> list[str]:
    out = []
    for context_id, messages in final.conversations.items():
        keys = conversation_keys(messages)
        for (k1, w1), (k2, w2) in pairwise(keys):
            if _order(k2) < _order(k1):
                out.append(
                    f"conversation {context_id} out of order: {w2} of {k2} after {w1} of {k1}"
                )
                break
        prompts = Counter(k for k, w in keys if w == "prompt")
        out += [
            f"conversation {context_id}: prompt of {k} {n} times"
            for k, n in prompts.items()
            if n > 1
        ]
    return out


def errors_expected(history: History, final: FinalState) -> list[str]:
    out = [
        f"unexpected error ({e.op} on {e.replica}): {e.detail}"
        for e in history.errors
        if not e.expected
    ]
    phantoms = {
        b.named for b in history.busy
        if not b.readable and b.named and b.named not in final.tasks and b.named not in history.acknowledged
    }  # fmt: skip
    for named in sorted(phantoms):
        times = [b.at for b in history.busy if b.named == named]
        out.append(
            f"refused (-32004) {len(times)} times over {max(times) - min(times):.1f}s by a claim naming"
            f" task {named}, which never existed"
        )
    return out


def ready(final: FinalState) -> list[str]:
    return [
        f"replica {url} not ready at the end: {last}"
        for url, last in final.readiness.items()
        if not last.startswith("200")
    ]


STALE_GRACE_S = 3.0
"""How long a resumed replica may take to notice that a turn moved or ended, and cut its call."""


def stale_calls_cut(history: History, final: FinalState) -> list[str]:
    ended: dict[str, float] = {}  # key -> when its task ended (monotonic)
    for stored in final.tasks.values():
        found = re.match(r"nem (\S+) ", _task_prompt(stored.task) + " ")
        stamps = [_stamp(e.event) for e in stored.journal if state_of_entry(e.event) in TERMINAL]
        if found and stamps and stamps[0] is not None:
            at = stamps[0] - final.wall_offset
            ended[found.group(1)] = min(at, ended.get(found.group(1), at))
    out = []
    for fault in history.faults:
        if fault.kind != "pause" or fault.ended is None or fault.target not in final.replicas:
            continue
        replica, resumed = final.replicas.index(fault.target), fault.ended
        for call in final.model_calls:
            finished = call["finished"] if call["finished"] is not None else float("inf")
            if (
                call["replica"] != replica
                or call["key"] is None
                or call["received"] > fault.started
            ):
                continue
            if finished <= resumed + STALE_GRACE_S:
                continue  # ended (or was cut) before the replica could have cut it
            moved = any(
                c["key"] == call["key"] and c["replica"] != replica
                and call["received"] < c["received"] < resumed
                for c in final.model_calls
            )  # fmt: skip
            if moved or ended.get(call["key"], float("inf")) < resumed:
                how = "taken over" if moved else "ended"
                end = "then its caller left" if call["cut"] else "to its natural end"
                out.append(
                    f"model call of {call['key']} by replica {replica} streamed on"
                    f" {finished - resumed:.1f}s after the replica resumed ({end}); its turn had"
                    f" {how}"
                )
    return out
