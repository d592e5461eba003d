"""Other A2A agents as tools: a second instance of our server is the remote agent."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess, new_id, send_params, stream_results
from tests.fakes.fake_llm import error, text, tool_calls

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
    assert fake_llm.tool_result(f"ask {marker}") == "Sunny all day."
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
    assert "call depth limit reached" in fake_llm.tool_result(marker)


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


def remote_task_for(remote: RpcClient, sub: str) -> dict:
    tasks = remote.result("ListTasks", {})["tasks"]
    [task] = [t for t in tasks if sub in str(t.get("history"))]
    return task


def test_the_sub_agents_progress_shows_in_our_task(clients, fake_llm, marker):
    ours, _ = clients
    sub = f"sum {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=sub),
        text("5", when_user_contains=sub),
        text("It is 5.", when_user_contains=f"ask {marker}"),
    )
    request_id = ours.next_id()
    events = ours.stream_all("SendStreamingMessage", send_params(f"ask {marker}"), id=request_id)
    progress = [
        result["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        for result in stream_results(events, request_id)
        if "statusUpdate" in result
        and result["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
        and result["statusUpdate"]["status"].get("message")
    ]
    # Ours, then the sub-agent's own (relayed, named by the tool), then ours again.
    expected = [
        "calling weather_agent",
        "weather_agent: calling add",
        "weather_agent: add finished",
        "weather_agent finished",
    ]
    assert [line for line in progress if line in expected] == expected, progress
    assert fake_llm.tool_result(f"ask {marker}") == "5"


def test_the_sub_agents_question_is_ours_to_answer(clients, fake_llm, marker):
    ours, remote = clients
    sub = f"weather {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        tool_calls([("ask_user", {"question": "Which city?"})], when_user_contains=sub),
        text("Sunny in Paris.", when_user_contains=sub),
        text("Paris will be sunny.", when_user_contains=f"ask {marker}"),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]
    asked = remote_task_for(remote, sub)
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    done = ours.send("Paris", task_id=task["id"], context_id=task["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert done["artifacts"][0]["parts"][0]["text"] == "Paris will be sunny."
    assert fake_llm.tool_result(f"ask {marker}") == "Sunny in Paris."
    # The answer went down to the same task of the sub-agent, which then finished.
    answered = remote_task_for(remote, sub)
    assert answered["id"] == asked["id"]
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any(
        part.get("text") == "Paris"
        for message in answered["history"]
        if message["role"] == "ROLE_USER"
        for part in message["parts"]
    ), answered["history"]


def test_cancelling_our_task_while_the_sub_agent_asks_cancels_its_task(clients, fake_llm, marker):
    ours, remote = clients
    sub = f"which {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        tool_calls([("ask_user", {"question": "Which city?"})], when_user_contains=sub),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    ours.result("CancelTask", {"id": task["id"]})
    deadline = time.monotonic() + 10
    while (state := remote_task_for(remote, sub)["status"]["state"]) != "TASK_STATE_CANCELED":
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def test_a_sub_agent_that_fails_is_a_tool_error(clients, fake_llm, marker):
    ours, _ = clients
    sub = f"break {marker}-sub"
    fake_llm.script(
        tool_calls([("weather_agent", {"message": sub})], when_user_contains=f"ask {marker}"),
        error(400, "the model refused", when_user_contains=sub),
        text("The weather agent is broken.", when_user_contains=f"ask {marker}"),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    result = fake_llm.tool_result(f"ask {marker}")
    assert result.startswith("Error: the agent's task ended TASK_STATE_FAILED"), result


def test_two_agents_calling_each_other_stop_at_the_depth_limit(fake_llm, marker):
    a = ServerProcess(fake_llm.base_url, env={"AGENT_NAME": "Agent A", "AGENT_MAX_CALL_DEPTH": "2"})
    b = ServerProcess(fake_llm.base_url, env={"AGENT_NAME": "Agent B", "AGENT_MAX_CALL_DEPTH": "2"})
    a.extra_env["AGENT_REMOTE_AGENTS"] = f"{b.url}/.well-known/agent-card.json"
    b.extra_env["AGENT_REMOTE_AGENTS"] = f"{a.url}/.well-known/agent-card.json"
    b.start()  # A is not up yet: B keeps trying its card in the background
    a.start()
    client = RpcClient(a.url)
    try:
        deadline = time.monotonic() + 20
        while httpx.get(b.url + "/readyz", timeout=5).json().get("toolSourcesDown"):
            assert time.monotonic() < deadline, "B never reached A's card"
            time.sleep(0.2)
        hop = [f"hop{n} {marker}" for n in range(4)]
        fake_llm.script(
            tool_calls([("agent_b", {"message": hop[1]})], when_user_contains=hop[0]),
            tool_calls([("agent_a", {"message": hop[2]})], when_user_contains=hop[1]),
            tool_calls([("agent_b", {"message": hop[3]})], when_user_contains=hop[2]),
            text("A stops here.", when_user_contains=hop[2]),
            text("B heard A.", when_user_contains=hop[1]),
            text("A heard B.", when_user_contains=hop[0]),
        )
        task = client.send(hop[0])
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        assert task["artifacts"][0]["parts"][0]["text"] == "A heard B."
        assert "call depth limit reached (2)" in fake_llm.tool_result(hop[2])
        assert fake_llm.requests_for(hop[3]) == []  # the third call never left A
    finally:
        client.close()
        a.cleanup()
        b.cleanup()
