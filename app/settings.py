"""Settings: the only place the environment is read. Each field is the env var of the same name."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)

    a2a_host: str = Field("127.0.0.1", description="Address the server binds to.")
    a2a_port: int = Field(8000, ge=0, le=65535, description="Port the server listens on.")
    a2a_public_url: str | None = Field(
        None,
        description="Base URL clients use to reach the server (agent card); default http://<host>:<port>.",
    )
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
    agent_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated `module:attribute` references to tool functions (or lists).",
    )
    agent_tool_concurrency: int = Field(
        5, ge=1, description="Tool calls of one model response run at most this many at a time."
    )
    agent_tool_timeout_s: float = Field(30.0, gt=0, description="Timeout of one tool call.")
    agent_tool_failure_mode: Literal["continue", "fail"] = Field(
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
    agent_hooks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated `module:attribute` references to Hooks instances or classes.",
    )
    agent_tools_requiring_approval: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated tool names a human must approve before each call.",
    )
    agent_hook_failure_mode: Literal["fail", "warn"] = Field(
        "fail", description="A hook that raises fails the turn, or is logged and ignored."
    )
    agent_history_max_messages: int = Field(
        50, ge=2, description="Most conversation messages sent to the model per call."
    )
    llm_model: str | None = Field(
        None,
        description="LiteLLM model string (e.g. `openai/gpt-4o-mini`); unset = offline demo model.",
    )
    llm_api_base: str | None = Field(None, description="Base URL of the model's API.")
    llm_api_key: SecretStr | None = Field(None, description="API key for the model provider.")
    llm_timeout_s: float = Field(120.0, gt=0, description="Timeout of one model call.")
    llm_num_retries: int = Field(
        2, ge=0, description="Retries of a transient model error (rate limit, 5xx, timeout)."
    )
    redis_url: str | None = Field(
        None, description="Redis URL (`redis://` or `rediss://`); unset = in-memory stores."
    )
    redis_key_prefix: str = Field(
        "a2a", min_length=1, description="Prefix of every Redis key the server writes."
    )
    lease_ttl_s: float = Field(
        15.0,
        gt=0,
        description="Lease of a running turn; another server takes over once it expires.",
    )
    task_ttl_s: int = Field(
        7 * 24 * 3600, gt=0, description="Idle time after which a task expires."
    )
    log_level: str = Field("info", description="Log level (debug, info, warning, error).")

    @field_validator("agent_tools", "agent_hooks", "agent_tools_requiring_approval", mode="before")
    @classmethod
    def _split_references(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("redis://", "rediss://")):
            raise ValueError("REDIS_URL must start with redis:// or rediss://")
        return value

    @property
    def public_url(self) -> str:
        # No trailing slash: clients append REST paths to it (`<url>/message:send`).
        if self.a2a_public_url:
            return self.a2a_public_url.rstrip("/")
        host = self.a2a_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.a2a_port}"

    @property
    def uses_demo_model(self) -> bool:
        return not self.llm_model


def configuration_table() -> str:
    """The README's configuration table, rendered from the fields (a test keeps them equal)."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
        if default is None or default == []:
            shown = "(unset)"
        else:
            shown = f"`{default}`"
        rows.append(f"| `{name.upper()}` | {shown} | {field.description} |")
    return "\n".join(rows)
