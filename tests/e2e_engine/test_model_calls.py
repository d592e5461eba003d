"""The LiteLLM adapter over HTTP to the provider fakes (no A2A server): the parameters on the
wire, one request per attempt (LiteLLM's own retries off), Retry-After obeyed and bounded by the
call's budget, and each call's cost from LiteLLM's bundled price map.

Times are asserted as lower bounds only (the fakes record when each request arrived, in this
process's clock): a retry no sooner than asked. Never an upper bound.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from agent.llm.base import LLMError, LLMRequest, LLMResponse, LLMText
from agent.llm.fallbacks import ModelRoute
from agent.llm.litellm import LiteLLMClient, import_litellm
from tests.fakes.fake_llm import FakeLLMServer, Step
from tests.fakes.fake_llm import error as openai_error
from tests.fakes.fake_llm import text as openai_text
from tests.fakes.providers.anthropic import AnthropicFake
from tests.fakes.providers.script import error, text

pytestmark = pytest.mark.timeout(120)
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
HAIKU = "anthropic/claude-haiku-4-5"
MINI = "openai/gpt-4o-mini"


@cache
def prices(name: str) -> dict[str, float]:
    """The model's entry in LiteLLM's bundled price map, read as a file (what LiteLLM reads
    with LITELLM_LOCAL_MODEL_COST_MAP=True)."""
    spec = importlib.util.find_spec("litellm")
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / "model_prices_and_context_window_backup.json"
    return json.loads(path.read_text())[name]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def anthropic():
    with AnthropicFake() as fake:
        yield fake


@pytest.fixture(scope="module")
def openai():
    with FakeLLMServer() as fake:
        yield fake


def haiku(anthropic: AnthropicFake, **options: Any) -> LiteLLMClient:
    return LiteLLMClient(model=HAIKU, api_base=anthropic.base_url, api_key="sk-test", **options)


async def answer(client: LiteLLMClient, prompt: str) -> tuple[str, LLMResponse]:
    said, response = [], None
    async for item in client.stream(LLMRequest(messages=[{"role": "user", "content": prompt}])):
        if isinstance(item, LLMText):
            said.append(item.text)
        else:
            response = item
    assert response is not None
    return "".join(said), response


@IN_MODULE_LOOP
async def test_the_parameters_go_out_with_every_call(anthropic, marker):
    anthropic.script(text("one", when_user_contains=marker, times=2))
    params = {
        "temperature": 0.25,
        "max_tokens": 777,
        "top_k": 5,
        "extra_headers": {"x-from-llm-params": "yes"},
    }
    client = haiku(anthropic, params=params)
    for _ in range(2):
        await answer(client, f"hello {marker}")
    sent = anthropic.requests_for(marker)
    assert len(sent) == 2
    for request in sent:
        assert request.body["temperature"] == 0.25
        assert request.body["max_tokens"] == 777  # not LiteLLM's default of 64,000
        assert request.body["top_k"] == 5
        assert request.headers["x-from-llm-params"] == "yes"
        assert request.body["model"] == "claude-haiku-4-5"  # the adapter's, not a parameter


@IN_MODULE_LOOP
async def test_reasoning_effort_and_thinking_reach_an_openai_model(openai, marker):
    openai.script(openai_text("ok", when_user_contains=marker))
    client = LiteLLMClient(
        model="openai/o3-mini",
        api_base=openai.base_url,
        api_key="sk-test",
        params={"reasoning_effort": "low", "max_completion_tokens": 99, "seed": 7},
    )
    await answer(client, f"think {marker}")
    [body] = openai.requests_for(marker)
    assert (body["reasoning_effort"], body["max_completion_tokens"], body["seed"]) == ("low", 99, 7)


@IN_MODULE_LOOP
@pytest.mark.parametrize(("status", "asked"), [(429, 2.0), (503, 1.0), (529, 1.5)])
async def test_a_retry_comes_no_sooner_than_retry_after_asks(anthropic, marker, status, asked):
    anthropic.script(
        error(status, retry_after=f"{asked:g}", when_user_contains=marker),
        text("after the wait", when_user_contains=marker),
    )
    said, _ = await answer(haiku(anthropic, num_retries=2), f"busy {marker}")
    assert said == "after the wait"
    first, second = anthropic.requests_for(marker)
    assert first.reply is not None and first.reply.status == status
    assert second.received_at - first.received_at >= asked


@IN_MODULE_LOOP
async def test_a_retry_after_given_as_an_http_date_is_waited_for(anthropic, marker):
    offset = time.time() - time.monotonic()  # the fake runs in this process: the same clocks
    when = math.ceil(time.time()) + 2
    date = format_datetime(datetime.fromtimestamp(when, UTC), usegmt=True)
    anthropic.script(
        error(429, retry_after=date, when_user_contains=marker),
        text("on the date", when_user_contains=marker),
    )
    said, _ = await answer(haiku(anthropic), f"dated {marker}")
    assert said == "on the date"
    _, second = anthropic.requests_for(marker)
    assert second.received_at + offset >= when - 0.01  # the clocks' reading, to 10 ms


@IN_MODULE_LOOP
@pytest.mark.parametrize("status", [429, 529])
async def test_a_wait_past_the_budget_fails_at_once_as_a_rate_limit(anthropic, marker, status):
    anthropic.script(error(status, retry_after="300", when_user_contains=marker, times=None))
    with pytest.raises(LLMError, match=r"^the model provider is rate limiting this server$"):
        await answer(haiku(anthropic, num_retries=3, timeout_s=30), f"later {marker}")
    assert len(anthropic.requests_for(marker)) == 1, "no retry that would end past the budget"


@IN_MODULE_LOOP
@pytest.mark.parametrize("retries", [0, 2])
async def test_each_attempt_is_one_request_litellm_retries_nothing(openai, marker, retries):
    openai.script(openai_error(500, when_user_contains=marker, times=None))
    with pytest.raises(LLMError, match=r"^the model provider returned an error$"):
        await answer(
            LiteLLMClient(
                model="openai/fake-model",
                api_base=openai.base_url,
                api_key="sk",
                num_retries=retries,
                retry_backoff_s=0.01,
            ),
            f"down {marker}",
        )
    assert len(openai.requests_for(marker)) == retries + 1
    openai.reset()


@IN_MODULE_LOOP
async def test_a_failed_model_hands_the_call_to_the_next_before_any_text(openai, anthropic, marker):
    anthropic.script(error(529, when_user_contains=marker, times=3))
    openai.script(openai_text("fallback here", when_user_contains=marker))
    client = haiku(
        anthropic,
        num_retries=2,
        retry_backoff_s=0.01,
        fallbacks=[ModelRoute(model=MINI, api_base=openai.base_url, api_key="sk-fallback")],
    )
    said, response = await answer(client, f"overloaded {marker}")
    assert said == "fallback here"
    assert len(anthropic.requests_for(marker)) == 3
    assert len(openai.requests_for(marker)) == 1
    assert response.usage.model == MINI


@IN_MODULE_LOOP
async def test_no_fallback_once_text_has_reached_the_client(openai, anthropic, marker):
    anthropic.script(
        error(529, stream_error=True, chunks=["the start of "], when_user_contains=marker)
    )
    client = haiku(
        anthropic, fallbacks=[ModelRoute(model=MINI, api_base=openai.base_url, api_key="sk")]
    )
    said: list[str] = []
    with pytest.raises(LLMError):
        async for item in client.stream(
            LLMRequest(messages=[{"role": "user", "content": f"mid {marker}"}])
        ):
            if isinstance(item, LLMText):
                said.append(item.text)
    assert "".join(said) == "the start of "
    assert len(anthropic.requests_for(marker)) == 1, "text went out: not retried"
    assert openai.requests_for(marker) == [], "text went out: no other model starts over"


@IN_MODULE_LOOP
async def test_cost_is_the_tokens_at_the_maps_prices_cache_tokens_included(anthropic, marker):
    counts = {
        "input_tokens": 1000,
        "output_tokens": 200,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 500,
    }
    anthropic.script(text("priced", usage=counts, when_user_contains=marker))
    _, response = await answer(haiku(anthropic), f"cost {marker}")
    price = prices("claude-haiku-4-5")
    expected = (
        1000 * price["input_cost_per_token"]
        + 300 * price["cache_creation_input_token_cost"]
        + 500 * price["cache_read_input_token_cost"]
        + 200 * price["output_cost_per_token"]
    )
    assert response.usage.cost_usd == pytest.approx(expected, rel=1e-9)
    assert response.usage.model == HAIKU


@IN_MODULE_LOOP
async def test_openai_cached_and_reasoning_tokens_are_priced_as_the_map_says(openai, marker):
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 250,
        "total_tokens": 1250,
        "prompt_tokens_details": {"cached_tokens": 400},
        "completion_tokens_details": {"reasoning_tokens": 50},
    }
    openai.script(Step(chunks=["priced"], usage=usage, when_user_contains=marker))  # type: ignore[arg-type]
    client = LiteLLMClient(model=MINI, api_base=openai.base_url, api_key="sk")
    _, response = await answer(client, f"cached {marker}")
    price = prices("gpt-4o-mini")
    expected = (
        600 * price["input_cost_per_token"]
        + 400 * price["cache_read_input_token_cost"]
        + 250 * price["output_cost_per_token"]  # reasoning tokens are output tokens here
    )
    assert response.usage.cost_usd == pytest.approx(expected, rel=1e-9)


@IN_MODULE_LOOP
async def test_a_model_without_a_known_price_has_no_cost(openai, marker):
    openai.script(openai_text("free?", when_user_contains=marker))
    client = LiteLLMClient(model="openai/fake-model", api_base=openai.base_url, api_key="sk")
    _, response = await answer(client, f"unpriced {marker}")
    assert response.usage.cost_usd is None
    assert response.usage.model == "openai/fake-model"
    assert response.usage.prompt_tokens == 10


def test_a_zero_litellm_makes_up_is_not_a_price() -> None:
    """LiteLLM's cost function answers 0 for an Ollama model its map does not have: the
    adapter asks the map itself, so that 0 never becomes a cost."""
    litellm = import_litellm()
    unmapped = "ollama_chat/no-such-local-model"
    assert litellm.cost_per_token(model=unmapped, prompt_tokens=10, completion_tokens=5) == (0, 0)
    client = LiteLLMClient(model=unmapped)
    assert not client._priced(litellm, unmapped)
    assert client._priced(litellm, MINI) and client._priced(litellm, HAIKU)
