"""Fitting a request into the model's context window without breaking tool-call pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Messages = list[dict[str, Any]]


def fit_to_window(messages: Messages, *, budget: int, count: Callable[[Messages], int]) -> Messages:
    """Drop the oldest messages until the request fits `budget` tokens.

    The system prompt (first, if present) and the newest message always stay, and the cut never
    leaves a tool result without the assistant message that called it.
    """
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    body = messages[len(head) :]
    while len(body) > 1 and count(head + body) > budget:
        body = body[1:]
        while len(body) > 1 and body[0]["role"] == "tool":
            body = body[1:]
    return head + body


def output_reserve(window: int) -> int:
    """Tokens kept free for the model's answer."""
    return max(256, window // 8)
