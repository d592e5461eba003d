"""Reasoning (thinking) as LiteLLM streams it, and as it goes back to the provider.

    stream deltas: reasoning_content "Let me "      -> LLMReasoning (for a client to watch)
                   thinking_blocks [{thinking: "Let me "}]       (a piece: not kept)
                   thinking_blocks [{thinking: "Let me think.", signature: "..."}]  (kept whole)
                   thinking_blocks [{type: redacted_thinking, data: "..."}]         (kept whole)
    response:      Thinking(text="Let me think.", blocks=[the kept blocks, in order])
    next request:  the assistant message with `thinking_blocks` (or `reasoning_content`, as the
                   provider takes it back: `replay_of`), before its tool calls

Anthropic checks each thinking block's signature against its text: a block glued together from
the deltas, or changed in any way, is refused. So only the blocks LiteLLM hands over whole (the
last one of each block, with its signature; a redacted block) are kept, as given.
"""

from __future__ import annotations

from typing import Any

from agent.llm.base import ThinkingReplay
from stores.models import Thinking

_BLOCK_PROVIDERS = frozenset({"anthropic", "bedrock", "vertex_ai", "vertex_ai_beta", "gemini"})
"""Providers (LiteLLM's names) that take thinking blocks back and check their signatures."""
_TEXT_PROVIDERS = frozenset({"deepseek"})
"""Providers that want the reasoning text back (`reasoning_content`) with a tool round."""


def replay_of(provider: str | None) -> ThinkingReplay | None:
    """How a provider takes back the reasoning of earlier assistant messages (None: not at all,
    e.g. OpenAI, which neither returns nor accepts it on chat completions)."""
    if provider in _BLOCK_PROVIDERS:
        return "blocks"
    if provider in _TEXT_PROVIDERS:
        return "text"
    return None


def replayed(thinking: Thinking, replay: ThinkingReplay) -> dict[str, Any]:
    """The fields an assistant message carries its reasoning back in (LiteLLM's names)."""
    if replay == "blocks":
        blocks = thinking.blocks
        return {"thinking_blocks": [dict(block) for block in blocks]} if blocks else {}
    return {"reasoning_content": thinking.text} if thinking.text else {}


class ThinkingCollector:
    """A response's reasoning, gathered from its stream deltas."""

    __slots__ = ("_blocks", "_text")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._blocks: list[dict[str, Any]] = []

    def add(self, text: str | None, blocks: list[Any] | None) -> None:
        """One delta's `reasoning_content` and `thinking_blocks`."""
        if text:
            self._text.append(text)
        for block in blocks or ():
            whole = dict(block)
            kind = whole.get("type")
            if kind == "redacted_thinking" or (kind == "thinking" and whole.get("signature")):
                self._blocks.append(whole)

    def result(self) -> Thinking | None:
        """The response's reasoning, or None when it had none."""
        if not self._text and not self._blocks:
            return None
        return Thinking(text="".join(self._text), blocks=self._blocks)
