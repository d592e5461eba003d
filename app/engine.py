"""The agent's engine parts, built from Settings: its model client, its tool sources and its
toolbox. One call each, so a server that hosts several agents builds each agent's the same way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agent.llm.base import LLMClient
from agent.llm.demo import DemoModel
from agent.llm.litellm import LiteLLMClient
from agent.llm.scripted import SCRIPTED_MODEL_NAME, ScriptedModel
from agent.tck_profile import TCK_PROFILE, TCK_TOOLS, TckModel
from agent.tools.base import ToolProvider, UnavailableSource
from agent.tools.builtin import BUILTIN_TOOLS
from agent.tools.function import FunctionTool, load_tool_functions
from agent.tools.mcp import MCPToolProvider, parse_mcp_servers
from agent.tools.toolbox import Toolbox
from app.remote_agents import RemoteAgentProvider, parse_remote_agents
from app.settings import Settings

logger = logging.getLogger(__name__)


def build_llm(settings: Settings) -> LLMClient:
    if settings.agent_profile == TCK_PROFILE:
        return TckModel()
    if settings.uses_demo_model:
        return DemoModel()
    if settings.llm_model == SCRIPTED_MODEL_NAME:
        return ScriptedModel(chunks=settings.scripted_chunks, delay_ms=settings.scripted_delay_ms)
    assert settings.llm_model is not None
    return LiteLLMClient(
        model=settings.llm_model,
        api_base=settings.llm_api_base,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        timeout_s=settings.llm_timeout_s,
        num_retries=settings.llm_num_retries,
        prompt_caching=settings.llm_prompt_caching,
        params=settings.llm_params,
        fallbacks=settings.llm_fallback_models,
    )


def build_tool_providers(settings: Settings) -> list[ToolProvider]:
    """The tool sources the settings configure (AGENT_MCP_SERVERS, AGENT_REMOTE_AGENTS)."""
    mcp = _configured_sources(
        "mcp",
        "AGENT_MCP_SERVERS",
        settings.agent_mcp_servers,
        parse_mcp_servers,
        lambda server: MCPToolProvider(server, call_timeout_s=settings.agent_tool_timeout_s),
    )
    remote = _configured_sources(
        "remote_agents",
        "AGENT_REMOTE_AGENTS",
        settings.agent_remote_agents,
        parse_remote_agents,
        lambda agent: RemoteAgentProvider(
            agent,
            max_call_depth=settings.agent_max_call_depth,
            timeout_s=settings.agent_tool_timeout_s,
        ),
    )
    return mcp + remote


def _configured_sources(
    name: str,
    variable: str,
    value: str | None,
    parse: Callable[[str], list[Any]],
    provider: Callable[[Any], ToolProvider],
) -> list[ToolProvider]:
    """One provider per configured entry. A value that does not parse is one broken source
    (logged, shown by /readyz): the server starts all the same."""
    if not value:
        return []
    try:
        entries = parse(value)
    except ValueError as exc:
        logger.error("%s | %s is not usable: %s", name, variable, exc)
        return [UnavailableSource(name, str(exc))]
    return [provider(entry) for entry in entries]


def build_toolbox(
    settings: Settings, *, tools: list[Callable[..., Any]], providers: list[ToolProvider]
) -> Toolbox:
    """The configured tools (AGENT_TOOLS, the demo's and the TCK profile's) and sources, then
    what an embedding program adds."""
    function_tools = load_tool_functions(settings.agent_tools) + [
        FunctionTool(function) for function in tools
    ]
    if settings.uses_demo_model:
        function_tools = [FunctionTool(function) for function in BUILTIN_TOOLS] + function_tools
    if settings.agent_profile == TCK_PROFILE:
        function_tools = [FunctionTool(function) for function in TCK_TOOLS] + function_tools
    return Toolbox(
        function_tools,
        providers=[*build_tool_providers(settings), *providers],
        concurrency=settings.agent_tool_concurrency,
        timeout_s=settings.agent_tool_timeout_s,
    )
