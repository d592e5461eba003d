"""Who may call: authentication, rates, hosts and origins."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from app.settings.fields import (
    CommaList,
    RateLimitSpec,
)


class CallerSettings(BaseSettings):
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
