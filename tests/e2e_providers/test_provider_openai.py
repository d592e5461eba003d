"""OpenAI chat completions through the agent (tests/fakes/fake_llm.py): the same contract as
the other providers, so the four wires are held to one standard."""

from __future__ import annotations

import pytest

from tests.e2e_providers.contract import ProviderContract
from tests.e2e_providers.wires import OpenAIWire

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def wire(fake_llm):
    return OpenAIWire(fake_llm)


class TestOpenAI(ProviderContract):
    pass
