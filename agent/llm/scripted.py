"""The scripted model (`LLM_MODEL=scripted`): a fixed answer of K chunks, for load tests.

It answers every request with `chunks` text chunks of 20 characters each, `delay_ms` apart, and no
tool call: the output of the reference executor that `bench/` runs against the official SDK's
server, so the two servers stream the same events. In process, no network, no LiteLLM import.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agent.events import Usage
from agent.llm.base import LLMClient, LLMRequest, LLMResponse, LLMText

SCRIPTED_MODEL_NAME = "scripted"
CHUNK_CHARS = 20


def scripted_chunk(index: int) -> str:
    """The index-th chunk: `chunk 0001 ` padded with dots to 20 characters."""
    return f"chunk {index:04d} ".ljust(CHUNK_CHARS, ".")


class ScriptedModel(LLMClient):
    def __init__(self, *, chunks: int = 20, delay_ms: float = 0.0) -> None:
        self._chunks = [scripted_chunk(index) for index in range(chunks)]
        # Made once: the items are immutable, and a load test measures the server, not this.
        self._texts = [LLMText(text=chunk) for chunk in self._chunks]
        self._delay_s = delay_ms / 1000

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]:
        for text in self._texts:
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
            yield text
        yield LLMResponse(
            content="".join(self._chunks),
            tool_calls=[],
            finish_reason="stop",
            usage=Usage(prompt_tokens=len(request.messages), completion_tokens=len(self._chunks)),
        )
