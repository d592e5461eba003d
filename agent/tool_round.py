"""ToolRound: answering the tool calls of one model response.

Approvals first (a hook may allow or deny, or a human is asked: the round suspends with
`state.awaiting`), then the allowed calls run concurrently, each through the hooks, with a start
and a finish event and a checkpoint per result; then the circuit breaker looks at the failures.
Control tools (`ask_user`, `finish`) are acted on here rather than run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

from opentelemetry.trace import StatusCode

from agent.context import TurnContext
from agent.errors import AgentError
from agent.events import (
    AgentEvent,
    ArtifactProduced,
    CheckpointReached,
    MessagesCommitted,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
)
from agent.hooks import HookChain, ReplaceArguments, SupplyResult
from agent.state import Awaiting, LoopState, SavedToolResult, ToolFailureStreak, ToolInput
from agent.tools.base import ToolResult, listen_to_progress
from agent.tools.control import ASK_USER, FINISH, arguments_of
from agent.tools.outputs import TaskRejected
from agent.tools.toolbox import Toolbox
from agent.tracing import start_span
from stores.models import ChatMessage, ToolCall

RESULT_SHOWN = 2000  # characters of a tool's result its finish event carries (for clients)


class ToolRoundFailed(AgentError):
    """The round ends the turn (a tool failed under AGENT_TOOL_FAILURE_MODE=fail, or the circuit
    breaker tripped, or a tool rejected the task); the message says why."""

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


class ToolRound:
    def __init__(
        self,
        toolbox: Toolbox,
        hooks: HookChain,
        *,
        control: set[str],
        fail_on_tool_error: bool,
        max_consecutive_tool_errors: int,
    ) -> None:
        self._toolbox = toolbox
        self._hooks = hooks
        self._control = control
        self._fail_on_tool_error = fail_on_tool_error
        self._max_consecutive_tool_errors = max_consecutive_tool_errors

    async def answer(self, state: LoopState, turn: TurnContext) -> AsyncGenerator[AgentEvent, None]:
        """Approvals first (a human may be asked), then run what is allowed, concurrently."""
        to_run: list[ToolCall] = []
        client_names = {tool.name for tool in state.client_tools}
        for_client = [
            call
            for call in state.pending_calls
            if call.name in client_names and call.id not in state.results
        ]
        for call in state.pending_calls:
            if call.id in state.results or call in for_client:
                continue
            waiting = state.tool_inputs.get(call.id)
            if waiting is not None and waiting.answer is None:
                continue  # asked the user; the question is put below
            if call.name == FINISH and FINISH in self._control:
                result = str(arguments_of(call).get("result", ""))
                state.finish_result = result
                state.results[call.id] = SavedToolResult(
                    call_id=call.id, name=call.name, content=result, ok=True
                )
                continue
            if call.name == ASK_USER and ASK_USER in self._control:
                question = (
                    str(arguments_of(call).get("question", "")).strip()
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
        # Closed with this round (its turn stopped): the calls running are cancelled then (`_run`).
        async with aclosing(self._run(to_run, state, turn)) as events:
            async for event in events:
                yield event
        if state.awaiting is not None:
            return
        # Ours have run; what waits for the user suspends the turn, one question at a time.
        asking = next(
            (
                call
                for call in state.pending_calls
                if call.id in state.tool_inputs and state.tool_inputs[call.id].answer is None
            ),
            None,
        )
        if asking is not None:
            question = state.tool_inputs[asking.id].question
            state.awaiting = Awaiting(kind="tool_input", call=asking, question=question)
        elif for_client:
            state.awaiting = Awaiting(kind="client_tools", call=for_client[0], calls=for_client)

    async def _run(
        self, calls: list[ToolCall], state: LoopState, turn: TurnContext
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the calls concurrently, yielding start/finish events and a checkpoint per result."""
        if not calls:
            return
        events: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def execute(call: ToolCall) -> ToolResult:
            # Each call runs in a task of its own, so this listener is this call's alone.
            listen_to_progress(
                lambda text: events.put_nowait(
                    ToolProgress(call_id=call.id, name=call.name, text=text)
                ),
                turn,
            )
            span = start_span("tool.execute", turn.trace, **{"tool.name": call.name})
            try:
                result = await run_through_hooks(call)
                if not result.ok:
                    span.set_status(StatusCode.ERROR, result.content[:200])
                return result
            finally:
                span.end()

        async def run_through_hooks(call: ToolCall) -> ToolResult:
            waited = state.tool_inputs.get(call.id)
            if waited is not None and waited.answer is not None:
                # The hooks saw this call start before it asked the user; it goes on now.
                answer = (waited.state, waited.answer)
                result = await self._toolbox.execute(call, turn, answer=answer)
            else:
                decision = await self._hooks.before_tool_call(turn, call)
                if isinstance(decision, SupplyResult):
                    result = ToolResult(
                        call_id=call.id, name=call.name, content=decision.content, ok=decision.ok
                    )
                else:
                    if isinstance(decision, ReplaceArguments):
                        arguments = json.dumps(decision.arguments)
                        call = call.model_copy(update={"arguments": arguments})
                    result = await self._toolbox.execute(call, turn)
            if result.needs_input is not None:
                return result  # not a result yet: the hooks hear of it when there is one
            return await self._hooks.after_tool_call(turn, call, result)

        began: dict[str, float] = {}

        def started(call: ToolCall) -> None:
            began[call.id] = time.monotonic()
            events.put_nowait(
                ToolCallStarted(call_id=call.id, name=call.name, arguments=call.arguments)
            )

        def finished(result: ToolResult) -> None:
            if result.needs_input is not None:
                asked = result.needs_input
                state.tool_inputs[result.call_id] = ToolInput(
                    question=asked.question, state=asked.state
                )
                events.put_nowait(CheckpointReached.of(state))
                return
            state.tool_inputs.pop(result.call_id, None)
            state.tool_calls_made += 1  # counted with the result, so a checkpoint has both
            state.results[result.call_id] = SavedToolResult(
                call_id=result.call_id, name=result.name, content=result.content, ok=result.ok
            )
            for artifact in result.artifacts:
                events.put_nowait(ArtifactProduced(artifact=artifact))
            events.put_nowait(
                ToolCallFinished(
                    call_id=result.call_id,
                    name=result.name,
                    ok=result.ok,
                    result=result.content[:RESULT_SHOWN],
                    duration_s=time.monotonic() - began.get(result.call_id, time.monotonic()),
                )
            )
            events.put_nowait(CheckpointReached.of(state))

        execution = asyncio.create_task(
            self._toolbox.run(
                calls,
                execute=execute,
                on_start=started,
                on_finish=finished,
            )
        )
        execution.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            try:
                execution.result()
            except TaskRejected as exc:
                raise ToolRoundFailed(str(exc), rejected=True) from exc
        finally:
            # A canceled turn must not leave its tools running in the background.
            execution.cancel()
            await asyncio.wait([execution], timeout=1.0)
        self._check_errors(calls, state)

    def _check_errors(self, calls: list[ToolCall], state: LoopState) -> None:
        for call in calls:
            result = state.results.get(call.id)
            if result is None:
                continue  # waits for the user
            if result.ok:
                state.failure_streaks.pop(call.name, None)
                continue
            if self._fail_on_tool_error:
                raise ToolRoundFailed(
                    f"Tool {call.name!r} failed (AGENT_TOOL_FAILURE_MODE=fail): {result.content}"
                )
            streak = state.failure_streaks.get(call.name)
            count = streak.count + 1 if streak is not None and streak.error == result.content else 1
            state.failure_streaks[call.name] = ToolFailureStreak(error=result.content, count=count)
            if count >= self._max_consecutive_tool_errors:
                raise ToolRoundFailed(
                    f"Tool {call.name!r} failed {count} times in a row with the same error"
                    f" ({result.content}); stopping the turn"
                    f" (AGENT_MAX_CONSECUTIVE_TOOL_ERRORS={self._max_consecutive_tool_errors})."
                )

    @staticmethod
    def commit(state: LoopState) -> MessagesCommitted:
        """The assistant message with its calls and all their results (in call order): one unit."""
        unit = [
            ChatMessage(
                role="assistant",
                content=state.pending_content,
                tool_calls=state.pending_calls,
                thinking=state.pending_thinking,
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
        state.pending_calls, state.pending_content, state.pending_thinking = [], None, None
        state.results, state.approved, state.tool_inputs = {}, [], {}
        return MessagesCommitted(unit_id=f"{state.iterations}:tools", messages=unit)
