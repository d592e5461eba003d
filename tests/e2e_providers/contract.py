"""What every provider must do through our agent, checked on its own wire format.

Each provider's module subclasses `ProviderContract` with its `wire` fixture: one fake of that
provider and one real server (conftest.py) per module. The tests say what a user sees (the
task's state, its answer artifact, its usage, its status message) and what the provider was
sent (read through the wire, in the provider's own shape).
"""

from __future__ import annotations

from typing import Any

from tests.e2e.wire import artifact_text, message_text
from tests.e2e_providers.conftest import SYSTEM_PROMPT
from tests.e2e_providers.wires import Wire

RETRIES = 2
"""LLM_NUM_RETRIES's default: a transient failure is tried 1 + 2 times."""


def state(task: dict[str, Any]) -> str:
    return str(task["status"]["state"])


def status_text(task: dict[str, Any]) -> str:
    return message_text(task["status"].get("message"))


class ProviderContract:
    def test_a_plain_turn_answers_what_the_model_streamed(self, rpc, wire: Wire, marker):
        chunks = ["The answer ", "is ", "forty-two."]
        wire.text(chunks, marker)
        task = rpc.send(f"what is the answer? {marker}")
        assert state(task) == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "The answer is forty-two."
        assert len(wire.requests(marker)) == 1

    def test_a_parallel_tool_round_goes_back_in_one_request(self, rpc, wire: Wire, marker):
        wire.tool_calls([("add", {"a": 2, "b": 3}), ("add", {"a": 40, "b": 2})], marker)
        wire.text(["Both sums are in."], marker)
        task = rpc.send(f"add two pairs {marker}")
        assert state(task) == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "Both sums are in."
        first, second = wire.requests(marker)
        calls, results = wire.tool_round(second)
        assert [name for _, name in calls] == ["add", "add"]
        assert [value for _, value in results] == ["5", "42"], results
        if all(key for key, _ in calls):  # providers with call ids: each result names its call
            assert [key for key, _ in results] == [key for key, _ in calls]
        else:
            assert all(key for key, _ in results), results
        assert task["metadata"]["usage"]["toolCalls"] == 2
        assert task["metadata"]["usage"]["llmCalls"] == 2

    def test_the_system_prompt_goes_where_the_provider_wants_it(self, rpc, wire: Wire, marker):
        wire.text(["ok"], marker)
        assert state(rpc.send(f"hello {marker}")) == "TASK_STATE_COMPLETED"
        (body,) = wire.requests(marker)
        assert wire.system(body) == [SYSTEM_PROMPT]
        assert not wire.misplaced_system(body), body

    def test_the_second_turn_carries_the_first_in_order(self, rpc, wire: Wire, marker):
        first, second = f"first question {marker}-one", f"second question {marker}-two"
        wire.text(["First answer."], f"{marker}-one")
        wire.text(["Second answer."], f"{marker}-two")
        one = rpc.send(first)
        two = rpc.send(second, context_id=one["contextId"])
        assert state(two) == "TASK_STATE_COMPLETED", two["status"]
        assert artifact_text(two) == "Second answer."
        (request,) = wire.requests(f"{marker}-two")
        assert wire.turns(request) == [
            ("user", first),
            ("assistant", "First answer."),
            ("user", second),
        ]

    def test_a_tool_round_of_the_first_turn_goes_whole_into_the_second(
        self, rpc, wire: Wire, marker
    ):
        first, second = f"add one and one {marker}-one", f"and now? {marker}-two"
        wire.tool_calls([("add", {"a": 1, "b": 1})], f"{marker}-one")
        wire.text(["Two."], f"{marker}-one")
        wire.text(["Done."], f"{marker}-two")
        one = rpc.send(first)
        two = rpc.send(second, context_id=one["contextId"])
        assert state(two) == "TASK_STATE_COMPLETED", two["status"]
        # The fake refuses a call without its result (or a result without its call): the
        # request was accepted, and carries the round between the first prompt and answer.
        (request,) = wire.requests(f"{marker}-two")
        calls, results = wire.tool_round(request)
        assert [name for _, name in calls] == ["add"] and [value for _, value in results] == ["2"]
        assert wire.turns(request) == [("user", first), ("assistant", "Two."), ("user", second)]

    def test_the_usage_is_the_providers_count(self, rpc, wire: Wire, marker):
        wire.text(["counted"], marker, usage={"input_tokens": 321, "output_tokens": 17})
        task = rpc.send(f"count me {marker}")
        assert state(task) == "TASK_STATE_COMPLETED", task["status"]
        usage = task["metadata"]["usage"]
        assert (usage["promptTokens"], usage["completionTokens"]) == (321, 17), usage

    def test_an_answer_cut_off_by_the_output_limit_fails_saying_so(self, rpc, wire: Wire, marker):
        # Anthropic's stop_reason max_tokens, Gemini's MAX_TOKENS, Ollama's done_reason length.
        wire.cut_off_text(["The beginning of a long"], marker)
        task = rpc.send(f"write a lot {marker}")
        assert state(task) == "TASK_STATE_FAILED", task["status"]
        assert "cut off by its output token limit" in status_text(task), task["status"]

    def test_a_rate_limit_is_retried_then_answered(self, rpc, wire: Wire, marker):
        wire.error(429, "slow down", marker, 1)
        wire.text(["After the wait."], marker)
        task = rpc.send(f"busy provider {marker}")
        assert state(task) == "TASK_STATE_COMPLETED", task["status"]
        assert artifact_text(task) == "After the wait."
        assert len(wire.requests(marker)) == 2

    def test_a_refused_request_fails_with_a_short_message(self, rpc, wire: Wire, marker):
        detail = f"provider detail {marker}-private"
        wire.error(400, detail, marker, None)
        task = rpc.send(f"bad request {marker}")
        assert state(task) == "TASK_STATE_FAILED", task["status"]
        assert status_text(task) == "The model call failed: the model provider rejected the request"
        assert "private" not in str(task), task
        assert len(wire.requests(marker)) == 1, "a refused request is not retried"

    def test_an_overloaded_provider_fails_the_task_after_the_retries(self, rpc, wire: Wire, marker):
        wire.error(wire.overloaded, f"overloaded {marker}-private", marker, None)
        task = rpc.send(f"overload {marker}")
        assert state(task) == "TASK_STATE_FAILED", task["status"]
        assert status_text(task) == "The model call failed: the model provider returned an error"
        assert "private" not in str(task), task
        assert len(wire.requests(marker)) == 1 + RETRIES

    def test_refused_credentials_fail_the_task_clearly(self, rpc, wire: Wire, marker):
        wire.auth_error(f"key {marker}-private", marker)
        task = rpc.send(f"who am i {marker}")
        assert state(task) == "TASK_STATE_FAILED", task["status"]
        assert (
            status_text(task)
            == "The model call failed: the model provider refused this server's credentials"
        )
        assert "private" not in str(task), task
        assert len(wire.requests(marker)) == 1, "refused credentials are not retried"
