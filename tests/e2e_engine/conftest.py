"""Fixtures for the agent-engine end-to-end tests.

Per test module: one fake OpenAI server (in-process thread) and one real ``a2a-server``
subprocess wired to it, loading the tools of ``engine_tools`` (and whatever the module adds).
A module sets ``SERVER_ENV = {...}`` to add/override environment variables of its server
(approvals, hooks, retries, limits).

Tests isolate themselves from each other with a unique ``marker`` in their user messages, on
which the fake model's script is keyed (``when_user_contains``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.harness import RpcClient, ServerProcess

_ROOT = str(Path(__file__).resolve().parents[2])

ENGINE_TOOLS = "tests.e2e_engine.engine_tools:ALL"
ENGINE_HOOKS = "tests.e2e_engine.engine_hooks:PolicyHooks"

BASE_ENV = {
    "AGENT_TOOLS": ENGINE_TOOLS,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONPATH": os.pathsep.join([_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
}


@pytest.fixture(scope="module")
def server(request, fake_llm):
    env = {**BASE_ENV, **(getattr(request.module, "SERVER_ENV", {}) or {})}
    with ServerProcess(fake_llm.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url, timeout=60.0)
    try:
        yield client
    finally:
        client.close()
