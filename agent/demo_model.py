"""The built-in offline demo model: deterministic, no network, and it uses a tool.

It exists so that `make run` serves a working agent on a fresh machine. It goes through the same
loop as a real model: first it calls the built-in `text_stats` tool on the user's message, then it
answers from the tool's result, streamed in small chunks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from agent.events import Usage
from agent.llm import LLMRequest, LLMResponse, LLMText
from stores.models import ToolCall

DEMO_MODEL_NAME = "demo"


class DemoModel:
    def __init__(self, *, chunk_delay_s: float = 0.01) -> None:
        self._chunk_delay_s = chunk_delay_s

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]:
        messages = request.messages
        user_turns = [m for m in messages if m["role"] == "user"]
        user_text = str(user_turns[-1]["content"]) if user_turns else ""
        tool_names = {tool["function"]["name"] for tool in request.tools}
        usage = Usage(prompt_tokens=sum(len(str(m.get("content") or "").split()) for m in messages))
        last = messages[-1]
        if last["role"] == "user" and "text_stats" in tool_names:
            call = ToolCall(
                id=f"call_demo_{len(user_turns)}",
                name="text_stats",
                arguments=json.dumps({"text": user_text}),
            )
            yield LLMResponse(
                content="", tool_calls=[call], finish_reason="tool_calls", usage=usage
            )
            return
        answer = self._answer(user_text, last, len(user_turns))
        words = answer.split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(self._chunk_delay_s)
            yield LLMText(text=word if index == len(words) - 1 else word + " ")
        yield LLMResponse(
            content=answer,
            tool_calls=[],
            finish_reason="stop",
            usage=Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=len(words)),
        )

    @staticmethod
    def _answer(user_text: str, last: dict[str, object], turn_number: int) -> str:
        stats = ""
        if last["role"] == "tool":
            try:
                measured = json.loads(str(last["content"]))
                stats = (
                    f" That is {measured['words']} words and {measured['characters']} characters."
                )
            except (ValueError, KeyError, TypeError):
                stats = f" The tool said: {last['content']}."
        return (
            f'(demo model, offline) You said: "{user_text}".{stats}'
            f" This is message {turn_number} of our conversation."
            " Set LLM_MODEL to talk to a real model."
        )
