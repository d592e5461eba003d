"""Fixtures for the end-to-end tests.

Per test module: one fake OpenAI server (in-process thread) and one real ``a2a-server``
subprocess wired to it.  A module may set ``SERVER_ENV = {...}`` to add/override environment
variables of its server (e.g. ``AGENT_MAX_ITERATIONS``), and ``WAIT_READY = False`` to start
testing as soon as ``/healthz`` answers (by default the fixture also waits for ``/readyz``).

Tests isolate themselves from each other by putting a unique marker (``marker`` fixture) into
their user messages and keying the fake model's script on it (``when_user_contains``).
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


@pytest.fixture(scope="module")
def fake_llm():
    with FakeLLMServer() as llm:
        yield llm


@pytest.fixture(scope="module")
def server(request, fake_llm):
    env = dict(getattr(request.module, "SERVER_ENV", {}) or {})
    wait_ready = getattr(request.module, "WAIT_READY", True)
    proc = ServerProcess(fake_llm.base_url, env=env, wait_ready=wait_ready)
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url)
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
