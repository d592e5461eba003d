"""A call's token counts out of LiteLLM's usage object (OpenAI's shape, whatever the provider).

prompt_tokens / completion_tokens             -> the counts (prompt includes cache tokens)
completion_tokens_details.reasoning_tokens    -> reasoning (OpenAI, Gemini report it; for
                                                 Anthropic LiteLLM counts the thinking text)
prompt_tokens_details.cached_tokens           -> read from the cache
prompt_tokens_details.cache_creation_tokens,
  else cache_creation_input_tokens            -> written to the cache (Anthropic)
"""

from __future__ import annotations

from typing import Any

from agent.events import Usage


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def usage_of(reported: Any) -> Usage:
    """The Usage of a LiteLLM usage object (absent counts are 0)."""
    prompt = _count(getattr(reported, "prompt_tokens", 0))
    completion = _count(getattr(reported, "completion_tokens", 0))
    completion_details = getattr(reported, "completion_tokens_details", None)
    prompt_details = getattr(reported, "prompt_tokens_details", None)
    if completion_details is None and prompt_details is None:
        return Usage(prompt_tokens=prompt, completion_tokens=completion)  # OpenAI-compatible
    written = _count(getattr(prompt_details, "cache_creation_tokens", None)) or _count(
        getattr(reported, "cache_creation_input_tokens", None)
    )
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=_count(getattr(completion_details, "reasoning_tokens", None)),
        cache_read_tokens=_count(getattr(prompt_details, "cached_tokens", None)),
        cache_write_tokens=written,
    )
