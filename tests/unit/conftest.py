"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .backends import Backend, memory_backend, postgres_backend, redis_backend, sqlite_backend
from .scripted_llm import ScriptedLLM


@pytest.fixture
def llm():
    """A ScriptedLLM; the test queues steps with `llm.script(...)`. Teardown: all steps used."""
    scripted = ScriptedLLM()
    yield scripted
    scripted.assert_done()


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The stores of each backend in turn (tests/unit/backends.py)."""
    if request.param == "memory":
        stores = memory_backend()
    elif request.param == "sqlite":
        stores = sqlite_backend()
    elif request.param == "postgres":
        stores = postgres_backend()
    else:
        stores = redis_backend(cluster=request.param == "redis-cluster")
    async with stores as backend:
        yield backend
