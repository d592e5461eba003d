"""Fixtures of the soak and chaos suite: real `a2a-server` processes attacked from outside.

* `gated_llm`: one OpenAI-compatible fake model for the whole directory (tests/e2e_chaos/gate.py)
  whose replies to a marker wait until the test opens that marker's gate.
* `memory_target` / `redis_target`: the standard victims, started once for the directory: one
  in-memory server, and two replicas (A, B) on the Redis at REDIS_URL under a key prefix of their
  own, all with admission limits lower than the bursts thrown at them (LIMITS_ENV).
* `target`: each of the two in turn (the Redis one carries the `redis` mark).

Modules that break or stop servers (poison, faults, SIGTERM, double writers, pause, partition,
Redis crash) start their own.
Tests never share a conversation or a marker: every request carries the test's own marker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e_chaos.gate import GatedLLM
from tests.e2e_chaos.targets import LIMITS_ENV, Target, memory_server, redis_replicas
from tests.e2e_redis.support import REDIS_URL, connect


@pytest.fixture(scope="package")
def gated_llm() -> Iterator[GatedLLM]:
    with GatedLLM() as llm:
        yield llm


@pytest.fixture(scope="package")
def main_redis() -> Iterator[Any]:
    try:
        client = connect(REDIS_URL)
    except Exception as exc:
        pytest.fail(f"these tests need a Redis at {REDIS_URL} ({exc!r})")
    yield client
    client.close()


@pytest.fixture(scope="package")
def memory_target(gated_llm: GatedLLM) -> Iterator[Target]:
    with memory_server(gated_llm.base_url, LIMITS_ENV) as target:
        yield target


@pytest.fixture(scope="package")
def redis_target(
    gated_llm: GatedLLM, main_redis: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    workdir = tmp_path_factory.mktemp("chaos-tools")
    with redis_replicas(gated_llm.base_url, workdir, name="shared", env=LIMITS_ENV) as replicas:
        yield replicas[0]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def target(request: pytest.FixtureRequest) -> Target:
    return request.getfixturevalue(f"{request.param}_target")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """On failure, attach the stderr of the servers a `Target` fixture stands for."""
    report = yield
    if report.failed and call.when in ("call", "setup"):
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Target):
                report.sections.append((f"a2a-server logs ({name})", value.logs(3000)))
    return report
