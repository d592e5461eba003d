"""AgentLoop: one turn. Model -> tool calls (concurrently) -> model ... until an answer, bounded.

The loop is a pure producer of `AgentEvent`s over a `LoopState`; it holds no store. What it adds to
the conversation comes out as `MessagesCommitted` units (an assistant message with its tool calls
travels with all their results), its state as `CheckpointReached` at every safe point, and a turn
that needs the client (`ask_user`, a tool call to approve) ends with `TurnSuspended`; `resume`
feeds the client's answer back and goes on from the same state.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from agent.events import (
    AgentEvent,
    CheckpointReached,
    IterationStarted,
    LLMCallFinished,
    MessagesCommitted,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    TurnSuspended,
    Usage,
)
from agent.hooks import HookChain, HookFailed, ReplaceArguments, SupplyResult, TurnContext
from agent.llm import LLMClient, LLMError, LLMRequest, LLMResponse, LLMText
from agent.state import Awaiting, LoopState, SavedToolResult, ToolFailureStreak
from agent.tools import Toolbox, ToolResult
from agent.window import fit_to_window, output_reserve
from stores.models import ChatMessage, ToolCall

logger = logging.getLogger(__name__)

ANSWER_SEPARATOR = "\n\n"
"""Between the texts of two model calls of one turn, so the answer reads as paragraphs."""

ASK_USER = "ask_user"
FINISH = "finish"
_CONTROL_TOOLS = {
    ASK_USER: {
        "type": "function",
        "function": {
            "name": ASK_USER,
            "description": "Ask the user a question and wait for the answer. Use it when you"
            " need information or a decision that only the user can give.",
            "parameters": {
                "type": "object",
                "properties": {"question": {"type": "string", "description": "The question."}},
                "required": ["question"],
            },
        },
    },
    FINISH: {
        "type": "function",
        "function": {
            "name": FINISH,
            "description": "End the turn: give the final answer and stop.",
            "parameters": {
                "type": "object",
                "properties": {"result": {"type": "string", "description": "The final answer."}},
                "required": ["result"],
            },
        },
    },
}


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


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        parsed = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


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
        tool_failure_mode: str = "continue",
        max_consecutive_tool_errors: int = 3,
        ask_user_tool: bool = True,
        finish_tool: bool = True,
        max_messages: int | None = None,
    ) -> None:
        self._llm = llm
        self._toolbox = toolbox
        self._system_prompt = system_prompt
        self._max_iterations = max_iterations
        self._max_messages = max_messages
        self._hooks = hooks or HookChain()
        self._fail_on_tool_error = tool_failure_mode == "fail"
        self._max_consecutive_tool_errors = max_consecutive_tool_errors
        self._control = {
            name for name, enabled in ((ASK_USER, ask_user_tool), (FINISH, finish_tool)) if enabled
        }
        self._tool_schemas = toolbox.schemas() + [
            _CONTROL_TOOLS[name] for name in sorted(self._control)
        ]

    async def run(self, state: LoopState, turn: TurnContext) -> AsyncIterator[AgentEvent]:
        """Run (or go on with) the turn described by `state` until it ends or suspends."""
        try:
            if state.iterations == 0 and not state.pending_calls:
                yield TurnStarted()
                await self._hooks.on_turn_start(turn)
            async for event in self._steps(state, turn):
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
        self, state: LoopState, *, approved: bool | None = None, answer: str = "", reason: str = ""
    ) -> None:
        """Record the client's answer to what the suspended turn awaits."""
        awaiting = state.awaiting
        assert awaiting is not None, "resume() needs a suspended turn"
        call = awaiting.call
        if awaiting.kind == "ask_user":
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

    async def _steps(self, state: LoopState, turn: TurnContext) -> AsyncIterator[AgentEvent]:
        while True:
            if state.pending_calls:
                async for event in self._answer_tool_calls(state, turn):
                    yield event
                if state.awaiting is not None:
                    yield CheckpointReached(state=state.model_copy(deep=True))
                    yield TurnSuspended(awaiting=state.awaiting)
                    return
                yield self._commit_tool_unit(state)
                if state.finish_result is not None:
                    text = state.finish_result
                    if text:
                        if state.answer:
                            state.answer.append(ANSWER_SEPARATOR)
                            yield TextDelta(text=ANSWER_SEPARATOR)
                        state.answer.append(text)
                        yield TextDelta(text=text)
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
            yield CheckpointReached(state=state.model_copy(deep=True))
            state.iterations += 1
            yield IterationStarted(iteration=state.iterations)
            response: LLMResponse | None = None
            async for event in self._call_model(state, turn):
                if isinstance(event, LLMResponse):
                    response = event
                else:
                    yield event
            assert response is not None
            yield LLMCallFinished(
                iteration=state.iterations,
                usage=response.usage,
                finish_reason=response.finish_reason,
            )
            if not response.tool_calls:
                answer = ChatMessage(role="assistant", content=response.content or None)
                state.conversation.append(answer)
                yield MessagesCommitted(unit_id=f"{state.iterations}:answer", messages=[answer])
                yield await self._completed(turn, state)
                return
            state.pending_content = response.content or None
            state.pending_calls = response.tool_calls
            yield CheckpointReached(state=state.model_copy(deep=True))

    async def _call_model(self, state: LoopState, turn: TurnContext) -> AsyncIterator[Any]:
        messages = [to_llm_message(message) for message in state.conversation]
        # The system prompt is injected at call time, never stored: changing it applies at once.
        if self._system_prompt:
            messages.insert(0, {"role": "system", "content": self._system_prompt})
        warm_up = getattr(self._llm, "warm_up", None)
        if warm_up is not None:
            await warm_up()  # the window lookup below needs the adapter loaded
        messages = self._fit(messages)
        request = await self._hooks.before_llm_call(
            turn, LLMRequest(messages=messages, tools=self._tool_schemas)
        )
        separate = bool(state.answer)  # this call's text starts a new paragraph of the answer
        response: LLMResponse | None = None
        try:
            async for item in self._llm.stream(request):
                if isinstance(item, LLMText):
                    if not item.text:
                        continue
                    if separate:
                        separate = False
                        state.answer.append(ANSWER_SEPARATOR)
                        yield TextDelta(text=ANSWER_SEPARATOR)
                    state.answer.append(item.text)
                    yield TextDelta(text=item.text)
                else:
                    response = item
        except LLMError as exc:
            raise _TurnEnded(self._failed(f"The model call failed: {exc}", state)) from exc
        assert response is not None, "an LLMClient must end its stream with an LLMResponse"
        state.prompt_tokens += response.usage.prompt_tokens
        state.completion_tokens += response.usage.completion_tokens
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
        window_of = getattr(self._llm, "context_window", None)
        count = getattr(self._llm, "count_tokens", None)
        window = window_of() if window_of is not None else None
        budget = window - output_reserve(window) if window and count is not None else None
        return fit_to_window(messages, max_messages=self._max_messages, budget=budget, count=count)

    async def _answer_tool_calls(
        self, state: LoopState, turn: TurnContext
    ) -> AsyncIterator[AgentEvent]:
        """Approvals first (a human may be asked), then run what is allowed, concurrently."""
        to_run: list[ToolCall] = []
        for call in state.pending_calls:
            if call.id in state.results:
                continue
            if call.name == FINISH and FINISH in self._control:
                result = str(_arguments(call).get("result", ""))
                state.finish_result = result
                state.results[call.id] = SavedToolResult(
                    call_id=call.id, name=call.name, content=result, ok=True
                )
                continue
            if call.name == ASK_USER and ASK_USER in self._control:
                question = (
                    str(_arguments(call).get("question", "")).strip()
                    or "Please provide more input."
                )
                state.awaiting = Awaiting(kind="ask_user", call=call, question=question)
                continue
            if call.id not in state.approved:
                approval = await self._hooks.approve_tool_call(turn, call)
                if approval.verdict == "ask":
                    state.awaiting = Awaiting(kind="approval", call=call)
                    return  # one question at a time; the rest waits for the answer
                if approval.verdict == "deny":
                    state.results[call.id] = SavedToolResult(
                        call_id=call.id,
                        name=call.name,
                        content=f"Error: the call of {call.name!r} was denied: {approval.reason}",
                        ok=False,
                    )
                    continue
                state.approved.append(call.id)
            to_run.append(call)
        if state.awaiting is not None and state.awaiting.kind == "approval":
            return
        async for event in self._run_tools(to_run, state, turn):
            yield event

    async def _run_tools(
        self, calls: list[ToolCall], state: LoopState, turn: TurnContext
    ) -> AsyncIterator[AgentEvent]:
        """Run the calls concurrently, yielding start/finish events and a checkpoint per result."""
        if not calls:
            return
        events: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def execute(call: ToolCall) -> ToolResult:
            decision = await self._hooks.before_tool_call(turn, call)
            if isinstance(decision, SupplyResult):
                result = ToolResult(
                    call_id=call.id, name=call.name, content=decision.content, ok=decision.ok
                )
            else:
                if isinstance(decision, ReplaceArguments):
                    call = call.model_copy(update={"arguments": json.dumps(decision.arguments)})
                result = await self._toolbox.execute(call)
            return await self._hooks.after_tool_call(turn, call, result)

        def finished(result: ToolResult) -> None:
            state.tool_calls_made += 1  # counted with the result, so a checkpoint has both
            state.results[result.call_id] = SavedToolResult(
                call_id=result.call_id, name=result.name, content=result.content, ok=result.ok
            )
            events.put_nowait(
                ToolCallFinished(call_id=result.call_id, name=result.name, ok=result.ok)
            )
            events.put_nowait(CheckpointReached(state=state.model_copy(deep=True)))

        execution = asyncio.create_task(
            self._toolbox.run(
                calls,
                execute=execute,
                on_start=lambda call: events.put_nowait(
                    ToolCallStarted(call_id=call.id, name=call.name)
                ),
                on_finish=finished,
            )
        )
        execution.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            execution.result()
        finally:
            # A canceled turn must not leave its tools running in the background.
            execution.cancel()
            await asyncio.wait([execution], timeout=1.0)
        self._check_tool_errors(calls, state)

    def _check_tool_errors(self, calls: list[ToolCall], state: LoopState) -> None:
        for call in calls:
            result = state.results[call.id]
            if result.ok:
                state.failure_streaks.pop(call.name, None)
                continue
            if self._fail_on_tool_error:
                raise _TurnEnded(
                    self._failed(
                        f"Tool {call.name!r} failed (AGENT_TOOL_FAILURE_MODE=fail):"
                        f" {result.content}",
                        state,
                    )
                )
            streak = state.failure_streaks.get(call.name)
            count = streak.count + 1 if streak is not None and streak.error == result.content else 1
            state.failure_streaks[call.name] = ToolFailureStreak(error=result.content, count=count)
            if count >= self._max_consecutive_tool_errors:
                raise _TurnEnded(
                    self._failed(
                        f"Tool {call.name!r} failed {count} times in a row with the same error"
                        f" ({result.content}); stopping the turn"
                        " (AGENT_MAX_CONSECUTIVE_TOOL_ERRORS="
                        f"{self._max_consecutive_tool_errors}).",
                        state,
                    )
                )

    def _commit_tool_unit(self, state: LoopState) -> MessagesCommitted:
        """The assistant message with its calls and all their results (in call order): one unit."""
        unit = [
            ChatMessage(
                role="assistant", content=state.pending_content, tool_calls=state.pending_calls
            )
        ] + [
            ChatMessage(
                role="tool",
                content=state.results[call.id].content,
                tool_call_id=call.id,
                name=call.name,
            )
            for call in state.pending_calls
        ]
        state.conversation.extend(unit)
        state.pending_calls, state.pending_content = [], None
        state.results, state.approved = {}, []
        return MessagesCommitted(unit_id=f"{state.iterations}:tools", messages=unit)

    async def _completed(self, turn: TurnContext, state: LoopState) -> TurnCompleted:
        event = TurnCompleted(
            answer="".join(state.answer),
            usage=self._usage(state),
            llm_calls=state.iterations,
            tool_calls=state.tool_calls_made,
        )
        await self._end(turn, event)
        return event

    async def _end(self, turn: TurnContext, outcome: TurnCompleted | TurnFailed) -> None:
        await self._hooks.on_turn_end(turn, outcome)

    @staticmethod
    def _usage(state: LoopState) -> Usage:
        return Usage(prompt_tokens=state.prompt_tokens, completion_tokens=state.completion_tokens)

    def _failed(self, reason: str, state: LoopState) -> TurnFailed:
        return TurnFailed(
            reason=reason,
            usage=self._usage(state),
            llm_calls=state.iterations,
            tool_calls=state.tool_calls_made,
        )
