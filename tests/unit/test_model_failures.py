"""A failed model call: the client sees a short classified message; the log has the details,
with the API key redacted as a whole token (never corrupting the text around a short key)."""

from __future__ import annotations

import logging
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.llm import litellm as litellm_client
from agent.llm.base import LLMError, LLMRequest
from agent.llm.litellm import LiteLLMClient, redact


class ProviderError(Exception):
    def __init__(self, text: str, status_code: int) -> None:
        super().__init__(text)
        self.status_code = status_code


def test_redaction_replaces_whole_tokens_only() -> None:
    assert redact("bad key sk-live-123456 used", "sk-live-123456") == "bad key *** used"
    assert redact("key=abc, again abc.", "abc") == "key=***, again ***."
    # A short key inside longer words leaves the words alone.
    assert redact("the task ask failed", "sk") == "the task ask failed"
    assert redact("nothing to hide", None) == "nothing to hide"


@pytest.mark.parametrize(
    ("status", "told"),
    [
        (429, "the model provider is rate limiting this server"),
        (401, "the model provider refused this server's credentials"),
        (400, "the model provider rejected the request"),
        (500, "the model provider returned an error"),
    ],
)
async def test_a_model_failure_reaches_the_client_classified_and_the_log_in_full(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, status: int, told: str
) -> None:
    monkeypatch.setattr(litellm_client, "_litellm", types.ModuleType("litellm"))
    client = LiteLLMClient(model="openai/x", api_key="sk", num_retries=0)

    async def failing(*_: Any) -> AsyncIterator[Any]:
        raise ProviderError("upstream said: the task with key sk was refused", status)
        yield  # pragma: no cover

    monkeypatch.setattr(client, "_stream_once", failing)
    caplog.set_level(logging.WARNING, logger="agent.llm.litellm")
    with pytest.raises(LLMError) as raised:
        async for _ in client.stream(LLMRequest(messages=[])):
            pass
    assert str(raised.value) == told
    assert "upstream said: the task with key *** was refused" in caplog.text


async def test_a_timeout_is_classified_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litellm_client, "_litellm", types.ModuleType("litellm"))
    client = LiteLLMClient(model="openai/x", num_retries=0)

    async def timing_out(*_: Any) -> AsyncIterator[Any]:
        raise TimeoutError("read timed out after 120 s")
        yield  # pragma: no cover

    monkeypatch.setattr(client, "_stream_once", timing_out)
    with pytest.raises(LLMError, match=r"^the model provider timed out$"):
        async for _ in client.stream(LLMRequest(messages=[])):
            pass
