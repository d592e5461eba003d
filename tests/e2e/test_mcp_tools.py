"""Tools from MCP servers (the official SDK's FastMCP, written for these tests), over stdio and
over streamable HTTP on 127.0.0.1, configured the way users do: AGENT_MCP_SERVERS."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import ServerProcess, free_port
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

MCP_SERVER = Path(__file__).with_name("mcp") / "server.py"
HTTP_PORT = free_port()
SERVERS = {
    "mcpServers": {
        "stdio": {"command": sys.executable, "args": [str(MCP_SERVER), "stdio"]},
        "http": {"url": f"http://127.0.0.1:{HTTP_PORT}/mcp"},
        "missing": {"command": "/no/such/mcp-server"},
    }
}
# Both servers have the same tools (and `add` is a local function tool too): a name two sources
# share is qualified with its source's name (`stdio_add`, `http_add`); the local tool keeps it.
SERVER_ENV = {"AGENT_MCP_SERVERS": json.dumps(SERVERS), "AGENT_TOOL_TIMEOUT_S": "3"}


@pytest.fixture(scope="module", autouse=True)
def http_mcp_server():
    process = subprocess.Popen(
        [sys.executable, str(MCP_SERVER), "http", str(HTTP_PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{HTTP_PORT}/mcp", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield process
    process.kill()
    process.wait()


def run_call(rpc, fake_llm, marker: str, name: str, arguments: dict) -> str:
    fake_llm.script(
        tool_calls([(name, arguments)], when_user_contains=marker),
        text("done", when_user_contains=marker),
    )
    task = rpc.send(f"use {name} {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    return fake_llm.tool_result(marker)


def test_stdio_and_http_tools_run_in_a_turn(rpc, fake_llm, marker):
    assert run_call(rpc, fake_llm, marker, "stdio_add", {"a": 2, "b": 3}) == "2 + 3 = 5"
    assert run_call(rpc, fake_llm, f"{marker}-h", "http_shout", {"text": "hi"}) == "HI"
    assert run_call(rpc, fake_llm, f"{marker}-l", "add", {"a": 2, "b": 3}) == "5"  # the local one


def test_the_model_is_offered_every_sources_tools(rpc, fake_llm, marker):
    fake_llm.script(text("ok", when_user_contains=marker))
    rpc.send(f"list {marker}")
    [request] = fake_llm.requests_for(marker)
    names = {tool["function"]["name"] for tool in request["tools"]}
    assert {"add", "stdio_add", "stdio_shout", "http_add", "http_slow", "http_shout"} <= names


def test_the_card_lists_them_as_skills(rpc):
    card = rpc.get("/.well-known/agent-card.json").json()
    skills = {skill["name"] for skill in card["skills"]}
    assert {"add", "stdio_add", "http_shout"} <= skills


def test_readiness_names_the_source_that_is_down(rpc):
    ready = rpc.get("/readyz")
    assert ready.status_code == 200
    down = ready.json()["toolSourcesDown"]
    assert set(down) == {"missing"}
    assert "does not exist" in down["missing"]


def test_a_slow_tool_is_a_tool_error_not_a_hung_turn(rpc, fake_llm, marker):
    result = run_call(rpc, fake_llm, marker, "http_slow", {"seconds": 30})
    assert result.startswith("Error:") and "timed out" in result


def test_a_server_that_exits_mid_call_is_an_error_then_comes_back(rpc, fake_llm, marker):
    result = run_call(rpc, fake_llm, marker, "stdio_crash", {})
    assert result.startswith("Error:") and "'stdio'" in result
    deadline = time.monotonic() + 20
    while True:  # the provider reconnects (a new process) with backoff
        again = run_call(
            rpc, fake_llm, f"{marker}-{time.monotonic()}", "stdio_add", {"a": 1, "b": 1}
        )
        if again == "1 + 1 = 2" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert again == "1 + 1 = 2"


def test_a_config_that_does_not_parse_is_one_broken_source(fake_llm):
    server = ServerProcess(fake_llm.base_url, env={"AGENT_MCP_SERVERS": "{not json"})
    server.start()
    try:
        ready = httpx.get(server.url + "/readyz", timeout=10).json()
        assert ready["status"] == "ready"
        assert "does not parse" in ready["toolSourcesDown"]["mcp"]
        assert "AGENT_MCP_SERVERS is not usable" in server.logs(limit=None)
    finally:
        server.cleanup()


def test_the_offline_demo_model_runs_a_tool_the_user_names(fake_llm):
    # What `make run` serves (no LLM_MODEL), with a tool of the user's: `add 2 3` runs it.
    server = ServerProcess(fake_llm.base_url, env={"LLM_MODEL": ""})
    server.start()
    try:
        rpc_client = httpx.Client(base_url=server.url, timeout=20)
        params = {
            "message": {"messageId": "m-demo", "role": "ROLE_USER", "parts": [{"text": "add 2 3"}]}
        }
        body = rpc_client.post(
            "/",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params},
            headers={"A2A-Version": "1.0"},
        ).json()
        task = body["result"]["task"]
        answer = task["artifacts"][0]["parts"][0]["text"]
        assert "The tool said: 5." in answer
        assert task["metadata"]["usage"]["toolCalls"] == 1
        rpc_client.close()
    finally:
        server.cleanup()


def test_a_tool_added_at_run_time_is_offered_once_the_server_says_so(rpc, fake_llm, marker):
    """The server's tools/list_changed notification: the card and the next turn see `secret`."""
    assert run_call(rpc, fake_llm, marker, "stdio_unlock", {}) == "unlocked"
    deadline = time.monotonic() + 10
    while "secret" not in {
        s["name"] for s in rpc.get("/.well-known/agent-card.json").json()["skills"]
    }:
        assert time.monotonic() < deadline, "the card never showed the new tool"
        time.sleep(0.1)
    assert run_call(rpc, fake_llm, f"{marker}-s", "secret", {}) == "the secret is 42"
