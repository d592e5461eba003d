"""The agent: its prompt, tools, hooks and model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from agent.errors import HookFailureMode, ToolFailureMode
from agent.tools.toolbox import TOOL_CONCURRENCY, TOOL_TIMEOUT_S
from app.settings.fields import CommaList, FallbackModels, ModelParams


class EngineSettings(BaseSettings):
    # --- the agent: prompt, tools, hooks
    agent_name: str = Field("A2A Agent", description="Agent name in the agent card.")
    agent_description: str = Field(
        "A helpful assistant that can use tools.",
        description="Agent description in the agent card.",
    )
    agent_system_prompt: str = Field(
        "You are a helpful assistant.",
        description="System prompt, injected at every model call (never stored).",
    )
    agent_max_iterations: int = Field(
        10, ge=1, description="Model calls per turn before the task fails."
    )
    agent_tools: CommaList = Field(
        default_factory=list,
        description="Comma-separated `module:attribute` references to tool functions (or lists).",
    )
    agent_mcp_servers: str | None = Field(
        None,
        description="MCP servers whose tools the agent uses: JSON in the `mcpServers` shape"
        " (`command`/`args`/`env`, or `url`/`headers`), or the path of a JSON or YAML file.",
    )
    agent_remote_agents: str | None = Field(
        None,
        description="Other A2A agents as tools: agent card URLs, comma-separated, or a JSON list"
        ' of `{"url", "headers", "require_signed_card"}` (true: only if its card\'s signature'
        " verifies); each becomes a tool named after the agent.",
    )
    agent_max_call_depth: int = Field(
        3, ge=1, description="Agents calling agents (remote agent tools) stop at this depth."
    )
    agent_tool_concurrency: int = Field(
        TOOL_CONCURRENCY,
        ge=1,
        description="Tool calls of one model response run at most this many at a time.",
    )
    agent_tool_timeout_s: float = Field(
        TOOL_TIMEOUT_S, gt=0, description="Timeout of one tool call."
    )
    agent_tool_failure_mode: ToolFailureMode = Field(
        "continue", description="On a tool error: let the model see it and go on, or fail the turn."
    )
    agent_max_consecutive_tool_errors: int = Field(
        3, ge=1, description="Same tool, same error this many times in a row: the turn fails."
    )
    agent_ask_user_tool: bool = Field(
        True, description="Offer the model the `ask_user(question)` tool (input-required)."
    )
    agent_finish_tool: bool = Field(
        True, description="Offer the model the `finish(result)` tool that ends the turn."
    )
    agent_hooks: CommaList = Field(
        default_factory=list,
        description="Comma-separated `module:attribute` references to Hooks instances or classes.",
    )
    agent_tools_requiring_approval: CommaList = Field(
        default_factory=list,
        description="Comma-separated tool names a human must approve before each call.",
    )
    agent_hook_failure_mode: HookFailureMode = Field(
        "fail", description="A hook that raises fails the turn, or is logged and ignored."
    )
    agent_history_max_messages: int = Field(
        50, ge=2, description="Most conversation messages sent to the model per call."
    )
    agent_reasoning: Literal["hide", "stream"] = Field(
        "hide",
        description="The model's reasoning (thinking): `hide` keeps it from clients; `stream`"
        " sends it as it comes, in WORKING status updates whose text parts have metadata"
        ' `{"thought": true}` (never in the answer).',
    )
    # --- the model
    llm_model: str | None = Field(
        None,
        description="LiteLLM model string (e.g. `openai/gpt-4o-mini`); unset = offline demo model;"
        " `scripted` = a fixed answer for load tests (SCRIPTED_*).",
    )
    agent_profile: Literal["default", "tck"] = Field(
        "default",
        description="`tck`: the conformance profile, a scripted model, tools and a hook that"
        " produce every behaviour the A2A TCK asks for, and webhooks to loopback allowed"
        " (docs/conformance.md); LLM_MODEL ignored.",
    )
    scripted_chunks: int = Field(
        20, ge=0, description="With `LLM_MODEL=scripted`: text chunks (20 characters) per answer."
    )
    scripted_delay_ms: float = Field(
        0.0, ge=0, description="With `LLM_MODEL=scripted`: pause before each chunk, in ms."
    )
    llm_api_base: str | None = Field(None, description="Base URL of the model's API.")
    llm_api_key: SecretStr | None = Field(None, description="API key for the model provider.")
    llm_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Timeout of one model call, and the time its retries must start within,"
        " counted from its first attempt (a `retry-after` asking for longer fails the call at"
        " once); each fallback model has its own.",
    )
    llm_num_retries: int = Field(
        2,
        ge=0,
        description="Retries of a transient model error (429, 5xx, 529, timeout): after the"
        " provider's `retry-after` when it gives one, else a jittered exponential backoff.",
    )
    llm_params: ModelParams = Field(
        default_factory=dict,
        description="Model parameters sent with every call, a JSON object as LiteLLM takes them"
        ' (`{"temperature": 0.2, "max_tokens": 4096}`, `top_p`, `reasoning_effort`, `thinking`,'
        " `extra_headers`, ...); the keys the server sets itself (`model`, `messages`, `tools`,"
        " `stream`, `api_base`, `api_key`, `timeout`, `num_retries`) are refused.",
    )
    llm_fallback_models: FallbackModels = Field(
        default_factory=list,
        description="Models tried in order when a call fails after its retries: a JSON list of"
        ' `{"model", "api_base", "api_key"}` (`api_key` as `${VAR}`, read from the'
        " environment); only while no answer text has reached the client.",
    )
    llm_prompt_caching: bool = Field(
        True,
        description="Mark the system prompt and the tool list as cache breakpoints for providers"
        " that take them (Anthropic; within its 4); others cache on their own.",
    )
