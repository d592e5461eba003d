"""The LiteLLM adapter: the one module that imports litellm.

Importing litellm takes seconds, so it happens once, lazily, off the request path: `warm_up()`
imports it in a worker thread when the server starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import re
import threading
from collections.abc import AsyncGenerator
from types import ModuleType
from typing import Any

from agent.events import Usage
from agent.llm.base import (
    LLMClient,
    LLMError,
    LLMReasoning,
    LLMRequest,
    LLMResponse,
    LLMText,
)
from agent.llm.caching import mark_breakpoints, takes_breakpoints
from agent.llm.fallbacks import ModelRoute
from agent.llm.reasoning import ThinkingCollector, for_provider, replay_of
from agent.llm.retries import GiveUp, Retry, RetrySchedule, asked_delay
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


def _asked_delay(exc: Exception) -> float | None:
    """The wait a failed response asks for in its `retry-after` (LiteLLM keeps the provider's
    response headers on the exception it raises). Any retried status's, not only 429's and
    503's: LiteLLM raises Anthropic's 529 (overloaded) as a 500, its status lost."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    return asked_delay(headers)


class _RouteFailed(Exception):
    """A model failed after its retries: `failure` is its class (a key of FAILURES)."""

    def __init__(self, failure: str, *, transient: bool, answered: bool) -> None:
        super().__init__(failure)
        self.failure = failure
        self.transient = transient
        self.answered = answered
        """Text of this call had reached the client: no other model may start over."""


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
        params: dict[str, Any] | None = None,
        fallbacks: list[ModelRoute] | None = None,
        prompt_caching: bool = True,
    ) -> None:
        self._model = model
        self._api_base = api_base
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._num_retries = num_retries
        self._retry_backoff_s = retry_backoff_s
        self._params = dict(params or {})
        self._routes = [ModelRoute(model=model, api_base=api_base, api_key=api_key)]
        self._routes += fallbacks or []
        self._window: object = _UNKNOWN
        self._prices: dict[str, bool] = {}
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
    ) -> AsyncGenerator[LLMText | LLMReasoning | LLMResponse, None]:
        # While the warm-up thread still imports, a synchronous import here would stall the loop.
        await self.warm_up()
        litellm = import_litellm()
        last = len(self._routes) - 1
        for index, route in enumerate(self._routes):
            try:
                # Each level is closed as soon as the one above it is (its turn ended): down to
                # the call's response (`_stream_once`).
                async with contextlib.aclosing(
                    self._with_retries(litellm, route, request)
                ) as items:
                    async for item in items:
                        yield item
                return
            except _RouteFailed as failed:
                if failed.answered or index == last:
                    raise LLMError(FAILURES[failed.failure], transient=failed.transient) from (
                        failed.__cause__
                    )
                logger.warning(
                    "model=<%s>, failure=<%s>, fallback=<%s> | trying the next model",
                    route.model,
                    failed.failure,
                    self._routes[index + 1].model,
                )

    async def _with_retries(
        self, litellm: ModuleType, route: ModelRoute, request: LLMRequest
    ) -> AsyncGenerator[LLMText | LLMReasoning | LLMResponse, None]:
        """One model's attempts: retried while transient, nothing has reached the client, and
        the schedule (LLM_NUM_RETRIES within LLM_TIMEOUT_S) allows. LiteLLM's own retries are
        off (`num_retries=0`), so each attempt is one request."""
        schedule = RetrySchedule(
            num_retries=self._num_retries,
            backoff_s=self._retry_backoff_s,
            budget_s=self._timeout_s,
        )
        while True:
            produced = False
            try:
                async with contextlib.aclosing(self._stream_once(litellm, request, route)) as items:
                    async for item in items:
                        if isinstance(item, LLMText):
                            produced = True
                        yield item
                return
            except LLMError:
                raise
            except Exception as exc:
                transient = _is_transient(exc)
                failure = classify(exc)
                # Once text reached the client a retry would repeat it: only retry clean failures.
                if transient and not produced:
                    match schedule.after_failure(asked_s=_asked_delay(exc)):
                        case Retry(delay_s=delay):
                            logger.warning(
                                "model=<%s>, attempt=<%d> | transient model error %s,"
                                " retrying in %.2fs",
                                route.model,
                                schedule.retries,
                                type(exc).__name__,
                                delay,
                            )
                            await asyncio.sleep(delay)
                            continue
                        case GiveUp(past_budget=True):
                            failure = "rate_limited"  # asked to wait past what the call has left
                logger.warning(
                    "model=<%s>, failure=<%s> | model call failed: %s",
                    route.model,
                    failure,
                    self._describe(exc, route),
                )
                raise _RouteFailed(failure, transient=transient, answered=produced) from exc

    async def _stream_once(
        self, litellm: ModuleType, request: LLMRequest, route: ModelRoute
    ) -> AsyncGenerator[LLMText | LLMReasoning | LLMResponse, None]:
        provider = provider_of(route.model, route.api_base)
        arguments: dict[str, Any] = {
            **self._params,  # first: the keys below are the adapter's (LLM_PARAMS refuses them)
            "model": route.model,
            "messages": for_provider(request.messages, replay_of(provider)),
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": self._timeout_s,
            "num_retries": 0,
        }
        if request.tools:
            arguments["tools"] = request.tools
        if route.api_base:
            arguments["api_base"] = route.api_base
        if route.api_key:
            arguments["api_key"] = route.api_key
        if self._prompt_caching and takes_breakpoints(provider, route.model):
            mark_breakpoints(arguments)
        response = await litellm.acompletion(**arguments)
        try:
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
                    slot = calls.setdefault(
                        call.index or 0, {"id": "", "name": "", "arguments": ""}
                    )
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
                usage=self._usage(litellm, route.model, reported),
                thinking=thinking.result() if thinking is not None else None,
            )
        finally:
            # A call that ends early (its turn stopped: canceled, its lease lost) closes its
            # connection now: left to the garbage collector it stayed open, and the provider
            # streamed (and billed) the rest of the answer for nobody.
            await response.aclose()

    def _usage(self, litellm: ModuleType, model: str, reported: Any) -> Usage:
        """The provider's token counts, the model that answered, and what the call cost by
        LiteLLM's price map (cache and reasoning tokens as the map prices them)."""
        if reported is None:
            return Usage(model=model)
        cost = None
        if self._priced(litellm, model):
            try:
                prompt_cost, completion_cost = litellm.cost_per_token(
                    model=model, usage_object=reported
                )
                cost = float(prompt_cost) + float(completion_cost)
            except Exception as exc:  # no price after all: no cost rather than a made-up one
                logger.debug("model=<%s> | no cost: %s", model, exc)
        return dataclasses.replace(usage_of(reported), cost_usd=cost, model=model)

    def _priced(self, litellm: ModuleType, model: str) -> bool:
        """Whether LiteLLM's map has the model's token prices (looked up once per model).
        Asked of the map itself: LiteLLM's cost functions answer 0 for some models it has no
        price for (a local Ollama model), and 0 would be a made-up cost."""
        if (known := self._prices.get(model)) is None:
            names = (model, model.split("/", 1)[-1])
            known = any(
                "input_cost_per_token" in (litellm.model_cost.get(name) or {}) for name in names
            )
            self._prices[model] = known
        return known

    def _describe(self, exc: Exception, route: ModelRoute) -> str:
        """The provider's error text for the log, with no secret in it."""
        return redact(f"{type(exc).__name__}: {exc}", route.api_key)[:500]
