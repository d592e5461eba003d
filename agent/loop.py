"""AgentLoop: one turn. Model -> tool calls (concurrently) -> model ... until an answer, bounded.

The loop is a pure producer of `AgentEvent`s. It holds no store: the messages it adds come out as
`MessagesCommitted` units (an assistant message with its tool calls travels with all their
results), which the multi-turn `Agent` persists, so history never holds a call without its result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agent.events import (
    AgentEvent,
    IterationStarted,
    LLMCallFinished,
    MessagesCommitted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    Usage,
)
from agent.llm import LLMClient, LLMError, LLMRequest, LLMResponse, LLMText
from agent.tools import Toolbox, ToolResult
from stores.models import ChatMessage, ToolCall

logger = logging.getLogger(__name__)

ANSWER_SEPARATOR = "\n\n"
"""Between the texts of two model calls of one turn, so the answer reads as paragraphs."""


@dataclass(kw_only=True, slots=True)
class _Tally:
    usage: Usage = field(default_factory=Usage)
    llm_calls: int = 0
    tool_calls: int = 0


def to_llm_message(message: ChatMessage) -> dict[str, Any]:
    """A stored conversation message in the OpenAI chat format LiteLLM takes."""
    payload: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        payload["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.role == "tool":
        payload["tool_call_id"] = message.tool_call_id
        if message.name:
            payload["name"] = message.name
    return payload


class AgentLoop:
    def __init__(
        self,
        llm: LLMClient,
        toolbox: Toolbox,
        *,
        system_prompt: str | None = None,
        max_iterations: int = 10,
    ) -> None:
        self._llm = llm
        self._toolbox = toolbox
        self._system_prompt = system_prompt
        self._max_iterations = max_iterations

    async def run(self, conversation: list[ChatMessage]) -> AsyncIterator[AgentEvent]:
        """Run one turn over `conversation` (history ending with the new user message)."""
        # The system prompt is injected at call time, never stored: changing it applies at once.
        messages = [to_llm_message(message) for message in conversation]
        if self._system_prompt:
            messages.insert(0, {"role": "system", "content": self._system_prompt})
        tally = _Tally()
        answer: list[str] = []
        yield TurnStarted()
        for iteration in range(1, self._max_iterations + 1):
            yield IterationStarted(iteration=iteration)
            response: LLMResponse | None = None
            separate = bool(answer)  # this call's text starts a new paragraph of the answer
            try:
                async for item in self._llm.stream(
                    LLMRequest(messages=messages, tools=self._toolbox.schemas())
                ):
                    if isinstance(item, LLMText):
                        if not item.text:
                            continue
                        if separate:
                            separate = False
                            answer.append(ANSWER_SEPARATOR)
                            yield TextDelta(text=ANSWER_SEPARATOR)
                        answer.append(item.text)
                        yield TextDelta(text=item.text)
                    else:
                        response = item
            except LLMError as exc:
                tally.llm_calls += 1
                yield self._failed(f"The model call failed: {exc}", tally)
                return
            tally.llm_calls += 1
            assert response is not None, "an LLMClient must end its stream with an LLMResponse"
            tally.usage = tally.usage + response.usage
            yield LLMCallFinished(
                iteration=iteration, usage=response.usage, finish_reason=response.finish_reason
            )
            if response.finish_reason == "length":
                yield self._failed(
                    "The model's answer was cut off by its output token limit"
                    " (finish_reason 'length'); the answer is incomplete.",
                    tally,
                )
                return
            assistant = ChatMessage(
                role="assistant",
                content=response.content or None,
                tool_calls=response.tool_calls or None,
            )
            if not response.tool_calls:
                yield MessagesCommitted(messages=[assistant])
                yield TurnCompleted(
                    answer="".join(answer),
                    usage=tally.usage,
                    llm_calls=tally.llm_calls,
                    tool_calls=tally.tool_calls,
                )
                return
            results: list[ToolResult] = []
            async for event in self._run_tools(response.tool_calls, results):
                yield event
            tally.tool_calls += len(results)
            unit = [assistant] + [
                ChatMessage(
                    role="tool",
                    content=result.content,
                    tool_call_id=result.call_id,
                    name=result.name,
                )
                for result in results
            ]
            messages.extend(to_llm_message(message) for message in unit)
            yield MessagesCommitted(messages=unit)
        yield self._failed(
            f"The turn stopped after {self._max_iterations} model calls without a final answer"
            f" (iteration limit AGENT_MAX_ITERATIONS={self._max_iterations}).",
            tally,
        )

    async def _run_tools(
        self, calls: list[ToolCall], results: list[ToolResult]
    ) -> AsyncIterator[AgentEvent]:
        """Run the calls concurrently, yielding their start/finish events as they happen."""
        events: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        execution = asyncio.create_task(
            self._toolbox.run(
                calls,
                on_start=lambda call: events.put_nowait(
                    ToolCallStarted(call_id=call.id, name=call.name)
                ),
                on_finish=lambda result: events.put_nowait(
                    ToolCallFinished(call_id=result.call_id, name=result.name, ok=result.ok)
                ),
            )
        )
        execution.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            results.extend(execution.result())
        finally:
            # A canceled turn must not leave its tools running in the background.
            execution.cancel()

    @staticmethod
    def _failed(reason: str, tally: _Tally) -> TurnFailed:
        return TurnFailed(
            reason=reason, usage=tally.usage, llm_calls=tally.llm_calls, tool_calls=tally.tool_calls
        )
