"""Fixtures for the multi-replica Redis end-to-end tests.

Per test module: one fake OpenAI server (in-process thread), a unique Redis key prefix, and a
`cluster` of two real `a2a-server` processes (replicas A and B) on free loopback ports, sharing
the Redis at REDIS_URL (``A2A_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/0``) under that
prefix. A module may set ``SERVER_ENV = {...}`` (e.g. ``LEASE_TTL_S``). At teardown the replicas
stop and every key under the prefix is deleted (SCAN MATCH; fine in tests, never in the product).

Tests isolate themselves from each other with a unique `marker` in their user messages, keying
the fake model's script on it (``when_user_contains``).
"""

from __future__ import annotations

import uuid

import pytest

from tests.e2e_redis.store_view import RedisView
from tests.e2e_redis.support import REDIS_URL, Cluster, connect, delete_prefix


@pytest.fixture(scope="module")
def redis_url():
    """The Redis the replicas share (tests/e2e_redis_cluster overrides it with a cluster)."""
    return REDIS_URL


@pytest.fixture(scope="module")
def redis_client(redis_url):
    try:
        client = connect(redis_url)
    except Exception as exc:
        pytest.fail(f"these tests need a Redis at {redis_url} ({exc!r})")
    yield client
    client.close()


@pytest.fixture(scope="module")
def prefix(request, redis_client):
    """A key prefix of the module's own; its keys are deleted after the module's replicas stop."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    p = f"a2a-e2e-{name}-{uuid.uuid4().hex[:10]}"
    yield p
    delete_prefix(redis_client, p)


@pytest.fixture(scope="module")
def store_view(redis_client, prefix):
    """What the tests ask the stores behind the replicas' backs (tests/e2e_redis/store_view.py):
    here the Redis keys under the module's prefix."""
    return RedisView(redis_client, prefix)


@pytest.fixture(scope="module")
def tool_log(tmp_path_factory):
    return tmp_path_factory.mktemp("tool-log") / "slow_tool.log"


@pytest.fixture(scope="module")
def cluster(request, fake_llm, prefix, tool_log, redis_url):
    env = dict(getattr(request.module, "SERVER_ENV", {}) or {})
    with Cluster(fake_llm.base_url, redis_url=redis_url, prefix=prefix, tool_log=tool_log,
                 extra_env=env) as c:  # fmt: skip
        yield c


@pytest.fixture(scope="module")
def replicas(cluster):
    """(A, B): two replicas started in parallel."""
    a, b = cluster.spawn(2)
    return a, b


@pytest.fixture(scope="module")
def rpc_a(cluster, replicas):
    return cluster.client(replicas[0])


@pytest.fixture(scope="module")
def rpc_b(cluster, replicas):
    return cluster.client(replicas[1])
