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
import sys
import uuid
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.e2e.harness import RpcClient, ServerProcess  # noqa: E402
from tests.fakes.fake_llm import FakeLLMServer  # noqa: E402

ENGINE_TOOLS = "tests.e2e_engine.engine_tools:ALL"
ENGINE_HOOKS = "tests.e2e_engine.engine_hooks:PolicyHooks"

BASE_ENV = {
    "AGENT_TOOLS": ENGINE_TOOLS,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "PYTHONPATH": os.pathsep.join([_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
}


@pytest.fixture(scope="module")
def fake_llm():
    with FakeLLMServer() as llm:
        yield llm


@pytest.fixture(scope="module")
def server(request, fake_llm):
    env = {**BASE_ENV, **(getattr(request.module, "SERVER_ENV", {}) or {})}
    proc = ServerProcess(fake_llm.base_url, env=env)
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url, timeout=60.0)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def marker(request):
    """A unique string to put in user messages and key the fake model's replies on."""
    return f"mk-{request.node.name[:24]}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of the server's logs to the report."""
    report = yield
    if report.failed and call.when in ("call", "setup"):
        srv = item.funcargs.get("server") if hasattr(item, "funcargs") else None
        if isinstance(srv, ServerProcess):
            report.sections.append(("a2a-server logs", srv.logs(4000)))
    return report
