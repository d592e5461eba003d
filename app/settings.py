"""Settings: the only place the environment is read. Each field is the env var of the same name,
and a row of the README's configuration table, in its order (a test keeps the two equal); how a
value is parsed and checked is its type (settings_fields)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.errors import HookFailureMode, ToolFailureMode
from agent.outbound import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S
from agent.runtime.admission import MAX_RUNNING_TURNS
from agent.runtime.turn_gate import TURN_SLICE_S
from agent.tools.toolbox import TOOL_CONCURRENCY, TOOL_TIMEOUT_S
from app.settings_fields import (
    CommaList,
    ExtendedCard,
    OutboundAllowList,
    RateLimitSpec,
    RedisUrl,
    extended_card_fields,
)
from stores.base import DEFAULT_TASK_TTL_S


class Settings(BaseSettings):
    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", env_ignore_empty=True)
    # --- the server and its card
    a2a_host: str = Field("127.0.0.1", description="Address the server binds to.")
    a2a_port: int = Field(8000, ge=0, le=65535, description="Port the server listens on.")
    a2a_public_url: str | None = Field(
        None,
        description="Base URL clients use to reach the server (agent card); unset = the URL of"
        " each card request (scheme and `Host`), never the bind address.",
    )
    a2a_trust_forwarded: bool = Field(
        False,
        description="Behind a reverse proxy: take the card's URL from `X-Forwarded-Proto`,"
        " `-Host` and `-Prefix`, and the scheme and client address from the proxy's headers.",
    )
    a2a_extended_card: ExtendedCard = Field(
        None,
        description="Extended agent card: a JSON object, or the path of a JSON file, merged over"
        " the public card for authenticated callers (its `skills` are added to the public ones).",
    )
    a2a_card_v03: bool = Field(
        True,
        description="Add the A2A 0.3 members (`url`, `preferredTransport`, ...) to the agent card"
        " so 0.3 clients accept it; false: a strict 1.0 card (0.3 is served either way).",
    )
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
        ' of `{"url", "headers"}`; each becomes a tool named after the agent.',
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
    llm_timeout_s: float = Field(120.0, gt=0, description="Timeout of one model call.")
    llm_num_retries: int = Field(
        2, ge=0, description="Retries of a transient model error (rate limit, 5xx, timeout)."
    )
    # --- stores
    redis_url: RedisUrl = Field(
        None,
        description="Redis URL (`redis://` or `rediss://`; a cluster:"
        " `redis+cluster://host:port,host:port`); unset = in-memory stores.",
    )
    redis_cluster: bool = Field(
        False, description="REDIS_URL names seed nodes of a Redis Cluster (as `redis+cluster://`)."
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
        DEFAULT_TASK_TTL_S, gt=0, description="Idle time after which a task expires."
    )
    # --- capacity: what one replica runs and accepts
    a2a_max_running_turns: int = Field(
        MAX_RUNNING_TURNS,
        ge=1,
        description="Turns running at once on this replica; more sends are refused (503, retry).",
    )
    a2a_turn_slice_ms: float = Field(
        TURN_SLICE_S * 1000,
        ge=0,
        description="Loop time turns may use in one event-loop pass; beyond it they wait for a"
        " later pass and new requests are read first (a blocking send's turn never waits;"
        " 0: no limit).",
    )
    a2a_max_streams: int = Field(
        10_000,
        ge=1,
        description="Open streams and blocking sends on this replica; more are refused (503).",
    )
    a2a_max_json_depth: int = Field(
        32,
        ge=4,
        le=128,  # the stores read back (pydantic's JSON reader) to about 190 levels
        description="Deepest nesting of JSON objects and arrays in a request (-32602 beyond).",
    )
    a2a_max_parts: int = Field(100, ge=1, description="Parts in one message (-32602 / 400 beyond).")
    a2a_max_text_chars: int = Field(
        100_000, ge=1, description="Characters in one text part (-32602 / 400 beyond)."
    )
    a2a_max_file_bytes: int = Field(
        5 * 1024 * 1024,
        ge=1,
        description="Bytes of one inline file part (`raw`, decoded; -32602 / 400 beyond).",
    )
    a2a_max_metadata_bytes: int = Field(
        16 * 1024,
        ge=2,
        description="Bytes of one `metadata` object, as compact JSON (-32602 / 400 beyond).",
    )
    a2a_max_history_length: int = Field(
        1000,
        ge=1,
        description="Largest `historyLength` a request may ask for (-32602 / 400 beyond).",
    )
    a2a_max_streams_per_principal: int = Field(
        100,
        ge=1,
        description="Open streams and blocking sends of one principal on this replica"
        " (503 beyond).",
    )
    a2a_max_turns_per_principal: int = Field(
        16,
        ge=1,
        description="Turns of one principal running at once on this replica (503 beyond).",
    )
    # --- connections and shutdown
    a2a_shutdown_grace_s: float = Field(
        20.0,
        gt=0,
        description="On SIGTERM: time to drain (streams end, turns hand over) before the process"
        " exits; keep Kubernetes' `terminationGracePeriodSeconds` above it.",
    )
    a2a_max_connections: int = Field(
        12_000,
        ge=1,
        description="Concurrent connections (and requests) this replica serves; beyond, 503"
        " (above A2A_MAX_STREAMS, so a replica full of streams still answers other calls).",
    )
    a2a_stream_keepalive_s: float = Field(
        15.0,
        gt=0,
        description=(
            "An open stream without an event for this long gets an SSE comment, so that proxies"
            " and load balancers keep its connection open."
        ),
    )
    a2a_body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A request body that stops arriving for this long is refused (408).",
    )
    a2a_header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A connection whose request headers are not complete after this long"
        " is closed.",
    )
    a2a_keep_alive_timeout_s: int = Field(
        5, ge=1, description="An idle keep-alive connection is closed after this many seconds."
    )
    a2a_max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="Largest request line and headers in bytes; beyond, the connection gets 400.",
    )
    a2a_memory_max_tasks: int = Field(
        10_000,
        ge=1,
        description="Tasks the in-memory store keeps (with their journals, checkpoints, push"
        " configs and leases), and as many conversations (each its last AGENT_HISTORY_MAX_MESSAGES"
        " to twice as many messages: what a turn reads); beyond, the oldest ended tasks and the"
        " conversations written to longest ago are dropped (503 if no task has ended).",
    )
    redis_command_timeout_s: float = Field(
        1.5,
        gt=0,
        description="A Redis command without an answer after this long fails (store unavailable).",
    )
    # --- callers: authentication, rate, hosts, origins
    a2a_auth: Literal["auto", "none"] = Field(
        "auto",
        description="`auto`: require the credentials configured below (with none configured, only"
        " a loopback address may be served); `none`: serve without authentication on purpose.",
    )
    a2a_api_keys: SecretStr | None = Field(
        None,
        description="Comma-separated API keys, each `principal:key` or `principal:sha256:<hex>`;"
        " clients send `Authorization: Bearer <key>` or `X-API-Key: <key>`.",
    )
    a2a_jwt_jwks_url: str | None = Field(
        None, description="JWKS URL of the identity provider whose bearer JWTs are accepted."
    )
    a2a_jwt_issuer: str | None = Field(
        None, description="The `iss` bearer JWTs must have (required with A2A_JWT_JWKS_URL)."
    )
    a2a_jwt_audience: str | None = Field(
        None, description="The `aud` bearer JWTs must have (required with A2A_JWT_JWKS_URL)."
    )
    a2a_rate_limit: RateLimitSpec = Field(
        None,
        description="Requests per principal, e.g. `60/minute` (a token bucket, in Redis when"
        " REDIS_URL is set: 429 beyond); unset = no limit.",
    )
    a2a_max_body_bytes: int = Field(
        10 * 1024 * 1024,
        ge=1024,
        description="Largest request body in bytes; a larger one gets 413 before it is read.",
    )
    a2a_allowed_hosts: CommaList = Field(
        default_factory=list,
        description="Comma-separated `Host` names served (`*.example.com`, `*` = any); unset ="
        " the public URL's host, plus loopback names when bound to loopback (bound elsewhere"
        " without a public URL: any). IP addresses always pass.",
    )
    a2a_cors_origins: CommaList = Field(
        default_factory=list,
        description="Comma-separated browser origins allowed to call the server (CORS); unset ="
        " none.",
    )
    # --- outgoing requests and push notifications
    a2a_outbound_allow: OutboundAllowList = Field(
        default_factory=list,
        description="Comma-separated networks (CIDR) or host names outgoing requests may reach"
        " although loopback, private or link-local (refused otherwise).",
    )
    a2a_outbound_timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        gt=0,
        description="Timeout of each phase (connect, read) of what the server fetches for itself:"
        " the identity provider's JWKS.",
    )
    a2a_outbound_max_response_bytes: int = Field(
        DEFAULT_MAX_RESPONSE_BYTES,
        ge=1,
        description="Largest document the server fetches for itself (the identity provider's"
        " JWKS) accepts.",
    )
    a2a_console: bool = Field(
        True, description="Serve the web console at `/console` (static, same origin, strict CSP)."
    )
    a2a_push_notifications: bool = Field(
        True, description="Offer push notifications (webhooks); false: every push call is -32003."
    )
    a2a_push_allowed_hosts: OutboundAllowList = Field(
        default_factory=list,
        description="Comma-separated host names or networks (CIDR) webhooks may reach although"
        " loopback, private, link-local or CGNAT (added to A2A_OUTBOUND_ALLOW for webhooks).",
    )
    a2a_push_max_attempts: int = Field(
        5, ge=1, le=20, description="Attempts per webhook and event before it is given up."
    )
    a2a_push_backoff_s: float = Field(
        0.5, gt=0, description="Wait before the first retry of a webhook; doubled each time."
    )
    a2a_push_timeout_s: float = Field(
        10.0, gt=0, description="Timeout of each phase of one webhook request (connect, read)."
    )
    # --- logs and telemetry
    log_level: str = Field("info", description="Log level (debug, info, warning, error).")
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines as text, or one JSON object per line (`json`)."
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP collector URL: traces and metrics are exported there (the SDK"
        " reads the other `OTEL_*` variables); unset = no export.",
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        None, description="OTLP/HTTP URL for traces only (full path, e.g. `.../v1/traces`)."
    )
    otel_exporter_otlp_metrics_endpoint: str | None = Field(
        None, description="OTLP/HTTP URL for metrics only (full path, e.g. `.../v1/metrics`)."
    )

    @property
    def public_url(self) -> str | None:
        """A2A_PUBLIC_URL without a trailing slash (clients append `/message:send` to it)."""
        return self.a2a_public_url.rstrip("/") if self.a2a_public_url else None

    @property
    def extended_card(self) -> dict[str, Any] | None:
        """The extended card's fields (A2A_EXTENDED_CARD), or None when there is none."""
        return extended_card_fields(self.a2a_extended_card) if self.a2a_extended_card else None

    @property
    def tracing_enabled(self) -> bool:
        return bool(self.otel_exporter_otlp_endpoint or self.otel_exporter_otlp_traces_endpoint)

    @property
    def otlp_metrics_enabled(self) -> bool:
        return bool(self.otel_exporter_otlp_endpoint or self.otel_exporter_otlp_metrics_endpoint)

    @property
    def uses_demo_model(self) -> bool:
        return not self.llm_model and self.agent_profile == "default"


def configuration_table() -> str:
    """The README's configuration table, rendered from the fields (a test keeps them equal)."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
        shown = "(unset)" if default is None or default == [] else f"`{default}`"
        rows.append(f"| `{name.upper()}` | {shown} | {field.description} |")
    return "\n".join(rows)
