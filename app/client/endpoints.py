"""Which of an agent card's interfaces a client talks to: its generation, binding and tenant.

a caller that names a binding (`a2a --binding grpc`): that binding's interface, 1.0 first
the CLI without one: the card's first interface it speaks, 1.0 before 0.3 (a 1.0 card lists
its interfaces in the agent's order of preference), so a gRPC-only card needs no flag
the remote-agent tools: JSON-RPC before HTTP+JSON (they do not speak gRPC)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

# The protocol generations a card may offer (the server's `app.a2a.versions.Generation`: the
# client imports nothing of the server's, so it names them itself).
Generation = Literal["1.0", "0.3"]
WELL_KNOWN_CARD = "/.well-known/agent-card.json"
BINDINGS = {"jsonrpc": "JSONRPC", "rest": "HTTP+JSON", "grpc": "GRPC"}
"""The CLI's names of the bindings -> the card's `protocolBinding`."""
HTTP_BINDINGS = ("JSONRPC", "HTTP+JSON")


class NoInterface(Exception):
    """The card offers no interface the caller can talk to."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    binding: str  # JSONRPC | HTTP+JSON | GRPC
    generation: Generation
    tenant: str | None = None
    """The interface's `tenant` (1.0): sent with every request, as the spec asks a client to."""


def card_url_of(url: str) -> str:
    """The card of an agent's base URL; a URL ending in .json is the card itself."""
    return url if urlsplit(url).path.endswith(".json") else url.rstrip("/") + WELL_KNOWN_CARD


def offered(card: dict[str, Any]) -> list[Endpoint]:
    """Every interface of the card (1.0's `supportedInterfaces`, 0.3's `url` and
    `additionalInterfaces`), in the card's order."""
    found: list[Endpoint] = []
    for interface in card.get("supportedInterfaces") or []:
        version: Generation = (
            "0.3" if str(interface.get("protocolVersion", "")).startswith("0.") else "1.0"
        )
        binding, tenant = interface.get("protocolBinding", ""), interface.get("tenant") or None
        found.append(Endpoint(interface["url"], binding, version, tenant))
    if card.get("url"):
        found.append(Endpoint(card["url"], card.get("preferredTransport", "JSONRPC"), "0.3"))
        for interface in card.get("additionalInterfaces") or []:
            found.append(Endpoint(interface["url"], interface.get("transport", ""), "0.3"))
    return found


def choose_endpoint(
    card: dict[str, Any], *, binding: str | None = None, card_order: bool = False
) -> Endpoint:
    """The interface to talk to, 1.0 before 0.3: of `binding` (a `protocolBinding`) when given;
    else, with `card_order`, the card's first of JSON-RPC, HTTP+JSON and 1.0 gRPC; else
    JSON-RPC before HTTP+JSON. NoInterface when there is none."""
    endpoints = offered(card)
    # The client speaks gRPC in 1.0 only (0.3's gRPC service is another one, a2a.v1).
    speaks = [binding] if binding else [*HTTP_BINDINGS, *(["GRPC"] if card_order else [])]
    usable = [
        endpoint
        for endpoint in endpoints
        if endpoint.binding in speaks
        and (endpoint.binding != "GRPC" or endpoint.generation == "1.0")
    ]
    if card_order or binding:
        ranked = [e for generation in ("1.0", "0.3") for e in usable if e.generation == generation]
    else:
        ranked = [
            e
            for generation in ("1.0", "0.3")
            for kind in HTTP_BINDINGS
            for e in usable
            if e.generation == generation and e.binding == kind
        ]
    if ranked:
        return ranked[0]
    if binding:
        named = {value: key for key, value in BINDINGS.items()}.get(binding, binding)
        there = sorted({f"{e.binding} {e.generation}" for e in endpoints}) or ["none"]
        raise NoInterface(
            f"the agent card offers no {named} interface"
            f"{' in A2A 1.0' if binding == 'GRPC' else ''} (it offers: {', '.join(there)})"
        )
    wanted = "JSON-RPC, HTTP+JSON or gRPC" if card_order else "JSON-RPC or HTTP+JSON"
    raise NoInterface(f"the agent card offers no {wanted} interface")
