"""Outgoing requests, push notifications, logs and telemetry."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from agent.outbound import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S
from app.settings.fields import (
    OutboundAllowList,
)


class OperationsSettings(BaseSettings):
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
