"""The tool-source interface under its first import path (the README's embedding example):
kept for one release; new code imports `agent.tools.base`."""

from agent.tools.base import (
    ToolError,
    ToolNeedsInput,
    ToolProvider,
    ToolSpec,
    UnavailableSource,
    report_progress,
)
from agent.tools.function import FunctionToolProvider

__all__ = [
    "FunctionToolProvider",
    "ToolError",
    "ToolNeedsInput",
    "ToolProvider",
    "ToolSpec",
    "UnavailableSource",
    "report_progress",
]
