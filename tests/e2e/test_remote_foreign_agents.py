"""Remote agent tools against foreign agents: the official a2a-sdk server of each generation
(1.x speaking 1.0, 0.3.x speaking 0.3), so our client side is checked by servers we did not write."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import RpcClient, ServerProcess, free_port, send_params, stream_results
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).with_name("foreign") / "sdk_agent.py"
PYTHONS = {"1.0": Path(sys.executable), "0.3": ROOT / ".venv-a2a03" / "bin" / "python"}
TOOLS = {"1.0": "sdk_1_0_agent", "0.3": "sdk_0_3_agent"}


def start_foreign(generation: str) -> tuple[subprocess.Popen[bytes], str]:
    python = PYTHONS[generation]
    assert python.exists(), f"{python} is missing: `make test` (or `make interop-venv`) builds it"
    port = free_port()
    process = subprocess.Popen(
        [str(python), str(AGENT), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        assert process.poll() is None, f"the {generation} agent exited"
        assert time.monotonic() < deadline, f"the {generation} agent did not start"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ours(fake_llm):
    foreign = {generation: start_foreign(generation) for generation in PYTHONS}
    server = ServerProcess(
        fake_llm.base_url,
        env={"AGENT_REMOTE_AGENTS": ",".join(url for _, url in foreign.values())},
    )
    server.start()
    client = RpcClient(server.url)
    try:
        yield client
    finally:
        client.close()
        server.cleanup()
        for process, _ in foreign.values():
            process.kill()
            process.wait()


@pytest.mark.parametrize("generation", ["1.0", "0.3"])
def test_a_foreign_agent_answers_and_its_progress_shows(ours, fake_llm, marker, generation):
    tool = TOOLS[generation]
    fake_llm.script(
        tool_calls([(tool, {"message": "hello there"})], when_user_contains=marker),
        text("It said hello.", when_user_contains=marker),
    )
    request_id = ours.next_id()
    events = ours.stream_all("SendStreamingMessage", send_params(f"ask {marker}"), id=request_id)
    results = stream_results(events, request_id)
    progress = [
        r["statusUpdate"]["status"]["message"]["parts"][0]["text"]
        for r in results
        if "statusUpdate" in r and r["statusUpdate"]["status"].get("message")
    ]
    assert f"{tool}: {generation} is on it" in progress, progress
    assert fake_llm.tool_result(marker) == "echo: hello there"


@pytest.mark.parametrize("generation", ["1.0", "0.3"])
def test_a_foreign_agents_question_is_answered_through_us(ours, fake_llm, marker, generation):
    tool = TOOLS[generation]
    fake_llm.script(
        tool_calls([(tool, {"message": "weather in a city"})], when_user_contains=marker),
        text("Paris it is.", when_user_contains=marker),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    assert task["status"]["message"]["parts"] == [{"text": "Which city?"}]
    done = ours.send("Paris", task_id=task["id"], context_id=task["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert fake_llm.tool_result(marker) == "Sunny in Paris."


@pytest.mark.parametrize("generation", ["1.0", "0.3"])
def test_a_foreign_agent_that_fails_is_a_tool_error(ours, fake_llm, marker, generation):
    tool = TOOLS[generation]
    fake_llm.script(
        tool_calls([(tool, {"message": "please fail"})], when_user_contains=marker),
        text("It failed.", when_user_contains=marker),
    )
    task = ours.send(f"ask {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert fake_llm.tool_result(marker) == (
        "Error: the agent's task ended TASK_STATE_FAILED: it broke"
    )
