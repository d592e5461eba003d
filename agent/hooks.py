"""Hooks: code that watches or steers a turn. Subclass `Hooks` and override what you need.

Every method has a no-op default, so a new hook point never breaks an existing subclass. A hook
that steers returns a decision object; `None` means "no opinion". Several hooks run in
registration order (`HookChain`); the first decision wins for approvals and tool-call decisions.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from agent.context import TurnContext as TurnContext
from agent.errors import AgentError, HookFailureMode
from agent.events import TurnCompleted, TurnFailed
from agent.extensions import AgentExtension
from agent.llm.base import LLMRequest, LLMResponse
from agent.tools.base import ToolResult
from stores.models import Message, ToolCall

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplaceArguments:
    """Run the tool call with these arguments instead."""

    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class SupplyResult:
    """Skip the tool call; the model gets this result instead."""

    content: str
    ok: bool = True


ToolCallDecision = ReplaceArguments | SupplyResult


@dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    verdict: Literal["allow", "deny", "ask"]
    reason: str = ""

    @classmethod
    def allow(cls) -> Approval:
        return cls(verdict="allow")

    @classmethod
    def deny(cls, reason: str) -> Approval:
        return cls(verdict="deny", reason=reason)

    @classmethod
    def ask_human(cls) -> Approval:
        return cls(verdict="ask")


class Hooks:
    """No-op hooks. Override the methods you need."""

    def extensions(self) -> list[AgentExtension]:
        """The A2A extensions this hook implements, declared in the agent card; the turn says
        which are active (`turn.extensions`)."""
        return []

    async def on_turn_start(self, turn: TurnContext) -> None:
        return None

    async def on_turn_end(self, turn: TurnContext, outcome: TurnCompleted | TurnFailed) -> None:
        return None

    async def answer_metadata(self, turn: TurnContext, answer: str) -> dict[str, Any] | None:
        """Metadata for the turn's answer, when it completes: merged into the metadata of the
        answer artifact, of the agent's message in the history and of the final status update
        (an extension's keys under its URI)."""
        return None

    async def before_llm_call(self, turn: TurnContext, request: LLMRequest) -> LLMRequest | None:
        """Return a changed request to send instead."""
        return None

    async def after_llm_call(self, turn: TurnContext, response: LLMResponse) -> None:
        return None

    async def before_tool_call(self, turn: TurnContext, call: ToolCall) -> ToolCallDecision | None:
        """Return `ReplaceArguments` or `SupplyResult` (which skips the call)."""
        return None

    async def after_tool_call(
        self, turn: TurnContext, call: ToolCall, result: ToolResult
    ) -> ToolResult | None:
        """Return a changed result for the model to see."""
        return None

    async def approve_tool_call(self, turn: TurnContext, call: ToolCall) -> Approval | None:
        """Allow, deny (the model gets an error result saying why) or ask a human."""
        return None

    async def reply_directly(self, owner: str, message: Message) -> str | None:
        """Answer a message that starts no task with a Message instead of a Task: the reply's
        text (no task is created, nothing runs), or None to run a turn as usual. For what needs
        no work: a greeting, a refusal, a lookup the hook can answer itself."""
        return None


class HookFailed(AgentError):
    """A hook raised and the failure mode is `fail`."""


class HookChain:
    """Runs registered hooks in order; a hook that raises fails the turn or is logged.

    A hook's answer is checked by type before it is used: hooks are plugins, and one that returns
    something else than its method promises is treated as having no opinion.
    """

    def __init__(
        self, hooks: Iterable[Hooks] = (), *, failure_mode: HookFailureMode = "fail"
    ) -> None:
        self.hooks = list(hooks)
        self._fail = failure_mode == "fail"

    async def _guard(
        self, hook: Hooks, method: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """Call one hook `method` and await its answer; what it raises (also before its first
        await, or at once if it is not `async def`) fails the turn or is logged."""
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            name = f"{type(hook).__name__}.{getattr(method, '__name__', 'hook')}"
            if self._fail:
                raise HookFailed(f"hook {name} raised {exc!r}") from exc
            logger.warning("hook=<%s> | hook raised %r; ignored", name, exc)
            return None

    async def on_turn_start(self, turn: TurnContext) -> None:
        for hook in self.hooks:
            await self._guard(hook, hook.on_turn_start, turn)

    async def on_turn_end(self, turn: TurnContext, outcome: TurnCompleted | TurnFailed) -> None:
        for hook in self.hooks:
            await self._guard(hook, hook.on_turn_end, turn, outcome)

    async def answer_metadata(self, turn: TurnContext, answer: str) -> dict[str, Any] | None:
        """Every hook's answer metadata, merged in registration order (None: none gave any)."""
        merged: dict[str, Any] = {}
        for hook in self.hooks:
            metadata = await self._guard(hook, hook.answer_metadata, turn, answer)
            if isinstance(metadata, dict):
                merged |= metadata
        return merged or None

    async def before_llm_call(self, turn: TurnContext, request: LLMRequest) -> LLMRequest:
        for hook in self.hooks:
            changed = await self._guard(hook, hook.before_llm_call, turn, request)
            if isinstance(changed, LLMRequest):
                request = changed
        return request

    async def after_llm_call(self, turn: TurnContext, response: LLMResponse) -> None:
        for hook in self.hooks:
            await self._guard(hook, hook.after_llm_call, turn, response)

    async def before_tool_call(self, turn: TurnContext, call: ToolCall) -> ToolCallDecision | None:
        for hook in self.hooks:
            decision = await self._guard(hook, hook.before_tool_call, turn, call)
            if isinstance(decision, ReplaceArguments | SupplyResult):
                return decision
        return None

    async def after_tool_call(
        self, turn: TurnContext, call: ToolCall, result: ToolResult
    ) -> ToolResult:
        for hook in self.hooks:
            changed = await self._guard(hook, hook.after_tool_call, turn, call, result)
            if isinstance(changed, ToolResult):
                result = changed
        return result

    async def approve_tool_call(self, turn: TurnContext, call: ToolCall) -> Approval:
        for hook in self.hooks:
            approval = await self._guard(hook, hook.approve_tool_call, turn, call)
            if isinstance(approval, Approval):
                return approval
        return Approval.allow()

    async def reply_directly(self, owner: str, message: Message) -> str | None:
        for hook in self.hooks:
            reply = await self._guard(hook, hook.reply_directly, owner, message)
            if isinstance(reply, str):
                return reply
        return None


class ApprovalRequired(Hooks):
    """Built-in: a human approves every call of the named tools (AGENT_TOOLS_REQUIRING_APPROVAL)."""

    def __init__(self, tool_names: Iterable[str]) -> None:
        self.tool_names = frozenset(tool_names)

    async def approve_tool_call(self, turn: TurnContext, call: ToolCall) -> Approval | None:
        return Approval.ask_human() if call.name in self.tool_names else None


class HookLoadError(ValueError):
    """A configured hook reference cannot be imported or is not a Hooks."""


def load_hooks(references: Iterable[str]) -> list[Hooks]:
    """Import `module:attribute` references: a Hooks instance, a Hooks subclass, or a list."""
    hooks: list[Hooks] = []
    for reference in references:
        module_name, _, attribute = reference.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise HookLoadError(f"cannot load hook {reference!r}: {exc}") from exc
        for item in target if isinstance(target, list | tuple) else [target]:
            try:
                hook = item() if isinstance(item, type) and issubclass(item, Hooks) else item
            except TypeError as exc:
                raise HookLoadError(f"cannot create hook {reference!r}: {exc}") from exc
            if not isinstance(hook, Hooks):
                raise HookLoadError(f"hook {reference!r} is not a Hooks subclass or instance")
            hooks.append(hook)
    return hooks
