"""The LiteLLM adapter: the one module that imports litellm.

Importing litellm takes seconds, so it happens once, lazily, off the request path: `warm_up()`
imports it in a worker thread when the server starts.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import threading
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

from agent.llm.base import (
    LLMClient,
    LLMError,
    LLMReasoning,
    LLMRequest,
    LLMResponse,
    LLMText,
)
from agent.llm.caching import mark_breakpoints, takes_breakpoints
from agent.llm.reasoning import ThinkingCollector, for_provider, replay_of
from agent.llm.usage import usage_of
from stores.models import ToolCall

logger = logging.getLogger(__name__)

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
FAILURES = {
    "timeout": "the model provider timed out",
    "rate_limited": "the model provider is rate limiting this server",
    "authentication": "the model provider refused this server's credentials",
    "bad_request": "the model provider rejected the request",
    "provider_error": "the model provider returned an error",
}
"""What a client is told of a failed model call, by class; the details go to the log."""
_UNKNOWN = object()
_import_lock = threading.Lock()
_litellm: ModuleType | None = None


def import_litellm() -> ModuleType:
    global _litellm
    with _import_lock:
        if _litellm is None:
            # Without this litellm fetches its model cost map from the network at import time.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.suppress_debug_info = True
            litellm.telemetry = False
            _litellm = litellm
    return _litellm


def redact(text: str, secret: str | None) -> str:
    """`text` with every whole-token occurrence of `secret` replaced by `***`.

    Whole tokens only: a key that is also part of a longer word (a short test key such as `sk`
    inside `task`) leaves the word alone, so redaction never corrupts the text around it.
    """
    if not secret:
        return text
    pattern = rf"(?<![A-Za-z0-9_\-]){re.escape(secret)}(?![A-Za-z0-9_\-])"
    return re.sub(pattern, "***", text)


def classify(exc: Exception) -> str:
    """The class of a provider failure: a key of `FAILURES`."""
    import openai

    if isinstance(exc, openai.APITimeoutError | TimeoutError) or "Timeout" in type(exc).__name__:
        return "timeout"
    status = getattr(exc, "status_code", None)
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "authentication"
    if status in (400, 404, 413, 422):
        return "bad_request"
    return "provider_error"


@functools.lru_cache(maxsize=64)
def provider_of(model: str, api_base: str | None) -> str | None:
    """LiteLLM's name for a model's provider (`anthropic`, `openai`...), looked up once."""
    try:
        return str(import_litellm().get_llm_provider(model, api_base=api_base)[1])
    except Exception:
        return None


def _is_transient(exc: Exception) -> bool:
    import openai

    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUS or status >= 500)


class LiteLLMClient(LLMClient):
    def __init__(
        self,
        *,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        num_retries: int = 2,
        retry_backoff_s: float = 0.5,
        prompt_caching: bool = True,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._num_retries = num_retries
        self._retry_backoff_s = retry_backoff_s
        self._window: object = _UNKNOWN
        self._prompt_caching = prompt_caching

    async def warm_up(self) -> None:
        """Load LiteLLM without blocking the event loop (at once if it is already loaded)."""
        if _litellm is None:
            await asyncio.to_thread(import_litellm)

    def context_window(self) -> int | None:
        """The model's input window in tokens, when LiteLLM knows it (looked up once)."""
        if self._window is _UNKNOWN:
            try:
                info = import_litellm().get_model_info(self._model)
                window = info.get("max_input_tokens") or info.get("max_tokens")
                self._window = int(window) if window else None
            except Exception:
                self._window = None
        return self._window  # type: ignore[return-value]

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        return int(import_litellm().token_counter(model=self._model, messages=messages))

    async def stream(
        self, request: LLMRequest
    ) -> AsyncIterator[LLMText | LLMReasoning | LLMResponse]:
        # While the warm-up thread still imports, a synchronous import here would stall the loop.
        await self.warm_up()
        litellm = import_litellm()
        attempt = 0
        while True:
            produced = False
            try:
                async for item in self._stream_once(litellm, request):
                    produced = True
                    yield item
                return
            except LLMError:
                raise
            except Exception as exc:
                transient = _is_transient(exc)
                # Once text reached the client a retry would repeat it: only retry clean failures.
                if transient and not produced and attempt < self._num_retries:
                    attempt += 1
                    delay = self._retry_backoff_s * 2 ** (attempt - 1)
                    logger.warning(
                        "model=<%s>, attempt=<%d> | transient model error %s, retrying in %.1fs",
                        self._model,
                        attempt,
                        type(exc).__name__,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                failure = classify(exc)
                logger.warning(
                    "model=<%s>, failure=<%s> | model call failed: %s",
                    self._model,
                    failure,
                    self._describe(exc),
                )
                raise LLMError(FAILURES[failure], transient=transient) from exc

    async def _stream_once(
        self, litellm: ModuleType, request: LLMRequest
    ) -> AsyncIterator[LLMText | LLMReasoning | LLMResponse]:
        provider = provider_of(self._model, self._api_base)
        arguments: dict[str, Any] = {
            "model": self._model,
            "messages": for_provider(request.messages, replay_of(provider)),
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": self._timeout_s,
            "num_retries": 0,
        }
        if request.tools:
            arguments["tools"] = request.tools
        if self._api_base:
            arguments["api_base"] = self._api_base
        if self._api_key:
            arguments["api_key"] = self._api_key
        if self._prompt_caching and takes_breakpoints(provider, self._model):
            mark_breakpoints(arguments)
        response = await litellm.acompletion(**arguments)
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish_reason: str | None = None
        reported: Any = None
        thinking: ThinkingCollector | None = None  # made at the first reasoning delta
        async for chunk in response:
            reported = getattr(chunk, "usage", None) or reported
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish_reason = choice.finish_reason or finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                content.append(delta.content)
                yield LLMText(text=delta.content)
            reasoning = getattr(delta, "reasoning_content", None)
            blocks = getattr(delta, "thinking_blocks", None)
            if reasoning or blocks:
                thinking = thinking or ThinkingCollector()
                thinking.add(reasoning, blocks)
                if reasoning:
                    yield LLMReasoning(text=reasoning)
            for call in getattr(delta, "tool_calls", None) or []:
                slot = calls.setdefault(call.index or 0, {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
        tool_calls = [
            ToolCall(
                id=slot["id"] or f"call_{index}", name=slot["name"], arguments=slot["arguments"]
            )
            for index, slot in sorted(calls.items())
        ]
        yield LLMResponse(
            content="".join(content),
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            usage=usage_of(reported),
            thinking=thinking.result() if thinking is not None else None,
        )

    def _describe(self, exc: Exception) -> str:
        """The provider's error text for the log, with no secret in it."""
        return redact(f"{type(exc).__name__}: {exc}", self._api_key)[:500]
