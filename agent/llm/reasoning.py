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

from typing import Any, Literal

from stores.models import Thinking

ThinkingReplay = Literal["thinking_blocks", "reasoning_content"]
"""The field a provider takes the reasoning of earlier assistant messages back in."""
_FIELDS: frozenset[str] = frozenset({"thinking_blocks", "reasoning_content"})
_REPLAY: dict[str, ThinkingReplay] = {
    # Blocks, signatures checked (Anthropic; Claude on Bedrock and Vertex; Gemini's thoughts).
    **dict.fromkeys(
        ("anthropic", "bedrock", "vertex_ai", "vertex_ai_beta", "gemini"), "thinking_blocks"
    ),
    # The text, wanted back with a tool round in thinking mode.
    "deepseek": "reasoning_content",
}


def replay_of(provider: str | None) -> ThinkingReplay | None:
    """How a provider (LiteLLM's name) takes back the reasoning of earlier assistant messages;
    None: not at all (OpenAI and the rest: a field they do not know may be refused)."""
    return _REPLAY.get(provider or "")


def reasoning_fields(thinking: Thinking) -> dict[str, Any]:
    """An assistant message's reasoning in LiteLLM's fields: its blocks (copies: what is sent
    never shares a dict with the stored message) and its text."""
    fields: dict[str, Any] = {}
    if thinking.blocks:
        fields["thinking_blocks"] = [dict(block) for block in thinking.blocks]
    if thinking.text:
        fields["reasoning_content"] = thinking.text
    return fields


def for_provider(
    messages: list[dict[str, Any]], replay: ThinkingReplay | None
) -> list[dict[str, Any]]:
    """The messages with only the reasoning field the provider takes back (`replay_of`). Messages
    without reasoning (every message of a model that does not think) are passed as they are."""
    unwanted = _FIELDS - {replay} if replay else _FIELDS
    if not any(not unwanted.isdisjoint(message) for message in messages):
        return messages
    return [
        {key: value for key, value in message.items() if key not in unwanted}
        if not unwanted.isdisjoint(message)
        else message
        for message in messages
    ]


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
