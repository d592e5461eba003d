"""A2A 1.1 generations on two replicas sharing one Redis: the journal's positions, so the same on
every replica and across a takeover (kill -9 of the replica running the turn); the long poll on one
replica wakes at a write made on the other (the journal's blocking read, not a poll).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.e2e.harness import new_id
from tests.e2e_redis.support import (
    BackgroundStream,
    assert_contiguous,
    ids,
    kill9,
    open_sse,
    result_of,
    rpc_body,
    state_of_event,
    wait_for_holder,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3
# The long poll's cap far above any wake-up on a loaded machine, so that a poll answered at the
# write and one answered at the cap are told apart by a wide margin (not by a tight deadline).
LONG_POLL_MAX_S = 120
SERVER_ENV = {"LEASE_TTL_S": str(LEASE_TTL_S), "A2A_LONG_POLL_MAX_S": str(LONG_POLL_MAX_S)}
V11 = {"A2A-Version": "1.1"}
TAKEOVER_BUDGET_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 4


@pytest.fixture(scope="module")
def three(cluster):
    """A and B, and V: the victim a test kills."""
    return cluster.spawn(3)


def user(text_: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": new_id("m-"), "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def rpc(url: str, method: str, params: Any) -> dict[str, Any]:
    with httpx.Client(trust_env=False, timeout=30) as client:
        response = client.post(url + "/", json=rpc_body(method, params), headers=V11)
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


def generation(event) -> int:
    result = result_of(event)
    (kind,) = result.keys()
    return int(result[kind]["generation"])


def wait_for_any_holder(redis_client, prefix, task_id, replicas):
    """The replica that takes the turn over (either may)."""
    deadline = time.monotonic() + TAKEOVER_BUDGET_S
    while time.monotonic() < deadline:
        for replica in replicas:
            try:
                wait_for_holder(redis_client, prefix, task_id, replica, 0)
                return replica
            except AssertionError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"nobody took {task_id} over")


def subscribe(url: str, task_id: str, *, last_event_id: str | None = None) -> BackgroundStream:
    headers = {**V11, **({"Last-Event-ID": last_event_id} if last_event_id else {})}
    body = rpc_body("SubscribeToTask", {"id": task_id}, "sub")
    return BackgroundStream(
        lambda: open_sse(url, "/", body, headers=headers, request_id="sub", read_timeout=40)
    ).start()


def test_generations_stay_contiguous_across_a_takeover(
    three, cluster, fake_llm, marker, redis_client, prefix
):
    a, b, victim = three
    chunks = [f"c{i:02d} " for i in range(25)]
    fake_llm.script(
        text(chunks, chunk_delay=0.15, when_user_contains=marker),  # the victim's (killed)
        text(chunks, chunk_delay=0.02, when_user_contains=marker),  # the taker's
    )
    started = rpc(
        victim.url,
        "SendMessage",
        {"message": user(f"long answer {marker}"), "configuration": {"returnImmediately": True}},
    )
    task_id = started["task"]["id"]
    on_b = subscribe(b.url, task_id)
    on_b.wait_for(lambda ev: "artifactUpdate" in result_of(ev), timeout=20, what="a chunk on B")
    kill9(victim)
    taker = a if wait_for_any_holder(redis_client, prefix, task_id, (a, b)) == a else b
    assert taker in (a, b)
    events = on_b.join(60)
    assert state_of_event(events[-1]) == "TASK_STATE_COMPLETED"
    generations = [generation(event) for event in events]
    assert generations == ids(events), "the generation is the SSE id (the journal position)"
    assert_contiguous(generations, "subscriber on B across the takeover")
    # The task on either replica: the last event's generation.
    for replica in (a, b):
        assert int(rpc(replica.url, "GetTask", {"id": task_id})["generation"]) == generations[-1]
    # A replay of the whole journal from the other replica: 2, 3, ... to the end, no gap.
    replay = subscribe(a.url, task_id, last_event_id="1").join(30)
    replayed = [generation(event) for event in replay]
    assert replayed == list(range(2, generations[-1] + 1)), replayed


def test_a_long_poll_on_one_replica_wakes_at_a_write_on_the_other(three, fake_llm, marker):
    a, b, _ = three
    fake_llm.script(tool_calls([("ask_user", {"question": "Which?"})], when_user_contains=marker))
    fake_llm.script(text("Answered.", when_user_contains=marker))
    task = rpc(a.url, "SendMessage", {"message": user(f"ask {marker}")})["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    polled: dict[str, Any] = {}

    def poll() -> None:
        begun = time.monotonic()
        params = {"id": task["id"], "currentGeneration": task["generation"]}
        polled.update(task=rpc(b.url, "GetTask", params), waited=time.monotonic() - begun)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(1.0)
    assert poller.is_alive(), "the long poll answered before the task moved on"
    answer = user(f"this {marker}", taskId=task["id"], contextId=task["contextId"])
    rpc(a.url, "SendMessage", {"message": answer, "configuration": {"returnImmediately": True}})
    poller.join(LONG_POLL_MAX_S)
    assert 0.9 <= polled["waited"] < LONG_POLL_MAX_S / 2, polled
    assert int(polled["task"]["generation"]) > int(task["generation"])
