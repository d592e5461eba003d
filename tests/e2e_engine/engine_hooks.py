"""Hooks loaded (via AGENT_HOOKS) by the approval/hooks server of the engine end-to-end tests."""

from __future__ import annotations

import json

from agent.context import TurnContext
from agent.hooks import Approval, Hooks, SupplyResult
from stores.models import ToolCall

DENY_REASON = "policy forbids the forbidden tool"
SUPPLIED_PREFIX = "supplied by hook for"


class PolicyHooks(Hooks):
    """Denies every call of `forbidden`, answers `lookup` itself, and breaks on `explosive`."""

    async def approve_tool_call(self, turn: TurnContext, call: ToolCall) -> Approval | None:
        if call.name == "forbidden":
            return Approval.deny(DENY_REASON)
        if call.name == "explosive":
            raise RuntimeError("approval hook exploded")
        return None

    async def before_tool_call(self, turn: TurnContext, call: ToolCall) -> SupplyResult | None:
        if call.name == "lookup":
            key = json.loads(call.arguments or "{}").get("key", "")
            return SupplyResult(content=f"{SUPPLIED_PREFIX} {key}")
        return None
