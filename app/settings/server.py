"""The server's address and its agent card (what it signs, declares and serves to which tenants),
and its gRPC port."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from app.settings.fields import (
    ExtendedCard,
    ExtensionList,
    Port,
    TenantName,
    TenantNames,
)


class ServerSettings(BaseSettings):
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
    a2a_extensions: ExtensionList = Field(
        default_factory=list,
        description="A2A extensions the agent supports (card `capabilities.extensions`): a JSON"
        " list of `{uri, description, required, params}`, or a JSON or YAML file's path.",
    )
    a2a_tenant: TenantName = Field(
        None, description="The tenant the card's interfaces name, and every 0.3 request's."
    )
    a2a_tenants: TenantNames = Field(
        default_factory=list,
        description="Comma-separated tenant names served, and A2A_TENANT (another: 404); unset ="
        " any tenant name, each tenant a scope of its own (docs/protocol.md#tenants).",
    )
    agents_file: str | None = Field(
        None,
        description="A YAML or JSON file of the agents this server serves, each under `/{name}`"
        " with its own card, prompt, model and tools; the first also at `/` (docs/agents.md)."
        " Unset: one agent, from the environment, at `/`.",
    )
    a2a_card_v03: bool = Field(
        True,
        description="Add the A2A 0.3 members (`url`, `preferredTransport`, ...) to the agent card"
        " so 0.3 clients accept it; false: a strict 1.0 card (0.3 is served either way).",
    )
    a2a_card_signing_key: str | None = Field(
        None,
        description="Path of a PEM private key (EC P-256, RSA or Ed25519) that signs the agent"
        " cards (a JWS in `signatures`; its public key at `/.well-known/jwks.json`); unset: none.",
    )
    a2a_card_signing_kid: str | None = Field(
        None, description="The signing key's `kid`; unset = its RFC 7638 JWK thumbprint."
    )
    a2a_card_signing_extra_jwks: str | None = Field(
        None, description="Old public keys served beside it (rotation): a JWKS, or its file's path."
    )
    # --- the gRPC binding (app/grpc/), beside HTTP in the same process
    a2a_grpc_port: Port = Field(
        None,
        description="Port of the gRPC binding (the A2A 1.0 and 0.3 services, health, reflection)"
        " on A2A_HOST, beside HTTP in the same process; unset = no gRPC.",
    )
    a2a_grpc_public_port: Port = Field(
        None, description="Port the card's `GRPC` interfaces name; unset = A2A_GRPC_PORT."
    )
    a2a_grpc_tls_cert: str | None = Field(
        None, description="PEM certificate chain file: gRPC over TLS; unset = plaintext HTTP/2."
    )
    a2a_grpc_tls_key: str | None = Field(None, description="PEM key file of A2A_GRPC_TLS_CERT.")
