"""Tenants across replicas sharing one Redis: a task made within a tenant over JSON-RPC on one
replica is followed and read over HTTP+JSON on another, within its tenant only; and a turn whose
replica dies is taken over within its tenant (the owner in the lease carries the tenant)."""

from __future__ import annotations

import httpx
import pytest

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from stores.tenants import tenant_owner
from tests.e2e.harness import A2A_HEADERS, SSEStream, send_params, state_of
from tests.e2e.wire import artifact_text
from tests.e2e_redis.support import kill9, wait_until
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3
SERVER_ENV = {"LEASE_TTL_S": str(LEASE_TTL_S)}
# lease expiry + one recovery sweep (every LEASE_TTL_S/3) + slack for a loaded 2-core machine
TAKEOVER_BUDGET_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 4
TENANT = "acme"
OWNER = tenant_owner(TENANT, ANONYMOUS)


def start_within_the_tenant(url: str, message: str) -> dict:
    params = {**send_params(message, configuration={"returnImmediately": True}), "tenant": TENANT}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    answer = httpx.post(url + "/", json=body, headers=A2A_HEADERS, trust_env=False, timeout=30)
    return answer.json()["result"]["task"]


def get(url: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers=A2A_HEADERS, trust_env=False, timeout=30)


def test_made_on_one_replica_followed_and_read_on_another(replicas, fake_llm, marker,
                                                          redis_client, prefix):  # fmt: skip
    a, b = replicas
    fake_llm.script(text(["made on A, ", "read on B"], delay=1.0, when_user_contains=marker))
    task_id = start_within_the_tenant(a.url, f"hi {marker}")["id"]
    with httpx.stream(
        "GET", f"{b.url}/{TENANT}/tasks/{task_id}:subscribe", headers=A2A_HEADERS,
        trust_env=False, timeout=30,
    ) as response:  # fmt: skip
        assert response.status_code == 200, response.read()
        events = [event.data for event in SSEStream(response, None).sse_events()]
    assert state_of(events[-1]) == "TASK_STATE_COMPLETED", events
    task = get(b.url, f"/{TENANT}/tasks/{task_id}").json()
    assert artifact_text(task) == "made on A, read on B"
    for elsewhere in (f"/tasks/{task_id}", f"/beta/tasks/{task_id}"):
        assert get(b.url, elsewhere).status_code == 404, elsewhere
    # In Redis, the task is the tenant's owner's, and no other owner has it.
    keys = RedisKeys(prefix)
    assert redis_client.exists(keys.task(OWNER, task_id)) == 1
    assert redis_client.exists(keys.task(ANONYMOUS, task_id)) == 0
    assert redis_client.zscore(keys.owner_tasks(OWNER), task_id) is not None


def test_a_turn_taken_over_stays_within_its_tenant(cluster, replicas, fake_llm, marker,
                                                   redis_client, prefix):  # fmt: skip
    _, b = replicas
    (victim,) = cluster.spawn(1)
    fake_llm.script(
        text("lost with its replica", delay=30.0, when_user_contains=marker, times=1),
        text("Taken over.", when_user_contains=marker),
    )
    task_id = start_within_the_tenant(victim.url, f"take me over {marker}")["id"]
    lease = RedisKeys(prefix).lease(OWNER, task_id)

    def held_by_victim() -> bool:
        holder = redis_client.hget(lease, "holder")
        return holder is not None and f"-{victim.proc.pid}-".encode() in holder

    wait_until(held_by_victim, 20, "the victim to hold the turn's lease")
    fake_llm.wait_for_requests(marker, 1, timeout=10)
    kill9(victim)

    def completed() -> bool:
        task = get(b.url, f"/{TENANT}/tasks/{task_id}").json()
        return task["status"]["state"] == "TASK_STATE_COMPLETED"

    wait_until(completed, TAKEOVER_BUDGET_S + 10, "the turn to be taken over and complete")
    assert artifact_text(get(b.url, f"/{TENANT}/tasks/{task_id}").json()) == "Taken over."
    assert get(b.url, f"/tasks/{task_id}").status_code == 404
