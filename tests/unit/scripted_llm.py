"""ScriptedLLM: an in-process `LLMClient` that plays back a queue of scripted responses.

Each call to `stream()` takes the next step off the queue. A step can stream text chunks and then
an `LLMResponse`, answer with tool calls, end with finish_reason "length", raise `LLMError` (or any
exception), and first wait on an `asyncio.Event` or sleep, so tests can cancel a turn mid-call.

Every request is recorded (deep-copied: the loop keeps appending to its message list). A call with
no step left fails loudly: it raises `AssertionError` and is remembered, so `assert_done()` (run
it in fixture teardown) also fails even if the caller swallowed the exception.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.events import Usage
from agent.llm.base import (
    LLMClient,
    LLMError,
    LLMReasoning,
    LLMRequest,
    LLMResponse,
    LLMText,
)
from stores.models import Thinking, ToolCall


@dataclass(kw_only=True)
class Step:
    """One scripted model call."""

    chunks: Sequence[str] = ()
    """Text streamed as `LLMText` items (before the response, or before the error)."""
    content: str | None = None
    """`LLMResponse.content`; defaults to the chunks joined."""
    tool_calls: Sequence[ToolCall] = ()
    finish_reason: str | None = "stop"
    usage: Usage = field(default_factory=Usage)
    error: BaseException | None = None
    """Raised after the chunks instead of yielding a response."""
    wait_for: asyncio.Event | None = None
    """Awaited before anything is yielded."""
    delay_s: float = 0.0
    """Slept before anything is yielded (after `wait_for`)."""
    label: str = ""
    thinking: Thinking | None = None
    """The response's reasoning; its text is streamed first (`LLMReasoning`), in `reasoning`
    chunks if given, else whole."""
    reasoning: Sequence[str] = ()

    # Filled in while the step runs.
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set as soon as the step starts (the model call is in progress)."""
    cancelled: bool = False
    """The consumer cancelled (or closed) the stream while this step was running."""
    finished: bool = False


def text(
    *chunks: str, usage: Usage | None = None, content: str | None = None, **kwargs: Any
) -> Step:
    """A plain answer streamed as `chunks`."""
    return Step(chunks=chunks, content=content, usage=usage or Usage(), **kwargs)


def call(call_id: str, name: str, arguments: Any = None) -> ToolCall:
    """A tool call; `arguments` is JSON-encoded unless it is already a string."""
    if arguments is None:
        arguments = {}
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, name=name, arguments=encoded)


def tools(
    *calls: ToolCall, chunks: Sequence[str] = (), usage: Usage | None = None, **kwargs: Any
) -> Step:
    """A response asking for tool calls (finish_reason "tool_calls"), optionally after some text."""
    return Step(
        chunks=chunks,
        tool_calls=calls,
        finish_reason="tool_calls",
        usage=usage or Usage(),
        **kwargs,
    )


def fail(
    message: str, *, chunks: Sequence[str] = (), transient: bool = False, **kwargs: Any
) -> Step:
    """The provider call fails with `LLMError(message)` (after streaming `chunks`)."""
    return Step(chunks=chunks, error=LLMError(message, transient=transient), **kwargs)


def crash(exc: BaseException, **kwargs: Any) -> Step:
    """The adapter raises something that is not an `LLMError` (a bug in the adapter)."""
    return Step(error=exc, **kwargs)


def truncated(*chunks: str, usage: Usage | None = None, **kwargs: Any) -> Step:
    """An answer cut off by the output token limit (finish_reason "length")."""
    return Step(chunks=chunks, finish_reason="length", usage=usage or Usage(), **kwargs)


def blocked(gate: asyncio.Event | None = None, then: Step | None = None, **kwargs: Any) -> Step:
    """A call that hangs until `gate` is set (forever, if none is given), then acts as `then`."""
    base = then or text("unblocked")
    base.wait_for = gate or asyncio.Event()
    for key, value in kwargs.items():
        setattr(base, key, value)
    return base


class UnexpectedLLMCall(AssertionError):
    pass


class ScriptedLLM(LLMClient):
    """Implements `agent.llm.base.LLMClient` by playing back `Step`s in order."""

    def __init__(self, *steps: Step) -> None:
        self._steps: deque[Step] = deque(steps)
        self.used: list[Step] = []
        self.requests: list[LLMRequest] = []
        self.unexpected: list[LLMRequest] = []

    def script(self, *steps: Step) -> ScriptedLLM:
        """Queue more steps; returns self for chaining."""
        self._steps.extend(steps)
        return self

    @property
    def remaining(self) -> int:
        return len(self._steps)

    @property
    def calls(self) -> int:
        return len(self.requests)

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        """The messages of the `index`-th recorded request."""
        return self.requests[index].messages

    async def stream(
        self, request: LLMRequest
    ) -> AsyncIterator[LLMText | LLMReasoning | LLMResponse]:
        recorded = LLMRequest(
            messages=copy.deepcopy(request.messages), tools=copy.deepcopy(request.tools)
        )
        self.requests.append(recorded)
        if not self._steps:
            self.unexpected.append(recorded)
            raise UnexpectedLLMCall(
                f"ScriptedLLM: unexpected model call #{len(self.requests)} (no scripted step left);"
                f" last message: {request.messages[-1] if request.messages else None!r}"
            )
        step = self._steps.popleft()
        self.used.append(step)
        step.entered.set()
        try:
            if step.wait_for is not None:
                await step.wait_for.wait()
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            if step.thinking is not None:
                for piece in step.reasoning or [step.thinking.text]:
                    yield LLMReasoning(text=piece)
            for chunk in step.chunks:
                yield LLMText(text=chunk)
            if step.error is not None:
                raise step.error
            yield LLMResponse(
                content=step.content if step.content is not None else "".join(step.chunks),
                tool_calls=list(step.tool_calls),
                finish_reason=step.finish_reason,
                usage=step.usage,
                thinking=step.thinking,
            )
            step.finished = True
        except (asyncio.CancelledError, GeneratorExit):
            step.cancelled = True
            raise

    def assert_done(self) -> None:
        """Every scripted step was used, and no call came after the script ran out."""
        problems = []
        if self.unexpected:
            problems.append(f"{len(self.unexpected)} unexpected model call(s) beyond the script")
        if self._steps:
            labels = [
                step.label or f"step {len(self.used) + i + 1}" for i, step in enumerate(self._steps)
            ]
            problems.append(f"{len(self._steps)} scripted step(s) never used: {labels}")
        assert not problems, "ScriptedLLM: " + "; ".join(problems)
