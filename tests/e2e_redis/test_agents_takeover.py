"""AGENTS_FILE across replicas: a turn of the second agent whose replica is killed (kill -9) is
taken over by another replica and goes on with that agent's prompt and tools, in its scope."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from stores.base import ANONYMOUS
from stores.redis.keys import RedisKeys
from stores.tenants import tenant_owner
from tests.e2e.harness import A2A_HEADERS, send_params
from tests.e2e.wire import artifact_text
from tests.e2e_redis.support import kill9, wait_until
from tests.fakes.fake_llm import text

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

LEASE_TTL_S = 3
SERVER_ENV = {
    "LEASE_TTL_S": str(LEASE_TTL_S),
    "AGENTS_FILE": str(Path(__file__).with_name("agents.yaml")),
}
# lease expiry + one recovery sweep (every LEASE_TTL_S/3) + slack for a loaded 2-core machine
TAKEOVER_BUDGET_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 4
AGENT = "research"
OWNER = tenant_owner(AGENT, ANONYMOUS)


def get(url: str, path: str) -> httpx.Response:
    return httpx.get(url + path, headers=A2A_HEADERS, trust_env=False, timeout=30)


def test_a_turn_of_the_second_agent_is_taken_over_with_its_prompt(
    cluster, replicas, fake_llm, marker, redis_client, prefix
):
    _, b = replicas
    (victim,) = cluster.spawn(1)
    fake_llm.script(
        text("lost with its replica", delay=30.0, when_user_contains=marker, times=1),
        text("Taken over.", when_user_contains=marker),
    )
    params = send_params(f"take me over {marker}", configuration={"returnImmediately": True})
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    sent = httpx.post(
        f"{victim.url}/{AGENT}/", json=body, headers=A2A_HEADERS, trust_env=False, timeout=30
    )
    task_id = sent.json()["result"]["task"]["id"]
    lease = RedisKeys(prefix).lease(OWNER, task_id)

    def held_by_victim() -> bool:
        holder = redis_client.hget(lease, "holder")
        return holder is not None and f"-{victim.proc.pid}-".encode() in holder

    wait_until(held_by_victim, 20, "the victim to hold the turn's lease")
    fake_llm.wait_for_requests(marker, 1, timeout=10)
    kill9(victim)

    def completed() -> bool:
        task = get(b.url, f"/{AGENT}/tasks/{task_id}").json()
        return task["status"]["state"] == "TASK_STATE_COMPLETED"

    wait_until(completed, TAKEOVER_BUDGET_S + 10, "the turn to be taken over and complete")
    assert artifact_text(get(b.url, f"/{AGENT}/tasks/{task_id}").json()) == "Taken over."
    calls = fake_llm.requests_for(marker)
    assert len(calls) == 2, calls
    for call in calls:  # the victim's call, then the one of the replica that took over
        system = " ".join(m["content"] for m in call["messages"] if m["role"] == "system")
        assert "PROMPT-RESEARCH" in system and "PROMPT-TRIAGE" not in system, system
        assert "add" in {tool["function"]["name"] for tool in call.get("tools") or []}
    # Not the root's (the first agent's) task; its keys are the agent's owner's.
    assert get(b.url, f"/tasks/{task_id}").status_code == 404
    assert redis_client.exists(RedisKeys(prefix).task(OWNER, task_id)) == 1
