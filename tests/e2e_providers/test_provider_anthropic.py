"""Anthropic Messages through the agent (tests/fakes/providers/anthropic.py): the contract,
and what only this wire shows: its headers, and a tool round's assistant message as blocks."""

from __future__ import annotations

import pytest

from tests.e2e.wire import message_text
from tests.e2e_providers.contract import ProviderContract
from tests.e2e_providers.wires import AnthropicWire
from tests.fakes.providers import script
from tests.fakes.providers.anthropic import AnthropicFake

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def wire():
    with AnthropicFake() as fake:
        yield AnthropicWire(fake)


class TestAnthropic(ProviderContract):
    def test_the_request_is_addressed_as_anthropic_documents(self, rpc, wire, marker):
        wire.tool_calls([("add", {"a": 1, "b": 1})], marker)
        wire.text(["two"], marker)
        assert rpc.send(f"one plus one {marker}")["status"]["state"] == "TASK_STATE_COMPLETED"
        first, second = wire.fake.requests_for(marker)
        assert first.path == "/v1/messages"
        assert first.headers["x-api-key"] == "sk-test" and first.headers["anthropic-version"]
        assert first.body["stream"] is True and first.body["max_tokens"] > 0
        assert "add" in [t["name"] for t in first.body["tools"]]
        # The tool round's assistant message is its tool_use alone: no empty text block.
        assistant = second.body["messages"][-2]
        assert [b["type"] for b in assistant["content"]] == ["tool_use"], assistant

    def test_an_overload_in_the_middle_of_the_answer_fails_without_a_retry(self, rpc, wire, marker):
        # Text already reached the client: a retry would repeat it, so the task fails at once.
        wire.fake.script(
            script.error(
                529, "Overloaded", stream_error=True, chunks=["Half an"], when_user_contains=marker
            )
        )
        task = rpc.send(f"long answer {marker}")
        assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
        assert "the model provider returned an error" in message_text(task["status"]["message"])
        assert len(wire.requests(marker)) == 1
