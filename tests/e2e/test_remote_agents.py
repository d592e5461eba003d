"""Other A2A agents as tools: a second instance of our server is the remote agent."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess, new_id
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def agents(fake_llm):
    """(ours, remote): ours has the remote agent as a tool (over its card), and one that is down."""
    remote = ServerProcess(fake_llm.base_url, env={"AGENT_NAME": "Weather Agent"})
    remote.start()
    ours = ServerProcess(
        fake_llm.base_url,
        env={
            "AGENT_REMOTE_AGENTS": f"{remote.url}/.well-known/agent-card.json,"
            "http://127.0.0.1:9/.well-known/agent-card.json",
            "AGENT_MAX_CALL_DEPTH": "2",
        },
    )
    ours.start()
    try:
        yield ours, remote
    finally:
        ours.cleanup()
        remote.cleanup()


@pytest.fixture(scope="module")
def clients(agents):
    ours, remote = agents
    a, b = RpcClient(ours.url), RpcClient(remote.url)
    yield a, b
    a.close()
    b.close()


def tool_result(fake_llm, marker: str) -> str:
    for request in fake_llm.requests_for(marker):
        for message in request["messages"]:
            if message.get("role") == "tool":
                return str(message["content"])
    raise AssertionError("no tool result")


def test_the_remote_agent_answers_as_a_tool(clients, fake_llm, marker):
    ours, remote = clients
    sub = f"forecast {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        text("Sunny all day.", when_user_contains=sub),
        text("It will be sunny.", when_user_contains=f"ask {marker}"),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert task["artifacts"][0]["parts"][0]["text"] == "It will be sunny."
    assert tool_result(fake_llm, f"ask {marker}") == "Sunny all day."
    # The remote agent ran a task of its own, one call deep.
    tasks = remote.result("ListTasks", {})["tasks"]
    [remote_task] = [t for t in tasks if sub in str(t["history"][0])]
    assert remote_task["history"][0]["metadata"]["a2aCallDepth"] == 1


def test_the_call_depth_limit_stops_agents_calling_agents(clients, fake_llm, marker):
    ours, _ = clients
    fake_llm.script(
        tool_calls([("weather_agent", {"message": "x"})], when_user_contains=marker),
        text("gave up", when_user_contains=marker),
    )
    message = {
        "messageId": new_id("m-"),
        "role": "ROLE_USER",
        "parts": [{"text": f"deep {marker}"}],
        "metadata": {"a2aCallDepth": 2},  # as if two agents deep already
    }
    task = ours.result("SendMessage", {"message": message})["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "call depth limit reached" in tool_result(fake_llm, marker)


def test_cancelling_our_task_cancels_the_sub_agents(clients, fake_llm, marker):
    ours, remote = clients
    sub = f"slow {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"go {marker}"),
        text("late", delay=20, when_user_contains=sub),
    )
    task = ours.send(f"go {marker}", configuration={"returnImmediately": True})
    fake_llm.wait_for_requests(sub, 1, timeout=15)  # the remote agent's model call is running
    ours.result("CancelTask", {"id": task["id"]})
    deadline = time.monotonic() + 10
    while True:
        tasks = remote.result("ListTasks", {"historyLength": 1})["tasks"]
        [remote_task] = [t for t in tasks if sub in str(t.get("history"))]
        if remote_task["status"]["state"] == "TASK_STATE_CANCELED":
            break
        assert time.monotonic() < deadline, remote_task["status"]
        time.sleep(0.1)


def test_an_agent_that_is_down_is_named_by_readiness(agents):
    ours, _ = agents
    ready = httpx.get(ours.url + "/readyz", timeout=10).json()
    assert ready["status"] == "ready"
    [(name, why)] = ready["toolSourcesDown"].items()
    assert "127.0.0.1:9" in why and "not usable" in why
