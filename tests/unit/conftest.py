"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from .scripted_llm import ScriptedLLM


@pytest.fixture
def llm():
    """A ScriptedLLM; the test queues steps with `llm.script(...)`. Teardown: all steps used."""
    scripted = ScriptedLLM()
    yield scripted
    scripted.assert_done()
