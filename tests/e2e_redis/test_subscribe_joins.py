"""Subscribers joining a task mid-turn on the replica that streams it (issue 48, defect 1).

One replica on Redis. A client streams a long answer (SendStreamingMessage); sixteen
SubscribeToTask requests join the same task on the same replica one after another while the
answer streams. The replica's readers of the task share its journal reads (journal_mux.py); a
subscriber joins at its snapshot's position, far behind the read in flight, which the answer's
next chunk ends. It used to be handed what that read found (the entries after the streaming
reader's position): a snapshot at position 2, then events from position 80. Each subscriber must
get its snapshot, then exactly the journal's entries after the snapshot's position, each once,
the same as the streaming client got them.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import kind_of, send_params
from tests.e2e_redis.support import (
    assert_contiguous,
    describe_events,
    ids,
    result_of,
    state_of_event,
    stream_in_background,
)
from tests.fakes.fake_llm import text

# 17 streams of a thousand events read by the test process: a slow machine takes its time.
pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

# A turn whose replica is slow to renew (a loaded machine) must not be taken over mid-test: the
# test is about the readers of one turn, not about takeovers.
SERVER_ENV = {"LEASE_TTL_S": "60"}
COMPLETED = "TASK_STATE_COMPLETED"


@pytest.fixture(scope="module")
def replica(cluster, fake_llm):
    (server,) = cluster.spawn(1)
    # One turn first: a process's first model call loads the rest of LiteLLM (seconds, on a
    # loaded machine), which is not what this test measures.
    fake_llm.script(text("warm", when_user_contains="warm-up"))
    warm = cluster.client(server).send("warm-up")
    assert warm["status"]["state"] == COMPLETED, warm["status"]
    return server


def test_subscribers_joining_a_streamed_task_mid_turn_get_every_entry_after_their_snapshot(
    replica, fake_llm, marker
):
    chunks = [f"j{i:04d} " for i in range(1000)]  # 3 s at least: every subscriber joins mid-turn
    fake_llm.script(text(chunks, chunk_delay=0.003, when_user_contains=marker))
    streamed = stream_in_background(
        replica.url, "SendStreamingMessage", send_params(f"long answer {marker}"), "streamed"
    )
    streamed.wait_for(lambda ev: result_of(ev).get("task") is not None, timeout=20, what="task")
    task_id = result_of(streamed.snapshot()[0])["task"]["id"]
    subscribers = []
    for n in range(16):  # one joins every 20 entries (or later, on a slow machine)
        streamed.wait_for(
            lambda ev, n=n: int(ev.id or 0) >= 20 * (n + 1), timeout=30,
            what=f"entry {20 * (n + 1)} on the streamed task",
        )  # fmt: skip
        subscribers.append(
            stream_in_background(replica.url, "SubscribeToTask", {"id": task_id}, f"sub{n}")
        )
    events_a = streamed.join(120)
    assert_contiguous(ids(events_a), "the streaming client's stream")
    assert ids(events_a)[0] == 1 and state_of_event(events_a[-1]) == COMPLETED
    assert "".join(
        part["text"]
        for ev in events_a
        if kind_of(result := result_of(ev)) == "artifactUpdate"
        for part in result["artifactUpdate"]["artifact"]["parts"]
    ) == "".join(chunks), "the turn ran once, on this replica"  # fmt: skip
    # (The wire form of these events is checked elsewhere: here, what each stream carries.)
    journal = {int(ev.id or 0): result_of(ev) for ev in events_a}

    for n, subscriber in enumerate(subscribers):
        events = subscriber.join(120)
        seq = f"\nsubscriber {n}: {describe_events(events)}"
        assert kind_of(result_of(events[0])) == "task", seq
        positions = ids(events)
        assert positions == list(range(positions[0], ids(events_a)[-1] + 1)), seq
        assert [result_of(ev) for ev in events[1:]] == [journal[p] for p in positions[1:]], seq
