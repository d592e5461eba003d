"""The nemesis' checker, fed histories made by hand: a clean one passes, and each broken promise
(a stream that skips, a conversation out of order, a ghost task, a refusal naming a task that
never existed, a stuck task, a tool run again, an answer twice, two turns at once) is flagged.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.nemesis.checker import check, expected_event
from tests.nemesis.history import (
    BusyRecord,
    FaultRecord,
    FinalState,
    History,
    JournalEntry,
    StoredTask,
    StreamRecord,
    TurnRecord,
)
from tests.nemesis.model import answer_chunks, answer_text, prompt_text

CONTEXT = "ctx-s1-0"


def status(task_id: str, state: str, at: str) -> dict[str, Any]:
    return {
        "kind": "status",
        "taskId": task_id,
        "contextId": CONTEXT,
        "status": {"state": f"TASK_STATE_{state}", "timestamp": at},
    }


def chunk(task_id: str, text: str, first: bool) -> dict[str, Any]:
    return {
        "kind": "artifact",
        "taskId": task_id,
        "contextId": CONTEXT,
        "artifact": {"artifactId": "answer", "parts": [{"text": text}]},
        "append": not first,
    }


def stored_task(task_id: str, key: str, minute: int, state: str = "COMPLETED") -> StoredTask:
    """A task of one turn: submitted, working, the answer in chunks, ended at `minute`."""
    events = [
        {"kind": "task", "task": {"id": task_id, "contextId": CONTEXT,
                                  "status": {"state": "TASK_STATE_SUBMITTED"}}},
        status(task_id, "WORKING", f"2026-01-01T00:{minute:02d}:00Z"),
        *(chunk(task_id, c, n == 0) for n, c in enumerate(answer_chunks(key))),
        status(task_id, state, f"2026-01-01T00:{minute:02d}:30Z"),
    ]  # fmt: skip
    task = {
        "id": task_id,
        "contextId": CONTEXT,
        "status": {"state": f"TASK_STATE_{state}"},
        "history": [{"role": "ROLE_USER", "parts": [{"text": prompt_text(key, "plain")}]}],
        "artifacts": [{"artifactId": "answer", "parts": [{"text": answer_text(key)}]}],
    }
    journal = [JournalEntry(n + 1, e) for n, e in enumerate(events)]
    return StoredTask(task_id, f"TASK_STATE_{state}", task, journal, lease_live=False)


def clean() -> tuple[History, FinalState]:
    """Two turns of one context, each streamed whole, one joined by a subscriber."""
    history = History()
    tasks = {"t1": stored_task("t1", "s1-0.000.0", 1), "t2": stored_task("t2", "s1-0.001.0", 2)}
    conversation = []
    for number, task_id in enumerate(tasks):
        key = f"s1-0.{number:03d}.0"
        turn = TurnRecord("s1-0", CONTEXT, number, "plain", keys=[key], task_ids={task_id: key})
        turn.final_state, turn.final_task, turn.answer = (
            "TASK_STATE_COMPLETED",
            task_id,
            answer_text(key),
        )
        history.turns.append(turn)
        history.acknowledge(task_id, key)
        journal = tasks[task_id].journal
        stream = StreamRecord("SendStreamingMessage", "r1", task_id, None)
        stream.events = [(e.position, expected_event(e.event)) for e in journal]
        history.streams.append(stream)
        joined = StreamRecord("SubscribeToTask", "r1", task_id, None, joined=True)
        snapshot = {"task": {"id": task_id, "status": {"state": "TASK_STATE_WORKING"}}}
        joined.events = [(4, snapshot)] + [
            (e.position, expected_event(e.event)) for e in journal[4:]
        ]
        history.streams.append(joined)
        conversation += [
            {"role": "user", "content": prompt_text(key, "plain")},
            {"role": "assistant", "content": answer_text(key)},
        ]
    final = FinalState(
        tasks=tasks,
        conversations={CONTEXT: conversation},
        claims={CONTEXT: "t2"},
        tool_runs=[],
        model_calls=[],
        readiness={"r1": "200 ok"},
    )  # fmt: skip
    return history, final


def flagged(history: History, final: FinalState, words: str) -> None:
    violations = check(history, final)
    assert any(words in v for v in violations), f"{words!r} not among {violations}"


def test_a_clean_history_passes() -> None:
    history, final = clean()
    assert check(history, final) == []


def test_a_joined_stream_that_skips_events_is_flagged() -> None:
    history, final = clean()
    joined = history.streams[1]
    del joined.events[1:3]  # the snapshot at 4, then 7: the first chunks never came
    flagged(history, final, "positions skip or repeat at [(4, 7)]")


def test_a_stream_that_repeats_an_event_or_differs_from_the_journal_is_flagged() -> None:
    history, final = clean()
    history.streams[0].events.insert(3, history.streams[0].events[2])
    flagged(history, final, "positions skip or repeat")
    history, final = clean()
    position, result = history.streams[0].events[3]
    changed = copy.deepcopy(result)
    changed["artifactUpdate"]["artifact"]["parts"][0]["text"] = "w9 "
    history.streams[0].events[3] = (position, changed)
    flagged(history, final, "event at 4 differs from the journal's")


def test_a_resumed_stream_that_does_not_start_after_its_last_event_id_is_flagged() -> None:
    history, final = clean()
    resumed = StreamRecord("SubscribeToTask", "r2", "t1", after=5)
    resumed.events = [(e.position, expected_event(e.event)) for e in final.tasks["t1"].journal[6:]]
    history.streams.append(resumed)
    flagged(history, final, "resumed after 5 but began at 7")


def test_a_conversation_out_of_order_is_flagged() -> None:
    history, final = clean()
    late = {"role": "user", "content": prompt_text("s1-0.000.1", "plain")}
    final.conversations[CONTEXT].insert(3, late)  # a stale prompt lands in the next turn
    flagged(history, final, "out of order: prompt of s1-0.000.1 after prompt of s1-0.001.0")


def test_a_ghost_task_is_flagged() -> None:
    history, final = clean()
    ghost = stored_task("t9", "s1-0.001.0", 3, state="COMPLETED")
    ghost.state, ghost.journal = "TASK_STATE_SUBMITTED", ghost.journal[:1]
    final.tasks["t9"] = ghost
    flagged(history, final, f"ghost: task t9 ({prompt_text('s1-0.001.0', 'plain')})")


def test_a_refusal_naming_a_task_that_never_existed_is_flagged() -> None:
    history, final = clean()
    history.busy += [BusyRecord(10.0, CONTEXT, "t-phantom", False),
                     BusyRecord(24.5, CONTEXT, "t-phantom", False)]  # fmt: skip
    flagged(history, final, "2 times over 14.5s by a claim naming task t-phantom")
    # a task being created when the refusal came, readable later, is no phantom
    final.tasks["t-phantom"] = stored_task("t-phantom", "s1-0.002.0", 4)
    history.acknowledge("t-phantom", "s1-0.002.0")
    assert not [v for v in check(history, final) if "t-phantom" in v]


def test_a_stuck_task_an_answer_twice_and_overlapping_turns_are_flagged() -> None:
    history, final = clean()
    stuck = final.tasks["t2"]
    stuck.state, stuck.journal = "TASK_STATE_WORKING", stuck.journal[:-1]
    flagged(history, final, "stuck: acknowledged task t2")
    history, final = clean()
    final.conversations[CONTEXT].append({"role": "assistant", "content": answer_text("s1-0.001.0")})
    flagged(history, final, "answer of s1-0.001.0 2 times")
    history, final = clean()
    final.tasks["t2"].journal[1].event["status"]["timestamp"] = "2026-01-01T00:01:10Z"
    flagged(history, final, "task t2 began 20.00s before task t1 ended")


def test_a_journal_with_a_gap_or_an_event_after_its_end_is_flagged() -> None:
    history, final = clean()
    journal = final.tasks["t1"].journal
    journal.append(JournalEntry(len(journal) + 1, chunk("t1", "late ", False)))
    flagged(history, final, "1 entries after its terminal status")
    del journal[3]
    flagged(history, final, "not contiguous")


def test_a_checkpointed_tool_call_run_again_is_flagged() -> None:
    history, final = clean()
    final.model_calls = [{"key": "s1-0.000.0", "received": 5.0, "tool_results": ["s1-0.000.0"]}]
    final.tool_runs = [
        {"event": "start", "key": "s1-0.000.0", "run": "a", "pid": 1, "at": 3.0},
        {"event": "end", "key": "s1-0.000.0", "run": "a", "pid": 1, "at": 3.5},
    ]
    assert check(history, final) == []
    final.tool_runs.append({"event": "start", "key": "s1-0.000.0", "run": "b", "pid": 2, "at": 6.0})
    flagged(history, final, "tool call of s1-0.000.0 ran again (run b, pid 2)")


def test_an_unexpected_error_and_a_replica_not_ready_are_flagged() -> None:
    history, final = clean()
    history.error("send", "r1", False, "JSON-RPC error -32603 INTERNAL_ERROR")
    history.error("send", "r1", True, "-32603 STORE_UNAVAILABLE")
    final.readiness["r2"] = "503 not ready"
    violations = check(history, final)
    assert len(violations) == 2, violations
    assert "unexpected error (send on r1): JSON-RPC error -32603" in violations[0]
    assert "replica r2 not ready" in violations[1]


def test_a_model_call_streaming_on_after_its_paused_replica_resumed_is_flagged() -> None:
    """Replica 0 is paused from 10 to 17.5 s during its model call of turn 0; the turn is taken
    over by replica 1 at 14 s. Replica 0's call must be cut once it resumes."""
    history, final = clean()
    final.replicas = ["r0", "r1"]
    history.faults.append(FaultRecord("pause", "r0", started=10.0, ended=17.5))
    stale = {"key": "s1-0.000.0", "received": 8.0, "finished": 18.5, "cut": True, "replica": 0}
    takeover = {"key": "s1-0.000.0", "received": 14.0, "finished": 16.0, "cut": False, "replica": 1}
    final.model_calls = [{**stale, "tool_results": []}, {**takeover, "tool_results": []}]
    assert check(history, final) == []  # cut a second after the resume
    final.model_calls[0].update(finished=28.0, cut=False)  # streamed on to its natural end
    flagged(history, final, "model call of s1-0.000.0 by replica 0 streamed on 10.5s after")
