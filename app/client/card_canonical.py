"""The agent card as an A2A 1.0 parser reads it, and the canonical bytes its signatures cover.

A signature on a card (A2A 1.0, section 8.4) covers the RFC 8785 (JCS) form of the card without
`signatures`. The official SDK's verifier does not canonicalize the bytes it was served: it
canonicalizes its own 1.0 parse of them (a protobuf `AgentCard`: unknown members dropped, empty
values left out, after mapping a 0.3 card's members to 1.0 ones as its card resolver does). So
signer and verifier must both canonicalize that parse, or a card that carries anything else (the
0.3 members beside the 1.0 ones, an extension) never verifies. This module is that parse, written
from the 1.0 schema (the SDK is not a dependency of the product), and the canonical bytes of it.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import rfc8785

# The 1.0 `AgentCard` message and the messages inside it, member by member (the JSON names of
# a2a.proto). A kind is `string`, `bool`, `bool?` (a bool with presence: `false` is kept),
# `struct` (any JSON object), a message's name, `[kind]` (a list) or `{kind}` (a map).
_SCOPES = {"scopes": "{string}"}
SCHEMA: dict[str, dict[str, str]] = {
    "AgentCard": {
        "name": "string",
        "description": "string",
        "supportedInterfaces": "[AgentInterface]",
        "provider": "AgentProvider",
        "version": "string",
        "documentationUrl": "string",
        "capabilities": "AgentCapabilities",
        "securitySchemes": "{SecurityScheme}",
        "securityRequirements": "[SecurityRequirement]",
        "defaultInputModes": "[string]",
        "defaultOutputModes": "[string]",
        "skills": "[AgentSkill]",
        "signatures": "[AgentCardSignature]",
        "iconUrl": "string",
    },
    "AgentInterface": dict.fromkeys(
        ("url", "protocolBinding", "tenant", "protocolVersion"), "string"
    ),
    "AgentProvider": {"url": "string", "organization": "string"},
    "AgentCapabilities": {
        "streaming": "bool?",
        "pushNotifications": "bool?",
        "extensions": "[AgentExtension]",
        "extendedAgentCard": "bool?",
    },
    "AgentExtension": {
        "uri": "string",
        "description": "string",
        "required": "bool",
        "params": "struct",
    },
    "SecurityScheme": {
        "apiKeySecurityScheme": "APIKeySecurityScheme",
        "httpAuthSecurityScheme": "HTTPAuthSecurityScheme",
        "oauth2SecurityScheme": "OAuth2SecurityScheme",
        "openIdConnectSecurityScheme": "OpenIdConnectSecurityScheme",
        "mtlsSecurityScheme": "MutualTlsSecurityScheme",
    },
    "APIKeySecurityScheme": dict.fromkeys(("description", "location", "name"), "string"),
    "HTTPAuthSecurityScheme": dict.fromkeys(("description", "scheme", "bearerFormat"), "string"),
    "OAuth2SecurityScheme": {
        "description": "string",
        "flows": "OAuthFlows",
        "oauth2MetadataUrl": "string",
    },
    "OAuthFlows": {
        "authorizationCode": "AuthorizationCodeOAuthFlow",
        "clientCredentials": "ClientCredentialsOAuthFlow",
        "implicit": "ImplicitOAuthFlow",
        "password": "PasswordOAuthFlow",
        "deviceCode": "DeviceCodeOAuthFlow",
    },
    "AuthorizationCodeOAuthFlow": {
        **dict.fromkeys(("authorizationUrl", "tokenUrl", "refreshUrl"), "string"),
        **_SCOPES,
        "pkceRequired": "bool",
    },
    "ClientCredentialsOAuthFlow": {"tokenUrl": "string", "refreshUrl": "string", **_SCOPES},
    "ImplicitOAuthFlow": {"authorizationUrl": "string", "refreshUrl": "string", **_SCOPES},
    "PasswordOAuthFlow": {"tokenUrl": "string", "refreshUrl": "string", **_SCOPES},
    "DeviceCodeOAuthFlow": {
        **dict.fromkeys(("deviceAuthorizationUrl", "tokenUrl", "refreshUrl"), "string"),
        **_SCOPES,
    },
    "OpenIdConnectSecurityScheme": {"description": "string", "openIdConnectUrl": "string"},
    "MutualTlsSecurityScheme": {"description": "string"},
    "SecurityRequirement": {"schemes": "{StringList}"},
    "StringList": {"list": "[string]"},
    "AgentSkill": {
        **dict.fromkeys(("id", "name", "description"), "string"),
        **dict.fromkeys(("tags", "examples", "inputModes", "outputModes"), "[string]"),
        "securityRequirements": "[SecurityRequirement]",
    },
    "AgentCardSignature": {"protected": "string", "signature": "string", "header": "struct"},
}
ONE_OF = {"SecurityScheme", "OAuthFlows"}
"""Messages whose members are one oneof: a parser refuses two of them set at once."""
OPTIONAL = {"documentationUrl", "iconUrl"}
"""Strings with presence (each its own oneof): given twice (`icon_url` and `iconUrl`), refused."""

# The 0.3 scheme types (`type`) and the 1.0 member each becomes (the SDK's card resolver).
V03_SCHEME_TYPES = {
    "apiKey": "apiKeySecurityScheme",
    "http": "httpAuthSecurityScheme",
    "oauth2": "oauth2SecurityScheme",
    "openIdConnect": "openIdConnectSecurityScheme",
    "mutualTLS": "mtlsSecurityScheme",
}


class CardFormatError(ValueError):
    """The card is not one a 1.0 parser accepts (a member of the wrong type, two of a oneof)."""


def card_as_v1(card: dict[str, Any]) -> dict[str, Any]:
    """The card as a 1.0 parser reads it: the 0.3 members mapped to 1.0 ones where the card
    lacks those, unknown members dropped, empty values left out (never `card` itself changed).
    CardFormatError if a parser would refuse it."""
    if not isinstance(card, dict):
        raise CardFormatError("an agent card is a JSON object")
    data = copy.deepcopy(card)
    try:
        _v03_to_v1(data)
    except (TypeError, AttributeError) as exc:
        raise CardFormatError(f"invalid agent card structure: {exc}") from exc
    return _without_empty(_message("AgentCard", data, "card")) or {}


def canonical_card(card: dict[str, Any]) -> bytes:
    """The bytes a signature on `card` covers: the RFC 8785 form of its 1.0 parse, without
    `signatures`."""
    parsed = card_as_v1(card)
    parsed.pop("signatures", None)
    try:
        return rfc8785.dumps(_without_empty(parsed))  # an empty card is `null`, as the SDK has it
    except rfc8785.CanonicalizationError as exc:
        raise CardFormatError(f"the card has no canonical form: {exc}") from exc


def _v03_to_v1(data: dict[str, Any]) -> None:
    """The SDK resolver's mapping of a 0.3 card's members (a2a.client.card_resolver)."""
    if data.pop("supportsAuthenticatedExtendedCard", None):
        data.setdefault("capabilities", {}).setdefault("extendedAgentCard", True)
    url = data.pop("url", None)
    binding = data.pop("preferredTransport", "JSONRPC")
    version = data.pop("protocolVersion", "0.3.0")
    additional = data.pop("additionalInterfaces", None) or []
    if "supportedInterfaces" not in data and url:
        data["supportedInterfaces"] = [
            {"url": url, "protocolBinding": binding, "protocolVersion": version},
            *(
                {"url": other.get("url"), "protocolBinding": other.get("transport")}
                | {"protocolVersion": version}
                for other in additional
            ),
        ]
    for holder in (data, *data.get("skills", [])):
        security = holder.pop("security", None)
        if "securityRequirements" not in holder and security is not None:
            holder["securityRequirements"] = [
                {"schemes": {name: {"list": scopes} for name, scopes in entry.items()}}
                for entry in security
            ]
    for scheme in (data.get("securitySchemes") or {}).values():
        member = V03_SCHEME_TYPES.get(scheme.pop("type", None))
        if member is not None:
            if member == "apiKeySecurityScheme" and "in" in scheme:
                scheme["location"] = scheme.pop("in")
            fields = dict(scheme)
            scheme.clear()
            scheme[member] = fields


_SNAKE = re.compile(r"_([a-z0-9])")


def _message(name: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CardFormatError(f"{where} must be an object")
    members = SCHEMA[name]
    parsed: dict[str, Any] = {}
    for key, item in value.items():
        # A parser takes a member's JSON name or its proto name (`supported_interfaces`).
        json_name = _SNAKE.sub(lambda m: m.group(1).upper(), key)
        if json_name not in members or item is None:
            continue  # unknown members are ignored; null is "not set"
        kind = members[json_name]
        if json_name in parsed and (name in ONE_OF or kind.endswith("?") or json_name in OPTIONAL):
            raise CardFormatError(f"{where}.{json_name} is given twice")
        parsed[json_name] = _value(kind, item, f"{where}.{json_name}")  # else: the last one
    if name in ONE_OF and len(parsed) > 1:
        raise CardFormatError(f"{where} sets more than one of {sorted(parsed)}")
    return parsed


def _value(kind: str, value: Any, where: str) -> Any:
    if kind.startswith("["):
        if not isinstance(value, list):
            raise CardFormatError(f"{where} must be a list")
        return [_value(kind[1:-1], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if kind.startswith("{"):
        if not isinstance(value, dict):
            raise CardFormatError(f"{where} must be an object")
        return {key: _value(kind[1:-1], item, f"{where}.{key}") for key, item in value.items()}
    if kind == "string":
        if not isinstance(value, str):
            raise CardFormatError(f"{where} must be a string")
        return value
    if kind in ("bool", "bool?"):
        if not isinstance(value, bool):
            raise CardFormatError(f"{where} must be true or false")
        return value if value or kind == "bool?" else None  # a plain `false` is not printed
    if kind == "struct":
        if not isinstance(value, dict):
            raise CardFormatError(f"{where} must be an object")
        return _struct(value)
    return _message(kind, value, where)


def _struct(value: Any) -> Any:
    """A `google.protobuf.Struct` value as the parser gives it back: every number a double."""
    if isinstance(value, dict):
        return {key: _struct(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_struct(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise CardFormatError(f"the number {value} is beyond a double") from None
    return value


def _without_empty(value: Any) -> Any:
    """Empty strings, lists and objects (and nulls) left out, recursively; None if all is."""
    if isinstance(value, dict):
        kept = {k: v for k, item in value.items() if (v := _without_empty(item)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [v for item in value if (v := _without_empty(item)) is not None]
        return items or None
    if value == "" or value is None:
        return None
    return value
