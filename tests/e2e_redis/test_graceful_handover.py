"""A replica running a turn stops; another takes the turn over without waiting for the whole lease
(LEASE_TTL_S = 30 here), and the task completes:

* SIGTERM: the replica hands the turn over on its way out (its lease is made to expire at once),
  so another takes it at its next sweep (LEASE_TTL_S/3);
* kill -9: the replica stops heartbeating; the first other replica to see its heartbeat lapse
  (LEASE_TTL_S/3 here) makes its leases expire at once and takes the turn over. A subscriber on
  the surviving replica sees the turn go on, every event once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e_redis.support import (
    assert_contiguous,
    ids,
    kill9,
    rebuild_answer,
    result_of,
    state_of_event,
    stream_in_background,
    task_text,
    wait_for_holder,
    wait_until,
)
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 30
SERVER_ENV = {"LEASE_TTL_S": str(LEASE_TTL_S)}
SWEEP_S = LEASE_TTL_S / 3


def _long_turn_on(a, cluster, fake_llm, marker, redis_client, prefix) -> str:
    """A turn running on A whose model call streams slowly (A is stopped in the middle); the
    next model call for it, on whichever replica takes it over, answers "taken over" at once."""
    fake_llm.script(
        text([f"slow{i} " for i in range(60)], chunk_delay=0.5, when_user_contains=marker),
        text(["taken ", "over"], when_user_contains=marker),
    )
    task_id = cluster.start_task(a, f"a long answer {marker}")["id"]
    wait_for_holder(redis_client, prefix, task_id, a, 20)
    wait_until(lambda: len(fake_llm.requests_for(marker)) >= 1, 20, "A's model call")
    return task_id


def test_sigterm_hands_the_turn_over_without_waiting_for_the_lease(
    cluster, fake_llm, marker, redis_client, prefix
):
    a, b = cluster.spawn(2)
    rpc_b = cluster.client(b)
    task_id = _long_turn_on(a, cluster, fake_llm, marker, redis_client, prefix)

    stopped = time.monotonic()
    os.killpg(a.proc.pid, signal.SIGTERM)
    assert a.proc.wait(timeout=20) is not None, "A did not exit on SIGTERM"
    taken = wait_for_holder(redis_client, prefix, task_id, b, SWEEP_S + 10)
    # Without the hand-over B could only take it after the whole lease (30 s).
    assert taken - stopped < LEASE_TTL_S - 5, f"takeover took {taken - stopped:.1f}s"

    done = rpc_b.wait_for_state(task_id, "TASK_STATE_COMPLETED", timeout=30)
    (artifact,) = done["artifacts"]
    assert "".join(part["text"] for part in artifact["parts"]) == "taken over"
    assert len(fake_llm.requests_for(marker)) == 2


def test_kill9_the_turn_is_taken_over_once_the_heartbeat_lapses(
    cluster, fake_llm, marker, redis_client, prefix
):
    a, b = cluster.spawn(2)
    rpc_b = cluster.client(b)
    task_id = _long_turn_on(a, cluster, fake_llm, marker, redis_client, prefix)
    on_b = stream_in_background(b.url, "SubscribeToTask", {"id": task_id}, "on-b", read_timeout=60)
    on_b.wait_for(lambda ev: "slow1 " in str(result_of(ev)), timeout=20, what="A's chunks")

    killed = time.monotonic()
    kill9(a)
    # Any surviving replica may take it (the module's replicas live on between tests); the
    # turn's second model call is the sign (the lease itself is gone once the turn ends).
    taken = wait_until(
        lambda: len(fake_llm.requests_for(marker)) >= 2,
        LEASE_TTL_S + SWEEP_S + 10,
        "another replica to take the turn over",
    )
    # Waiting for the lease alone, none could take it before 30 s (plus up to one sweep).
    assert taken - killed < LEASE_TTL_S - 5, f"takeover took {taken - killed:.1f}s"

    events = on_b.join(60)
    first = result_of(events[0])
    assert_contiguous(ids(events), "subscriber on B across the takeover")
    assert state_of_event(events[-1]) == "TASK_STATE_COMPLETED"
    assert rebuild_answer(events[1:], start=task_text(first["task"])) == "taken over"
    done = rpc_b.get_task(task_id)
    assert task_text(done) == "taken over"
