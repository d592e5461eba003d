"""The A2A 0.3 fields of the agent card, beside the 1.0 ones in the same document.

One `/.well-known/agent-card.json` serves both generations' card resolvers (as a2a-python does):
a 0.3 client needs `url`, `preferredTransport`, `protocolVersion`, `additionalInterfaces`,
`security` and `type`-discriminated `securitySchemes`; a 1.0 client reads `supportedInterfaces`,
`securityRequirements` and the oneof-keyed schemes. The 0.3 members are added into the 1.0 objects
where both use the same name (a scheme holds its 1.0 oneof key and its 0.3 `type`), never
replacing a 1.0 member, and never saying anything else than the 1.0 ones: a 1.0 client either
ignores them or (the official SDK's card resolver) maps them to 1.0, and must read the same card
either way, or a signature over the 1.0 card (app.a2a.card_signing) would not verify.
"""

from __future__ import annotations

from typing import Any

V03_PROTOCOL_VERSION = "0.3.0"


# The 0.3 `type` of each 1.0 scheme member.
_V03_TYPES = {
    "apiKeySecurityScheme": "apiKey",
    "httpAuthSecurityScheme": "http",
    "oauth2SecurityScheme": "oauth2",
    "openIdConnectSecurityScheme": "openIdConnect",
    "mtlsSecurityScheme": "mutualTLS",
}


def _v03_scheme(scheme: dict[str, Any]) -> dict[str, Any]:
    """The 0.3 members of a 1.0 scheme: its `type` and the 1.0 member's own fields, unchanged
    (an API key's `location` as `in`). Unchanged, because a 1.0 client that maps a 0.3 scheme
    (the official SDK's card resolver) reads these instead of the 1.0 member: anything else
    (a lower-cased `bearer`, a description left out) would be a different card to it, and a
    signature over the 1.0 card would not verify."""
    for member, v03_type in _V03_TYPES.items():
        fields = scheme.get(member)
        if isinstance(fields, dict):
            converted = {"type": v03_type, **fields}
            if v03_type == "apiKey":
                converted["in"] = converted.pop("location", "header")
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
