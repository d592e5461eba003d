"""The engine's run errors, and what it does when a tool or a hook fails.

`AgentError` is the base of what ends or refuses a turn inside the engine (a model call that
failed, a hook that raised, a tool round that ended the turn), so a caller can tell the engine's
own failures from a bug. Signals a tool raises on purpose (`ToolError`, `ToolNeedsInput`,
`TaskRejected`) are not errors of the run and stay outside it.
"""

from __future__ import annotations

from typing import Literal

ToolFailureMode = Literal["continue", "fail"]
"""On a tool error: the model sees it and goes on, or the turn fails (AGENT_TOOL_FAILURE_MODE)."""

HookFailureMode = Literal["fail", "warn"]
"""A hook that raises fails the turn, or is logged and ignored (AGENT_HOOK_FAILURE_MODE)."""


class AgentError(Exception):
    """Base of the errors a turn run raises."""
