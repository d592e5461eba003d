"""What a provider fake is told to answer (`Reply` and its builders) and what it records.

A `Reply` is in no provider's shape: each fake renders it in its own wire format.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    """One scripted model reply, in no provider's shape: each fake renders it in its own.

    `chunks` stream as text deltas; `tool_calls` are `(name, arguments)` pairs, all in this one
    response (a parallel round when there are two); `thinking` streams a reasoning block first,
    signed by the fake (Anthropic `signature_delta`, Gemini `thoughtSignature`). `status` turns
    the reply into an HTTP error in the provider's error shape, with `retry_after` as its
    `retry-after` header; `stream_error` sends that error as an in-stream event after the text
    instead (Anthropic does this when it overloads mid-answer). `usage` overrides the token
    counts (keys: input_tokens, output_tokens, cache_creation_input_tokens,
    cache_read_input_tokens, thinking_tokens). `times` is how many requests it answers.
    """

    chunks: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    thinking: str | None = None
    status: int | None = None
    error_type: str | None = None
    message: str = "fake provider error"
    retry_after: str | None = None
    stream_error: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None
    when_user_contains: str | None = None
    times: int | None = 1

    def counts(self) -> dict[str, int]:
        """The token counts this reply reports (defaults derived from its size)."""
        out = {
            "input_tokens": 11,
            "output_tokens": max(1, len("".join(self.chunks).split()) + 3 * len(self.tool_calls)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "thinking_tokens": len((self.thinking or "").split()),
        }
        out.update(self.usage)
        return out


def text(
    chunks: str | Sequence[str],
    *,
    thinking: str | None = None,
    usage: dict[str, int] | None = None,
    when_user_contains: str | None = None,
    times: int | None = 1,
) -> Reply:
    """A text answer; a plain string is sent as one chunk."""
    return Reply(
        chunks=[chunks] if isinstance(chunks, str) else list(chunks),
        thinking=thinking,
        usage=dict(usage or {}),
        when_user_contains=when_user_contains,
        times=times,
    )


def tool_calls(
    calls: Iterable[tuple[str, dict[str, Any]]],
    *,
    content: str | Sequence[str] = (),
    thinking: str | None = None,
    usage: dict[str, int] | None = None,
    when_user_contains: str | None = None,
    times: int | None = 1,
) -> Reply:
    """Tool calls in one response (two or more: a parallel round), after optional text."""
    return Reply(
        chunks=[content] if isinstance(content, str) and content else list(content or ()),
        tool_calls=list(calls),
        thinking=thinking,
        usage=dict(usage or {}),
        when_user_contains=when_user_contains,
        times=times,
    )


def error(
    status: int,
    message: str = "fake provider error",
    *,
    error_type: str | None = None,
    retry_after: str | None = None,
    stream_error: bool = False,
    chunks: Sequence[str] = (),
    when_user_contains: str | None = None,
    times: int | None = 1,
) -> Reply:
    """An error answer in the provider's own error shape (`times` in a row)."""
    return Reply(
        status=status,
        message=message,
        error_type=error_type,
        retry_after=retry_after,
        stream_error=stream_error,
        chunks=list(chunks),
        when_user_contains=when_user_contains,
        times=times,
    )


@dataclass
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: dict[str, Any]
    reply: Reply | None = None
    received_at: float = field(default_factory=time.monotonic)
    """When the whole request had arrived (time.monotonic, in the test's process)."""
    refused: str | None = None
    """The refusal message when the fake refused the request as the real API would."""


class Refusal(Exception):
    """What the real API answers to a request it refuses (status and message)."""

    def __init__(self, status: int, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
