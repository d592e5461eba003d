"""A turn's A2A extensions outlive its replica: kill -9 of the replica running a turn whose
request activated extensions; the replica that takes the turn over from its checkpoint runs it
with the same ones (its hooks see them, the answer is stamped by the timestamp example)."""

from __future__ import annotations

import json

import pytest

from examples.timestamp_extension import TIMESTAMP_URI
from tests.e2e.extension_plugins import SEEN_KEY
from tests.e2e.harness import send_params
from tests.e2e_redis.support import kill9, lease_holder, wait_for_holder
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3
TRACE_URI = "https://ext.example/traceability/v1"
SERVER_ENV = {
    "LEASE_TTL_S": str(LEASE_TTL_S),
    "A2A_EXTENSIONS": json.dumps([{"uri": TRACE_URI}]),
    "AGENT_HOOKS": "examples.timestamp_extension:TimestampExtension,"
    "tests.e2e.extension_plugins:ExtensionsSeen",
}
# lease expiry + one recovery sweep (every LEASE_TTL_S/3) + slack for a loaded 2-core machine
TAKEOVER_BUDGET_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 4


def test_a_turn_taken_over_keeps_the_extensions_its_request_activated(
    cluster, fake_llm, marker, redis_client, prefix
):
    a, b = cluster.spawn(2)
    fake_llm.script(
        text("never sent", delay=60, when_user_contains=marker),  # A's model call: A dies in it
        text("Taken over.", when_user_contains=marker),  # B's, from the checkpoint
    )
    headers = {"A2A-Extensions": f"{TIMESTAMP_URI}, {TRACE_URI}, https://ext.example/other"}
    params = send_params(f"stamp {marker}", configuration={"returnImmediately": True})
    task = cluster.client(a).result("SendMessage", params, headers=headers)["task"]
    fake_llm.wait_for_requests(marker, 1, timeout=20)  # the turn checkpointed, then called
    assert f"-{a.proc.pid}-" in (lease_holder(redis_client, prefix, task["id"]) or "")

    kill9(a)
    wait_for_holder(redis_client, prefix, task["id"], b, TAKEOVER_BUDGET_S)
    done = cluster.client(b).wait_for_state(task["id"], "TASK_STATE_COMPLETED", timeout=30)

    assert len(fake_llm.requests_for(marker)) == 2  # A's, cut short; B's
    metadata = done["artifacts"][0]["metadata"]
    assert metadata[SEEN_KEY] == sorted([TIMESTAMP_URI, TRACE_URI])
    assert metadata[TIMESTAMP_URI]["timestamp"].endswith("Z")
    assert done["history"][-1]["metadata"] == metadata
