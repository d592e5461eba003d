"""Gemini through the agent (tests/fakes/providers/gemini.py): the contract, and what only this
wire shows: its path under /v1beta, its key header, and calls answered by name."""

from __future__ import annotations

import pytest

from tests.e2e.wire import artifact_text
from tests.e2e_providers.contract import ProviderContract
from tests.e2e_providers.wires import GeminiWire
from tests.fakes.providers import script
from tests.fakes.providers.gemini import GeminiFake

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def wire():
    with GeminiFake() as fake:
        yield GeminiWire(fake)


class TestGemini(ProviderContract):
    def test_the_request_is_addressed_as_google_documents(self, rpc, wire, marker):
        wire.tool_calls([("add", {"a": 1, "b": 1})], marker)
        wire.text(["two"], marker)
        assert rpc.send(f"one plus one {marker}")["status"]["state"] == "TASK_STATE_COMPLETED"
        first, second = wire.fake.requests_for(marker)
        assert first.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
        assert first.query == {"alt": ["sse"]} and first.headers["x-goog-api-key"] == "sk-test"
        assert [c["role"] for c in second.body["contents"]] == ["user", "model", "user"]

    def test_a_thought_summary_never_reaches_the_answer(self, rpc, wire, marker):
        # Gemini 2.5 thinks by default; a thought part (thought: true) is not answer text.
        wire.fake.script(
            script.text(["Visible."], thinking="private musing", when_user_contains=marker)
        )
        task = rpc.send(f"think first {marker}")
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "Visible."
        assert "private musing" not in str(task)

    def test_a_thought_signature_goes_back_with_its_function_call(self, rpc, wire, marker):
        # Gemini 3 refuses a function-call turn without the thoughtSignature of its first call.
        # LiteLLM carries it inside the tool call's id, which the engine keeps unchanged.
        wire.fake.script(
            script.tool_calls(
                [("add", {"a": 2, "b": 2}), ("add", {"a": 3, "b": 3})],
                thinking="two sums",
                when_user_contains=marker,
            ),
            script.text(["Four and six."], when_user_contains=marker),
        )
        wire.fake.require_thought_signatures = True
        try:
            task = rpc.send(f"signed round {marker}")
        finally:
            wire.fake.require_thought_signatures = False
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "Four and six."
        _, second = wire.requests(marker)
        first_call = second["contents"][-2]["parts"][0]
        assert first_call["thoughtSignature"] == wire.fake.sign("add", {"a": 2, "b": 2})
