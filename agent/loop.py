"""AgentLoop: one turn. Model -> tool calls (concurrently) -> model ... until an answer, bounded.

The loop is a pure producer of `AgentEvent`s over a `LoopState`; it holds no store. What it adds to
the conversation comes out as `MessagesCommitted` units (an assistant message with its tool calls
travels with all their results), its state as `CheckpointReached` at every safe point, and a turn
that needs the client (`ask_user`, a tool call to approve) ends with `TurnSuspended`; `resume`
feeds the client's answer back and goes on from the same state.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from opentelemetry.trace import StatusCode

from agent.context import TurnContext
from agent.errors import ToolFailureMode
from agent.events import (
    AgentEvent,
    CheckpointReached,
    IterationStarted,
    LLMCallFinished,
    LLMCallStarted,
    MessagesCommitted,
    ReasoningDelta,
    TextDelta,
    TextSink,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    TurnSuspended,
    Usage,
)
from agent.hooks import HookChain, HookFailed
from agent.llm.base import LLMClient, LLMError, LLMRequest, LLMResponse, LLMText, closing_stream
from agent.llm.reasoning import reasoning_fields
from agent.state import LoopState, SavedToolResult
from agent.tool_round import ToolRound, ToolRoundFailed
from agent.tools.control import ASK_USER, CONTROL_TOOLS, FINISH
from agent.tools.toolbox import Toolbox
from agent.tracing import start_span
from agent.window import fit_to_window, output_reserve
from stores.models import ChatMessage

logger = logging.getLogger(__name__)

ANSWER_SEPARATOR = "\n\n"
"""Between the texts of two model calls of one turn, so the answer reads as paragraphs."""


def to_llm_message(message: ChatMessage) -> dict[str, Any]:
    """A stored conversation message in the OpenAI chat format LiteLLM takes, its reasoning in
    LiteLLM's fields (the adapter keeps those the provider takes back)."""
    payload: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.thinking is not None:
        payload.update(reasoning_fields(message.thinking))
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


def _add_answer_text(state: LoopState, text: str, *, new_paragraph: bool) -> list[TextDelta]:
    """Add text to the turn's answer; text from another model call starts a new paragraph."""
    if not text:
        return []
    if new_paragraph and state.answer:
        state.answer.extend((ANSWER_SEPARATOR, text))
        return [TextDelta(text=ANSWER_SEPARATOR), TextDelta(text=text)]
    state.answer.append(text)
    return [TextDelta(text=text)]


def add_usage_details(state: LoopState, usage: Usage) -> None:
    """Count a call's reasoning and cache tokens in the turn's (reported by some providers)."""
    if usage.reasoning_tokens or usage.cache_read_tokens or usage.cache_write_tokens:
        state.reasoning_tokens += usage.reasoning_tokens
        state.cache_read_tokens += usage.cache_read_tokens
        state.cache_write_tokens += usage.cache_write_tokens


class _TurnEnded(Exception):
    def __init__(self, event: TurnFailed) -> None:
        self.event = event


class AgentLoop:
    def __init__(
        self,
        llm: LLMClient,
        toolbox: Toolbox,
        *,
        system_prompt: str | None = None,
        max_iterations: int = 10,
        hooks: HookChain | None = None,
        tool_failure_mode: ToolFailureMode = "continue",
        max_consecutive_tool_errors: int = 3,
        ask_user_tool: bool = True,
        finish_tool: bool = True,
        max_messages: int | None = None,
        stream_reasoning: bool = False,
    ) -> None:
        self._llm = llm
        self._stream_reasoning = stream_reasoning  # AGENT_REASONING=stream
        self._system_prompt = system_prompt
        self._max_iterations = max_iterations
        self._max_messages = max_messages
        self._hooks = hooks or HookChain()
        control = {
            name for name, enabled in ((ASK_USER, ask_user_tool), (FINISH, finish_tool)) if enabled
        }
        self._toolbox = toolbox
        self._control_schemas = [CONTROL_TOOLS[name] for name in sorted(control)]
        self._tool_round = ToolRound(
            toolbox,
            self._hooks,
            control=control,
            fail_on_tool_error=tool_failure_mode == "fail",
            max_consecutive_tool_errors=max_consecutive_tool_errors,
        )

    async def run(
        self, state: LoopState, turn: TurnContext, *, on_text: TextSink | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run (or go on with) the turn described by `state` until it ends or suspends.

        With `on_text`, a model call's streamed text is handed to it, in the events' order,
        instead of yielded as TextDelta events: a chunk is the hot path of a turn, and each
        generator it would pass through on its way up costs as much as handling it."""
        try:
            if state.iterations == 0 and not state.pending_calls:
                yield TurnStarted()
                await self._hooks.on_turn_start(turn)
            # Each step is closed as soon as this turn is (see `_call_model`).
            async with aclosing(self._steps(state, turn, on_text)) as steps:
                async for event in steps:
                    yield event
            return
        except _TurnEnded as ended:
            outcome = ended.event
        except HookFailed as exc:
            outcome = self._failed(f"The turn failed in a hook: {exc}", state)
        # The turn failed: hooks still hear of it, but a hook failing now changes nothing.
        try:
            await self._end(turn, outcome)
        except HookFailed:
            logger.warning("task_id=<%s> | on_turn_end hook failed on a failed turn", turn.task_id)
        yield outcome

    def resume(
        self,
        state: LoopState,
        *,
        approved: bool | None = None,
        answer: str = "",
        reason: str = "",
        tool_results: dict[str, tuple[str, bool]] | None = None,
    ) -> None:
        """Record the client's answer to what the suspended turn awaits."""
        awaiting = state.awaiting
        assert awaiting is not None, "resume() needs a suspended turn"
        call = awaiting.call
        if awaiting.kind == "client_tools":
            for client_call in awaiting.calls:
                content, ok = (tool_results or {})[client_call.id]
                state.results[client_call.id] = SavedToolResult(
                    call_id=client_call.id, name=client_call.name, content=content, ok=ok
                )
        elif awaiting.kind == "tool_input":
            state.tool_inputs[call.id].answer = answer
        elif awaiting.kind == "ask_user":
            state.results[call.id] = SavedToolResult(
                call_id=call.id, name=call.name, content=answer, ok=True
            )
        elif approved:
            state.approved.append(call.id)
        else:
            why = f": {reason}" if reason else ""
            state.results[call.id] = SavedToolResult(
                call_id=call.id,
                name=call.name,
                content=f"Error: the user denied the call of {call.name!r}{why}",
                ok=False,
            )
        state.awaiting = None

    async def abandon(self, state: LoopState) -> None:
        """The suspended turn will not go on (its task was canceled): a call that waited for
        the user lets go of what it holds (another agent's task is canceled)."""
        awaiting = state.awaiting
        if awaiting is not None and awaiting.kind == "tool_input":
            waited = state.tool_inputs.get(awaiting.call.id)
            if waited is not None:
                await self._toolbox.abandon(awaiting.call, waited.state)

    async def _steps(
        self, state: LoopState, turn: TurnContext, on_text: TextSink | None
    ) -> AsyncGenerator[AgentEvent, None]:
        while True:
            if state.pending_calls:
                try:
                    async with aclosing(self._tool_round.answer(state, turn)) as round_events:
                        async for event in round_events:
                            yield event
                except ToolRoundFailed as exc:
                    failed = self._failed(str(exc), state, rejected=exc.rejected)
                    raise _TurnEnded(failed) from exc
                if state.awaiting is not None:
                    yield CheckpointReached.of(state)
                    yield TurnSuspended(awaiting=state.awaiting)
                    return
                yield ToolRound.commit(state)
                if state.finish_result is not None:
                    for delta in _add_answer_text(state, state.finish_result, new_paragraph=True):
                        yield delta
                    yield await self._completed(turn, state)
                    return
            if state.iterations >= self._max_iterations:
                raise _TurnEnded(
                    self._failed(
                        f"The turn stopped after {self._max_iterations} model calls without a final"
                        f" answer (iteration limit AGENT_MAX_ITERATIONS={self._max_iterations}).",
                        state,
                    )
                )
            yield CheckpointReached.of(state)
            state.iterations += 1
            yield IterationStarted(iteration=state.iterations)
            yield LLMCallStarted(iteration=state.iterations)
            response: LLMResponse | None = None
            async with aclosing(self._call_model(state, turn, on_text)) as items:
                async for item in items:
                    if isinstance(item, LLMResponse):
                        response = item
                    else:
                        yield item
            assert response is not None
            yield LLMCallFinished(
                iteration=state.iterations,
                usage=response.usage,
                finish_reason=response.finish_reason,
            )
            if not response.tool_calls:
                answer = ChatMessage(
                    role="assistant", content=response.content or None, thinking=response.thinking
                )
                state.conversation.append(answer)
                yield MessagesCommitted(unit_id=f"{state.iterations}:answer", messages=[answer])
                yield await self._completed(turn, state)
                return
            state.pending_content = response.content or None
            state.pending_thinking = response.thinking
            state.pending_calls = response.tool_calls
            yield CheckpointReached.of(state)

    async def _call_model(
        self, state: LoopState, turn: TurnContext, on_text: TextSink | None
    ) -> AsyncGenerator[TextDelta | ReasoningDelta | LLMResponse, None]:
        messages = [to_llm_message(message) for message in state.conversation]
        # The system prompt is injected at call time, never stored: changing it applies at once.
        if self._system_prompt:
            messages.insert(0, {"role": "system", "content": self._system_prompt})
        await self._llm.warm_up()  # the window lookup below needs the adapter loaded
        messages = self._fit(messages)
        request = await self._hooks.before_llm_call(
            turn,
            LLMRequest(
                messages=messages,
                tools=await self._toolbox.schemas_for(turn)
                + [tool.tool_schema() for tool in state.client_tools]
                + self._control_schemas,
                turn=turn,
            ),
        )
        first_text = True  # this call's text starts a new paragraph of the answer
        response: LLMResponse | None = None
        span = start_span("llm.call", turn.trace, iteration=state.iterations)
        # A turn that stops while the model streams (canceled, its lease lost: `on_text` or the
        # consumer of this generator raises, or closes it) closes the model's stream at once, not
        # when the garbage collector gets to it: the call's connection is cut, no token more.
        stream = self._llm.stream(request)
        try:
            async with closing_stream(stream):
                async for item in stream:
                    if not isinstance(item, LLMText):
                        if isinstance(item, LLMResponse):
                            response = item
                        elif self._stream_reasoning and item.text:  # never part of the answer
                            yield ReasoningDelta(text=item.text)
                    elif item.text:  # per chunk: no list and no call (the hot path of a turn)
                        if first_text and state.answer:  # another call's text: a new paragraph
                            state.answer.append(ANSWER_SEPARATOR)
                            if on_text is None:
                                yield TextDelta(text=ANSWER_SEPARATOR)
                            else:
                                await on_text(ANSWER_SEPARATOR)
                        first_text = False
                        state.answer.append(item.text)
                        if on_text is None:
                            yield TextDelta(text=item.text)
                        else:
                            await on_text(item.text)
        except LLMError as exc:
            span.set_status(StatusCode.ERROR, str(exc))
            raise _TurnEnded(self._failed(f"The model call failed: {exc}", state)) from exc
        finally:
            span.end()
        assert response is not None, "an LLMClient must end its stream with an LLMResponse"
        _count(state, response.usage)
        add_usage_details(state, response.usage)
        await self._hooks.after_llm_call(turn, response)
        if response.finish_reason == "length":
            raise _TurnEnded(
                self._failed(
                    "The model's answer was cut off by its output token limit"
                    " (finish_reason 'length'); the answer is incomplete.",
                    state,
                )
            )
        yield response

    def _fit(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """At most `max_messages`, and what fits the model's window when LiteLLM knows it."""
        window = self._llm.context_window()
        budget = window - output_reserve(window) if window else None
        count = self._llm.count_tokens if window else None
        return fit_to_window(messages, max_messages=self._max_messages, budget=budget, count=count)

    async def _completed(self, turn: TurnContext, state: LoopState) -> TurnCompleted:
        answer = "".join(state.answer)
        event = TurnCompleted(
            answer=answer,
            usage=self._usage(state),
            llm_calls=state.iterations,
            tool_calls=state.tool_calls_made,
            metadata=await self._hooks.answer_metadata(turn, answer),
        )
        await self._end(turn, event)
        return event

    async def _end(self, turn: TurnContext, outcome: TurnCompleted | TurnFailed) -> None:
        await self._hooks.on_turn_end(turn, outcome)

    @staticmethod
    def _usage(state: LoopState) -> Usage:
        return Usage(
            prompt_tokens=state.prompt_tokens,
            completion_tokens=state.completion_tokens,
            reasoning_tokens=state.reasoning_tokens,
            cache_read_tokens=state.cache_read_tokens,
            cache_write_tokens=state.cache_write_tokens,
            cost_usd=None if state.unpriced_calls else state.cost_usd,
            model=state.model,
        )

    def _failed(self, reason: str, state: LoopState, *, rejected: bool = False) -> TurnFailed:
        return TurnFailed(
            reason=reason,
            usage=self._usage(state),
            llm_calls=state.iterations,
            tool_calls=state.tool_calls_made,
            rejected=rejected,
        )


def _count(state: LoopState, usage: Usage) -> None:
    """One call's usage into the turn's: tokens, the answering model, and the cost (known
    for the turn only while every call's price was)."""
    state.prompt_tokens += usage.prompt_tokens
    state.completion_tokens += usage.completion_tokens
    state.model = usage.model or state.model
    if usage.cost_usd is None:
        state.unpriced_calls += 1
    else:
        state.cost_usd = (state.cost_usd or 0.0) + usage.cost_usd
