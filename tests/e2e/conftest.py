"""Fixtures for the end-to-end tests.

Per test module: one fake OpenAI server (in-process thread) and one real ``a2a-server``
subprocess wired to it.  A module may set ``SERVER_ENV = {...}`` to add/override environment
variables of its server (e.g. ``AGENT_MAX_ITERATIONS``), and ``WAIT_READY = False`` to start
testing as soon as ``/healthz`` answers (by default the fixture also waits for ``/readyz``).

Tests isolate themselves from each other by putting a unique marker (``marker`` fixture) into
their user messages and keying the fake model's script on it (``when_user_contains``).
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import RpcClient, ServerProcess


@pytest.fixture(scope="module")
def server(request, fake_llm):
    env = dict(getattr(request.module, "SERVER_ENV", {}) or {})
    wait_ready = getattr(request.module, "WAIT_READY", True)
    with ServerProcess(fake_llm.base_url, env=env, wait_ready=wait_ready).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url)
    try:
        yield client
    finally:
        client.close()
