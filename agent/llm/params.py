"""LLM_PARAMS: the model parameters sent with every call (temperature, `max_tokens`, `top_p`,
`reasoning_effort`, `thinking`, `extra_headers`, ...), as LiteLLM takes them.

They are passed through as they are: LiteLLM maps each to the provider's own name, and the
provider judges the values. Only the keys the adapter sets itself are refused, each naming the
setting that governs it, so that a parameter can never silently replace the model, the
conversation or the server's retries.
"""

from __future__ import annotations

import json
from typing import Any

RESERVED = {
    "model": "LLM_MODEL",
    "messages": "the conversation",
    "tools": "the agent's tools",
    "tool_choice": "the agent's loop",
    "stream": "the adapter (it always streams)",
    "stream_options": "the adapter (it always asks for usage)",
    "api_base": "LLM_API_BASE",
    "base_url": "LLM_API_BASE",
    "api_key": "LLM_API_KEY",
    "timeout": "LLM_TIMEOUT_S",
    "num_retries": "LLM_NUM_RETRIES",
    "max_retries": "LLM_NUM_RETRIES",
    "fallbacks": "LLM_FALLBACK_MODELS",
}
"""Keys the adapter sets itself -> what sets them."""


def model_params(value: object, *, where: str = "LLM_PARAMS") -> dict[str, Any]:
    """`value` (a JSON object, or its text) as the parameters of every call; ValueError, one
    line, when it is not an object or names a key the adapter sets."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a JSON object of model parameters")
    for key in value:
        if key in RESERVED:
            raise ValueError(f"{where}: {key!r} is set by the server ({RESERVED[key]}), not here")
    return dict(value)
