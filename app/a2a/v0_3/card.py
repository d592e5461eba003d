"""The A2A 0.3 fields of the agent card, beside the 1.0 ones in the same document.

One `/.well-known/agent-card.json` serves both generations' card resolvers (as a2a-python does):
a 0.3 client needs `url`, `preferredTransport`, `protocolVersion`, `additionalInterfaces`,
`security` and `type`-discriminated `securitySchemes`; a 1.0 client reads `supportedInterfaces`,
`securityRequirements` and the oneof-keyed schemes, and ignores the rest. The 0.3 members are added
into the 1.0 objects where both use the same name (a scheme holds its 1.0 oneof key and its 0.3
`type`), never replacing a 1.0 member.
"""

from __future__ import annotations

from typing import Any

V03_PROTOCOL_VERSION = "0.3.0"


def _v03_scheme(scheme: dict[str, Any]) -> dict[str, Any]:
    if "apiKeySecurityScheme" in scheme:
        api_key = scheme["apiKeySecurityScheme"]
        return {"type": "apiKey", "in": api_key.get("location", "header"), "name": api_key["name"]}
    if "httpAuthSecurityScheme" in scheme:
        http = scheme["httpAuthSecurityScheme"]
        converted = {"type": "http", "scheme": http.get("scheme", "Bearer").lower()}
        if http.get("bearerFormat"):
            converted["bearerFormat"] = http["bearerFormat"]
        return converted
    return {}


def with_v03_fields(card: dict[str, Any], *, url: str, grpc: str | None = None) -> dict[str, Any]:
    """The card with the 0.3 members added: JSON-RPC at `url` preferred, HTTP+JSON beside it,
    and gRPC at the target `grpc` when it is served."""
    capabilities = card.get("capabilities", {})
    v03: dict[str, Any] = {
        "protocolVersion": V03_PROTOCOL_VERSION,
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": url, "transport": "HTTP+JSON"},
            *([{"url": grpc, "transport": "GRPC"}] if grpc else []),
        ],
    }
    if capabilities.get("extendedAgentCard"):
        v03["supportsAuthenticatedExtendedCard"] = True
    schemes = card.get("securitySchemes")
    if schemes:
        v03["securitySchemes"] = {
            name: scheme | _v03_scheme(scheme) for name, scheme in schemes.items()
        }
        v03["security"] = [{name: []} for name in schemes]
    return card | v03
