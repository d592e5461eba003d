"""Fixtures for the provider end-to-end tests.

Per test module: one provider fake (the module's `wire` fixture) and one real `a2a-server`
subprocess whose `LLM_MODEL` / `LLM_API_BASE` point at it, so every model call goes through
the real LiteLLM adapter in the provider's own wire format. Tests isolate themselves with the
`marker` fixture, on which the fake's replies are keyed.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import RpcClient, ServerProcess

SYSTEM_PROMPT = "You are the provider test agent. Marker SYSPROMPT-49."


@pytest.fixture(scope="module")
def server(wire):
    env = {
        "LLM_MODEL": wire.model,
        "LLM_API_KEY": "sk-test",
        "AGENT_SYSTEM_PROMPT": SYSTEM_PROMPT,
        "AGENT_TOOLS": "tests.e2e.tools_module:add",
    }
    # The LiteLLM import alone takes 30 s and more on a loaded machine: give readiness room.
    with ServerProcess(wire.base_url, env=env, start_timeout=120).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url, timeout=60.0)
    try:
        yield client
    finally:
        client.close()
