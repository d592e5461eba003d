"""LLM_FALLBACK_MODELS: the models tried, in order, when the configured one fails.

A call goes to the next model only once its own has failed after its retries, and only while
no answer text has reached the client: a second model would start the answer over, and the
client would read two beginnings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_KEYS = ("model", "api_base", "api_key")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRoute:
    """One model and where to reach it (None: LiteLLM's default for the provider)."""

    model: str
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)


def fallback_models(value: object, *, where: str = "LLM_FALLBACK_MODELS") -> list[dict[str, Any]]:
    """`value` (a JSON list, or its text) checked: each entry an object with a non-empty
    `model` and optional `api_base` / `api_key` strings, nothing else. ValueError, one line,
    naming the first entry that is wrong."""
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(value, list):
        raise ValueError(f'{where} must be a JSON list of {{"model", "api_base", "api_key"}}')
    entries: list[dict[str, Any]] = []
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f'{at} must be an object {{"model", "api_base", "api_key"}}')
        if unknown := [key for key in entry if key not in _KEYS]:
            raise ValueError(f"{at} has an unknown key {unknown[0]!r} (model, api_base, api_key)")
        if not isinstance(entry.get("model"), str) or not entry["model"].strip():
            raise ValueError(f"{at} needs a `model` (a LiteLLM model string)")
        for key in ("api_base", "api_key"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                raise ValueError(f"{at}: `{key}` must be a string")
        entries.append(dict(entry))
    return entries
