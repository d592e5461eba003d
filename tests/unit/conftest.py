"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .backends import Backend, memory_backend, redis_backend
from .scripted_llm import ScriptedLLM


@pytest.fixture
def llm():
    """A ScriptedLLM; the test queues steps with `llm.script(...)`. Teardown: all steps used."""
    scripted = ScriptedLLM()
    yield scripted
    scripted.assert_done()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """The stores of each backend in turn (tests/unit/backends.py)."""
    async with memory_backend() if request.param == "memory" else redis_backend() as stores:
        yield stores
