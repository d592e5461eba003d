"""Every Redis key the replicas write expires: after a mix of turns on two replicas (tools, a
second turn in a context, streams and resubscribes, a cross-replica cancel, a task waiting for
input, a turn in flight, REST), SCAN the module's prefix: each key has a TTL > 0 (and none beyond
the configured bound)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.harness import A2A_HEADERS, send_params
from tests.e2e_redis.support import (
    describe_events,
    keys_with_prefix,
    open_sse,
    result_of,
    rpc_body,
    state_of_event,
    task_text,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = [pytest.mark.redis, pytest.mark.timeout(90)]

TASK_TTL_S = 3600
SERVER_ENV = {"TASK_TTL_S": str(TASK_TTL_S), "LEASE_TTL_S": "6"}
# the list indexes outlive their tasks (2x); nothing may live longer than that
MAX_TTL_MS = 2 * TASK_TTL_S * 1000

EXPECTED_KINDS = {
    "task", "journal", "checkpoint", "lease", "conversation", "units", "claim", "claim-fence",
    "tasks",
    "tasks-by-state", "context-tasks", "context-tasks-by-state", "leases",
}  # fmt: skip


def _kind(prefix: str, key: str) -> str:
    return key[len(prefix) + 1 :].split(":", 1)[0]


def _ttl_report(redis_client, prefix) -> tuple[dict[str, int], set[str]]:
    ttls: dict[str, int] = {}
    for key in keys_with_prefix(redis_client, prefix):
        pttl = redis_client.pttl(key)
        if pttl == -2:  # gone between SCAN and PTTL (a lease released meanwhile)
            continue
        ttls[key] = pttl
    return ttls, {_kind(prefix, k) for k in ttls}


def _assert_all_expire(ttls: dict[str, int]) -> None:
    no_ttl = {k: v for k, v in ttls.items() if v <= 0}
    assert not no_ttl, f"keys without a TTL (PTTL -1 = persistent): {no_ttl}"
    too_long = {k: v for k, v in ttls.items() if v > MAX_TTL_MS}
    assert not too_long, f"keys with a TTL beyond 2 x TASK_TTL_S: {too_long}"


def test_every_key_has_a_ttl(replicas, rpc_a, rpc_b, fake_llm, marker, redis_client, prefix):
    a, b = replicas

    # 1. a tool turn on A, then a second turn in the same context on B
    m1 = f"tool turn {marker}"
    fake_llm.script(
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=m1),
        text("it is 5", when_user_contains=m1),
    )
    t1 = rpc_a.send(m1)
    assert t1["status"]["state"] == "TASK_STATE_COMPLETED" and task_text(t1) == "it is 5"
    m2 = f"second turn {marker}"
    fake_llm.script(text("still 5", when_user_contains=m2))
    t2 = rpc_b.send(m2, context_id=t1["contextId"])
    assert t2["status"]["state"] == "TASK_STATE_COMPLETED"

    # 2. a stream on A, resubscribed on B (snapshot) and again with Last-Event-ID
    m3 = f"stream {marker}"
    fake_llm.script(text([f"s{i} " for i in range(20)], chunk_delay=0.05, when_user_contains=m3))
    seen = []
    with open_sse(a.url, "/", rpc_body("SendStreamingMessage", send_params(m3), "s")) as s:
        for ev in s.sse_events():
            seen.append(ev)
            if len(seen) == 5:
                break
    t3 = result_of(seen[0])["task"]["id"]
    with open_sse(b.url, "/", rpc_body("SubscribeToTask", {"id": t3}, "r"),
                  headers={"Last-Event-ID": seen[-1].id}) as s:  # fmt: skip
        rest = list(s.sse_events())
    assert state_of_event(rest[-1]) == "TASK_STATE_COMPLETED", describe_events(rest)

    # 3. a turn on A canceled from B
    m4 = f"cancel me {marker}"
    fake_llm.script(text("never", delay=20, when_user_contains=m4))
    t4 = rpc_a.send(m4, configuration={"returnImmediately": True})
    fake_llm.wait_for_requests(m4, 1, timeout=15)
    assert rpc_b.result("CancelTask", {"id": t4["id"]})["status"]["state"] == "TASK_STATE_CANCELED"

    # 4. a task left waiting for input (its checkpoint and context claim stay)
    m5 = f"ask me {marker}"
    fake_llm.script(
        tool_calls([("ask_user", {"question": "Which colour?"})], when_user_contains=m5)
    )
    t5 = rpc_b.send(m5)
    assert t5["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", t5["status"]

    # 5. a REST turn and a listing
    m6 = f"rest {marker}"
    fake_llm.script(text("over rest", when_user_contains=m6))
    with httpx.Client(base_url=b.url, trust_env=False, timeout=30) as http:
        r = http.post("/message:send", json=send_params(m6), headers=A2A_HEADERS)
        assert r.status_code == 200, r.text
        r = http.get("/tasks", params={"contextId": t1["contextId"]}, headers=A2A_HEADERS)
        assert r.status_code == 200 and len(r.json()["tasks"]) == 2, r.text

    # 6. a turn in flight on A while we look (lease, running-lease index, checkpoint, claim)
    m7 = f"in flight {marker}"
    fake_llm.script(text("late", delay=20, when_user_contains=m7))
    t7 = rpc_a.send(m7, configuration={"returnImmediately": True})
    fake_llm.wait_for_requests(m7, 1, timeout=15)

    ttls, kinds = _ttl_report(redis_client, prefix)
    _assert_all_expire(ttls)
    missing = EXPECTED_KINDS - kinds
    assert not missing, f"the scenario did not produce keys of kinds {missing}: {sorted(ttls)}"

    # and once the in-flight turn is canceled too
    assert rpc_b.result("CancelTask", {"id": t7["id"]})["status"]["state"] == "TASK_STATE_CANCELED"
    ttls, _ = _ttl_report(redis_client, prefix)
    _assert_all_expire(ttls)
