"""A real `a2a-server` on Anthropic (its Messages fake) with an OpenAI model to fall back on (the
OpenAI fake): LLM_PARAMS on the provider's wire, a retry no sooner than `retry-after`, the
fallback answering an overloaded primary (the task's usage names it, with its cost), no fallback
once answer text went out, and the cost and answering model on /metrics.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import RpcClient, ServerProcess
from tests.e2e_engine.conftest import BASE_ENV
from tests.fakes.fake_llm import text as openai_text
from tests.fakes.providers.anthropic import AnthropicFake
from tests.fakes.providers.script import error, text

pytestmark = pytest.mark.timeout(180)
PRIMARY = "anthropic/claude-haiku-4-5"
FALLBACK = "openai/gpt-4o-mini"
PARAMS = {"temperature": 0.2, "max_tokens": 640, "extra_headers": {"x-agent-params": "on"}}


@cache
def price(name: str, key: str) -> float:
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    return float(json.loads(path.read_text())[name][key])


@pytest.fixture(scope="module")
def anthropic():
    with AnthropicFake(api_key="sk-primary") as fake:
        yield fake


@pytest.fixture(scope="module")
def server(anthropic, fake_llm):
    fallbacks = [
        {"model": FALLBACK, "api_base": fake_llm.base_url, "api_key": "${E2E_FALLBACK_KEY}"}
    ]
    env = {
        **BASE_ENV,
        "LLM_MODEL": PRIMARY,
        "LLM_API_BASE": anthropic.base_url,
        "LLM_API_KEY": "sk-primary",
        "LLM_PARAMS": json.dumps(PARAMS),
        "LLM_FALLBACK_MODELS": json.dumps(fallbacks),
        "E2E_FALLBACK_KEY": "sk-fallback",
        "LLM_NUM_RETRIES": "2",
        "LLM_TIMEOUT_S": "60",
        "AGENT_NAME": "Fallback Agent",
    }
    with ServerProcess(anthropic.base_url, env=env).running() as proc:
        yield proc


@pytest.fixture(scope="module")
def rpc(server):
    client = RpcClient(server.url, timeout=120.0)
    try:
        yield client
    finally:
        client.close()


def answer_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])


def test_the_parameters_reach_the_provider_and_the_usage_has_model_and_cost(
    rpc, anthropic, fake_llm, marker
):
    counts = {"input_tokens": 1200, "output_tokens": 80}
    anthropic.script(text(["Hello ", "there"], usage=counts, when_user_contains=marker))
    task = rpc.send(f"hi {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    [request] = anthropic.requests_for(marker)
    assert request.body["temperature"] == 0.2
    assert request.body["max_tokens"] == 640
    assert request.headers["x-agent-params"] == "on"
    assert request.headers["x-api-key"] == "sk-primary"
    usage = task["metadata"]["usage"]
    assert usage["model"] == PRIMARY
    assert usage["promptTokens"] == 1200 and usage["completionTokens"] == 80
    expected = 1200 * price("claude-haiku-4-5", "input_cost_per_token") + 80 * price(
        "claude-haiku-4-5", "output_cost_per_token"
    )
    assert usage["costUsd"] == pytest.approx(expected, rel=1e-6)
    assert fake_llm.requests_for(marker) == []


def test_a_rate_limited_call_is_retried_no_sooner_than_asked(rpc, anthropic, marker):
    anthropic.script(
        error(429, retry_after="2", when_user_contains=marker),
        text("patience paid", when_user_contains=marker),
    )
    task = rpc.send(f"busy {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert answer_text(task) == "patience paid"
    first, second = anthropic.requests_for(marker)
    assert second.received_at - first.received_at >= 2.0


def test_an_overloaded_primary_hands_the_task_to_the_fallback(rpc, anthropic, fake_llm, marker):
    anthropic.script(error(529, when_user_contains=marker, times=3))
    fake_llm.script(openai_text(["the fallback ", "answers"], when_user_contains=marker))
    task = rpc.send(f"overloaded {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert answer_text(task) == "the fallback answers"
    assert len(anthropic.requests_for(marker)) == 3, "the primary's attempt and its 2 retries"
    [record] = fake_llm.records_for(marker)
    assert record.body["model"] == "gpt-4o-mini"
    assert record.body["temperature"] == 0.2, "the agent's parameters go to every model"
    usage = task["metadata"]["usage"]
    assert usage["model"] == FALLBACK
    # The OpenAI fake reports 10 prompt tokens and one completion token per word.
    expected = 10 * price("gpt-4o-mini", "input_cost_per_token") + 3 * price(
        "gpt-4o-mini", "output_cost_per_token"
    )
    assert (usage["promptTokens"], usage["completionTokens"]) == (10, 3)
    assert usage["costUsd"] == pytest.approx(expected, rel=1e-6)


def test_no_fallback_once_answer_text_reached_the_client(rpc, anthropic, fake_llm, marker):
    anthropic.script(
        error(529, stream_error=True, chunks=["I was saying "], when_user_contains=marker)
    )
    task = rpc.send(f"cut off {marker}")
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    assert len(anthropic.requests_for(marker)) == 1
    assert fake_llm.requests_for(marker) == [], "a second model would start the answer over"


def test_the_metrics_name_the_answering_model_and_its_cost(
    rpc, server, anthropic, fake_llm, marker
):
    anthropic.script(
        text("counted", usage={"input_tokens": 50, "output_tokens": 5}, when_user_contains=marker)
    )
    assert rpc.send(f"count {marker}")["status"]["state"] == "TASK_STATE_COMPLETED"
    other = f"{marker}-fallback"
    anthropic.script(error(401, "bad key", when_user_contains=other))  # not retried: falls back
    fake_llm.script(openai_text("one two", when_user_contains=other))
    assert rpc.send(f"count {other}")["status"]["state"] == "TASK_STATE_COMPLETED"
    body = httpx.get(f"{server.url}/metrics", timeout=30).text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }

    def sample(name: str, model: str) -> float:
        return samples[(name, frozenset({"model": model, "agent": "Fallback Agent"}.items()))]

    haiku_cost = 50 * price("claude-haiku-4-5", "input_cost_per_token") + 5 * price(
        "claude-haiku-4-5", "output_cost_per_token"
    )
    mini_cost = 10 * price("gpt-4o-mini", "input_cost_per_token") + 2 * price(
        "gpt-4o-mini", "output_cost_per_token"
    )
    assert sample("a2a_model_calls_total", PRIMARY) >= 1
    assert sample("a2a_model_calls_total", FALLBACK) >= 1
    # Other tests of the module add to the counters: at least this test's calls' cost.
    assert sample("a2a_model_cost_usd_total", PRIMARY) >= haiku_cost * (1 - 1e-9)
    assert sample("a2a_model_cost_usd_total", FALLBACK) >= mini_cost * (1 - 1e-9)
