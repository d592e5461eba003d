"""Ollama through the agent (tests/fakes/providers/ollama.py): the contract, and what only this
wire shows: /api/chat, tool-call arguments as JSON objects, results as role `tool` messages."""

from __future__ import annotations

import pytest

from tests.e2e.wire import artifact_text
from tests.e2e_providers.contract import ProviderContract
from tests.e2e_providers.wires import OllamaWire
from tests.fakes.providers import script
from tests.fakes.providers.ollama import OllamaFake

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def wire():
    with OllamaFake(models={"llama3.1"}) as fake:
        yield OllamaWire(fake)


class TestOllama(ProviderContract):
    def test_the_request_is_addressed_as_ollama_documents(self, rpc, wire, marker):
        wire.tool_calls([("add", {"a": 1, "b": 1})], marker)
        wire.text(["two"], marker)
        assert rpc.send(f"one plus one {marker}")["status"]["state"] == "TASK_STATE_COMPLETED"
        first, second = wire.fake.requests_for(marker)
        assert first.path == "/api/chat" and first.body["model"] == "llama3.1"
        (call,) = second.body["messages"][-2]["tool_calls"]
        assert call["function"] == {"name": "add", "arguments": {"a": 1, "b": 1}}
        assert second.body["messages"][-1]["role"] == "tool"

    def test_a_thinking_models_thoughts_never_reach_the_answer(self, rpc, wire, marker):
        # Thinking models (qwen3, deepseek-r1) stream message.thinking before the content.
        wire.fake.script(
            script.text(["Visible."], thinking="private musing", when_user_contains=marker)
        )
        task = rpc.send(f"think first {marker}")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "Visible."
        assert "private musing" not in str(task)
