"""kill -9 of the replica running a turn: another replica takes the turn over from its checkpoint
once the lease expires (LEASE_TTL_S=3), and the task completes with a clean conversation.

What a takeover can and cannot save, as these tests pin it down:

* killed while a tool runs: the tool's result was never checkpointed, so the new holder runs the
  tool call again (the tool runs twice: once cut short on A, once to its end on B);
* killed after the tool finished, while the final answer streams: the result was checkpointed,
  so the tool is not run again (exactly once); the model's answer is asked for again and streamed
  anew from its start (first chunk ``append: false``).

Either way the conversation holds each message exactly once (checked through the model's request
for a second turn in the same context).
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.e2e.harness import ServerProcess, kind_of, stream_results
from tests.e2e_redis.support import (
    assert_contiguous,
    chunk_texts,
    describe_events,
    ids,
    kill9,
    rebuild_answer,
    result_of,
    state_of_event,
    status_text,
    stream_in_background,
    task_text,
)
from tests.fakes.fake_llm import message_text, text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3
SERVER_ENV = {"LEASE_TTL_S": str(LEASE_TTL_S)}
COMPLETED = "TASK_STATE_COMPLETED"
# lease expiry + one recovery sweep (every LEASE_TTL_S/3) + slack for a loaded 2-core machine
TAKEOVER_BUDGET_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 4


class Victims:
    """Replicas to kill, one per test. The next one may be started early in the background, but
    only once the turn under test has a live holder (a fresh replica must not be the one that
    takes an orphan over)."""

    def __init__(self, cluster) -> None:
        self._cluster = cluster
        self._next: list[ServerProcess] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def prefetch(self) -> None:
        def run() -> None:
            try:
                self._next.extend(self._cluster.spawn(1))
            except BaseException as exc:
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def take(self) -> ServerProcess:
        if self._thread is None and not self._next:
            self.prefetch()
        if self._thread is not None:
            self._thread.join(90)
            self._thread = None
        if self._error is not None:
            raise self._error
        return self._next.pop()


@pytest.fixture(scope="module")
def b_and_victims(cluster):
    a, b = cluster.spawn(2)
    victims = Victims(cluster)
    victims._next.append(a)
    return b, victims


@pytest.fixture(scope="module")
def b(b_and_victims):
    return b_and_victims[0]


@pytest.fixture(scope="module")
def rpc_b(cluster, b):
    return cluster.client(b)


def _wait_tool(cluster, tag, pid, *, ended: bool, timeout=10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        starts, ends = cluster.tool_runs(tag)
        if str(pid) in (ends if ended else starts):
            return
        assert time.monotonic() < deadline, f"tool {tag}: starts={starts} ends={ends}"
        time.sleep(0.02)


def _check_subscriber(events, rid, answer) -> None:
    seq = describe_events(events)
    stream_results(events, rid)
    first = result_of(events[0])
    assert kind_of(first) == "task", f"first event must be the snapshot{seq}"
    assert_contiguous(ids(events), "subscriber on B (across the takeover)")
    assert state_of_event(events[-1]) == COMPLETED, seq
    assert rebuild_answer(events[1:], start=task_text(first["task"])) == answer, seq


def _check_second_turn(fake_llm, rpc_b, context_id, marker, first_text, answer, tool_result):
    """The model's request for turn 2 holds turn 1's messages exactly once each, in order."""
    m2 = f"turn two {marker}"
    fake_llm.script(text("second answer", when_user_contains=m2))
    task2 = rpc_b.send(m2, context_id=context_id)
    assert task2["status"]["state"] == COMPLETED, task2["status"]
    (req,) = fake_llm.requests_for(m2)
    msgs = req["messages"]
    shape = [(m["role"], message_text(m)[:40], [c["function"]["name"] for c in m.get("tool_calls") or []])
             for m in msgs]  # fmt: skip
    roles = [m["role"] for m in msgs if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"], shape
    convo = [m for m in msgs if m["role"] != "system"]
    user1, call, result, final, user2 = convo
    assert message_text(user1) == first_text, shape
    assert [c["function"]["name"] for c in call["tool_calls"]] == ["slow_tool"], shape
    assert result["tool_call_id"] == call["tool_calls"][0]["id"], shape
    assert message_text(result) == tool_result, shape
    assert message_text(final) == answer, shape
    assert message_text(user2) == m2, shape
    # and each exactly once anywhere in the request
    texts = [message_text(m) for m in msgs]
    assert texts.count(first_text) == 1 and texts.count(answer) == 1, shape
    return task2


def test_kill_during_tool_call(cluster, b_and_victims, b, rpc_b, fake_llm, marker, store_view):
    _, victims = b_and_victims
    a = victims.take()
    seconds = 3.0
    answer = "the tool said it slept"
    fake_llm.script(
        tool_calls([("slow_tool", {"seconds": seconds, "tag": marker})], when_user_contains=marker),
        text(["the tool ", "said it ", "slept"], chunk_delay=0.05, when_user_contains=marker),
    )
    first_text = f"please run the slow tool {marker}"
    task = cluster.start_task(a, first_text)
    task_id, context_id = task["id"], task["contextId"]
    on_b = stream_in_background(b.url, "SubscribeToTask", {"id": task_id}, "on-b", read_timeout=40)
    on_b.wait_for(lambda ev: status_text(ev) == "calling slow_tool", timeout=20,
                  what='"calling slow_tool" on B')  # fmt: skip
    _wait_tool(cluster, marker, a.proc.pid, ended=False)
    store_view.assert_runs_on(a, task_id)

    t_kill = time.monotonic()
    kill9(a)
    t_taken = store_view.wait_for_holder(b, task_id, TAKEOVER_BUDGET_S)
    victims.prefetch()  # B holds the turn now: a fresh replica can start meanwhile

    events = on_b.join(40)
    t_done = time.monotonic()
    _check_subscriber(events, "on-b", answer)
    final = rpc_b.get_task(task_id)
    assert final["status"]["state"] == COMPLETED, final["status"]
    assert task_text(final) == answer
    assert len(final.get("artifacts") or []) == 1, final.get("artifacts")

    # The result of the cut-short call was never saved, so B ran the call again: twice in all.
    starts, ends = cluster.tool_runs(marker)
    assert starts == [str(a.proc.pid), str(b.proc.pid)], (starts, ends)
    assert ends == [str(b.proc.pid)], (starts, ends)
    assert len(fake_llm.requests_for(marker)) == 2  # A's tool-call request, B's answer request

    _check_second_turn(fake_llm, rpc_b, context_id, marker, first_text, answer, f"slept {seconds}s")
    print(f"takeover after kill: {t_taken - t_kill:.2f}s, completed {t_done - t_kill:.2f}s after")


def test_kill_while_final_answer_streams(cluster, b_and_victims, b, rpc_b, fake_llm, marker,
                                         store_view):  # fmt: skip
    _, victims = b_and_victims
    a = victims.take()
    chunks = [f"a{i:02d} " for i in range(30)]
    answer = "".join(chunks)
    fake_llm.script(
        tool_calls([("slow_tool", {"seconds": 0.3, "tag": marker})], when_user_contains=marker),
        text(chunks, chunk_delay=0.15, when_user_contains=marker),  # A's slow answer (killed)
        text(chunks, chunk_delay=0.02, when_user_contains=marker),  # B's answer after takeover
    )
    first_text = f"tool, then a long answer {marker}"
    task = cluster.start_task(a, first_text)
    task_id, context_id = task["id"], task["contextId"]
    on_b = stream_in_background(b.url, "SubscribeToTask", {"id": task_id}, "on-b", read_timeout=40)
    on_b.wait_for(lambda ev: chunk_texts([ev]) == ["a04 "], timeout=20, what="answer chunk a04")
    _wait_tool(cluster, marker, a.proc.pid, ended=True, timeout=1)

    t_kill = time.monotonic()
    kill9(a)
    t_taken = store_view.wait_for_holder(b, task_id, TAKEOVER_BUDGET_S)
    victims.prefetch()

    events = on_b.join(40)
    _check_subscriber(events, "on-b", answer)
    restarts = [
        ev for ev in events
        if kind_of(result_of(ev)) == "artifactUpdate"
        and not result_of(ev)["artifactUpdate"].get("append")
    ]  # fmt: skip
    assert len(restarts) == 2, f"one answer start on A, one on B{describe_events(events)}"
    final = rpc_b.get_task(task_id)
    assert final["status"]["state"] == COMPLETED
    assert task_text(final) == answer
    assert len(final.get("artifacts") or []) == 1, final.get("artifacts")

    # The tool's result was checkpointed before the kill: it ran exactly once, on A.
    starts, ends = cluster.tool_runs(marker)
    assert starts == ends == [str(a.proc.pid)], (starts, ends)
    records = fake_llm.records_for(marker)
    assert len(records) == 3, "tool call + A's cut answer + B's answer"
    assert records[1].client_disconnected, "A's answer stream should have been cut by the kill"

    _check_second_turn(fake_llm, rpc_b, context_id, marker, first_text, answer, "slept 0.3s")
    print(f"takeover after kill: {t_taken - t_kill:.2f}s")
