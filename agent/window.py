"""Fitting a request into the model's context window without breaking tool-call pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Messages = list[dict[str, Any]]


def _units(body: Messages) -> list[Messages]:
    """Split messages into units: a message with the tool results that follow it."""
    units: list[Messages] = []
    for message in body:
        if message["role"] == "tool" and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units


def fit_to_window(
    messages: Messages,
    *,
    max_messages: int | None = None,
    budget: int | None = None,
    count: Callable[[Messages], int] | None = None,
) -> Messages:
    """Drop the oldest units until the request has at most `max_messages` messages (besides the
    system prompt) and fits `budget` tokens (when a token `count` is given).

    The system prompt (first, if present) and the newest unit always stay whole, and the cut never
    leaves a tool result without the assistant message that called it.
    """
    head = messages[:1] if messages and messages[0]["role"] == "system" else []
    units = _units(messages[len(head) :])
    # A leading tool result whose call is already gone cannot be sent at all.
    while units and units[0][0]["role"] == "tool":
        units.pop(0)
    size = sum(len(unit) for unit in units)

    def flat() -> Messages:
        return head + [message for unit in units for message in unit]

    def too_big() -> bool:
        if max_messages is not None and size > max_messages:
            return True
        return budget is not None and count is not None and count(flat()) > budget

    while len(units) > 1 and too_big():
        size -= len(units.pop(0))
    return flat()


def output_reserve(window: int) -> int:
    """Tokens kept free for the model's answer."""
    return max(256, window // 8)
